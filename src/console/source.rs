//! Where the console's pages read from: the configured DynamoDB through [`crate::read`] (the one
//! read layer the CLI and the read API use), or a deployed stack's read API, each request signed
//! with SigV4 from the operator's own AWS credentials. Both answer with the read layer's views as
//! JSON (the read API serves exactly those), so every page renders the same from either.

use std::collections::HashSet;
use std::future::Future;

use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::domain::{AccountId, ProviderId, Reference};
use crate::pipeline::Store;
use crate::read::{self, DeliveryQuery, ReadError};
use crate::store::StoreError;

/// Why a page has no data.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    /// Retry later: the store or the API did not answer.
    #[error("{0}")]
    Unavailable(String),
}

impl From<ReadError> for SourceError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::NotFound { what } => SourceError::NotFound(format!("{what} not found")),
            ReadError::Invalid { field, reason } => {
                SourceError::Invalid(format!("{field} {reason}"))
            }
            ReadError::Store(e) => SourceError::Unavailable(e.to_string()),
        }
    }
}

impl From<StoreError> for SourceError {
    fn from(e: StoreError) -> Self {
        SourceError::Unavailable(e.to_string())
    }
}

fn json(value: &impl serde::Serialize) -> Result<Value, SourceError> {
    serde_json::to_value(value).map_err(|e| SourceError::Unavailable(e.to_string()))
}

/// The reads the pages make. Each returns a read-layer view as JSON.
pub trait Source: Send + Sync + 'static {
    /// What the page header names as the data source.
    fn label(&self) -> String;
    /// One page of the delivery log (`DeliveriesPage`).
    fn deliveries(
        &self,
        q: &DeliveryQuery,
    ) -> impl Future<Output = Result<Value, SourceError>> + Send;
    /// One delivery (`DeliveryView`, with `raw_body` where the source serves bodies).
    fn delivery(&self, id: &str) -> impl Future<Output = Result<Value, SourceError>> + Send;
    /// A payment (`PaymentView`).
    fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> impl Future<Output = Result<Value, SourceError>> + Send;
    /// An account's balances (`BalanceView`, with `postings` where the source serves them).
    fn balance(
        &self,
        account: &AccountId,
    ) -> impl Future<Output = Result<Value, SourceError>> + Send;
    /// Payments open and untouched since `before_ms`, or `None` when the source cannot list
    /// them (the read API has no such route).
    fn open_payments(
        &self,
        before_ms: i64,
    ) -> impl Future<Output = Result<Option<Vec<Value>>, SourceError>> + Send;
    /// Payouts that need a person (past `horizon_ms`, or sent as often as allowed with no
    /// transfer shown), or `None` when the source cannot list them (the read API).
    fn unsettled_payouts(
        &self,
        horizon_ms: i64,
    ) -> impl Future<Output = Result<Option<Vec<Value>>, SourceError>> + Send;
    /// Deliveries per minute in `[since_ms, until_ms)` from the log's rollups
    /// ([`read::tally`]), or `None` when the source has none (the read API: pages walk).
    fn tally(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> impl Future<Output = Result<Option<read::Tally>, SourceError>> + Send;
    /// Deliveries per `{provider}#{outcome}` of each whole closed UTC day from `since_ms`'s
    /// ([`read::day_totals`]), or `None` when the source has none (the read API).
    fn day_totals(
        &self,
        since_ms: i64,
    ) -> impl Future<Output = Result<Option<crate::eventlog::Rollups>, SourceError>> + Send;
    /// Payouts not settled yet (reserved, sent, or waiting for the provider's word), oldest
    /// first, at most `limit`; `None` when the source cannot list them (the read API).
    fn open_payouts(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Option<Vec<Value>>, SourceError>> + Send;
    /// What only the store can find by `text`: a payout under that id (`PayoutRecord` as JSON)
    /// and the payments a provider transaction id is bound to (`{provider, reference}`), or
    /// `None` when the source cannot look (the read API).
    fn find(
        &self,
        text: &str,
    ) -> impl Future<Output = Result<Option<Vec<Value>>, SourceError>> + Send;
    /// Of `keys`, those whose claim is DONE now (someone finished the movement: a replay, the
    /// provider's redelivery, reconciliation), or `None` when the source cannot tell. Each key
    /// comes with its delivery's payment reference, where a refund's claim may be held.
    fn settled(
        &self,
        keys: &[(String, Option<String>)],
    ) -> impl Future<Output = Result<Option<HashSet<String>>, SourceError>> + Send;
}

/// The configured DynamoDB, read through [`crate::read`].
#[derive(Debug, Clone)]
pub struct StoreSource<S> {
    pub store: S,
    pub label: String,
}

impl<S: Store + Clone + Send + Sync + 'static> Source for StoreSource<S> {
    fn label(&self) -> String {
        self.label.clone()
    }

    async fn deliveries(&self, q: &DeliveryQuery) -> Result<Value, SourceError> {
        json(&read::deliveries(&self.store, q).await?)
    }

    async fn delivery(&self, id: &str) -> Result<Value, SourceError> {
        json(&read::delivery(&self.store, id).await?)
    }

    async fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Value, SourceError> {
        json(&read::payment(&self.store, provider, reference).await?)
    }

    async fn balance(&self, account: &AccountId) -> Result<Value, SourceError> {
        json(&read::balance(&self.store, account, true).await?)
    }

    async fn open_payments(&self, before_ms: i64) -> Result<Option<Vec<Value>>, SourceError> {
        let open = read::open_payments(&self.store, before_ms, 100).await?;
        Ok(Some(open.iter().map(json).collect::<Result<Vec<_>, _>>()?))
    }

    async fn unsettled_payouts(&self, horizon_ms: i64) -> Result<Option<Vec<Value>>, SourceError> {
        let now = self.store.now_ms();
        let list = read::unsettled_payouts(&self.store, now, horizon_ms, 100).await?;
        Ok(Some(list.iter().map(json).collect::<Result<Vec<_>, _>>()?))
    }

    async fn tally(
        &self,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Option<read::Tally>, SourceError> {
        let now = self.store.now_ms();
        Ok(Some(
            read::tally(&self.store, since_ms, until_ms, now).await?,
        ))
    }

    async fn day_totals(
        &self,
        since_ms: i64,
    ) -> Result<Option<crate::eventlog::Rollups>, SourceError> {
        let now = self.store.now_ms();
        Ok(Some(read::day_totals(&self.store, since_ms, now).await?))
    }

    async fn open_payouts(&self, limit: usize) -> Result<Option<Vec<Value>>, SourceError> {
        let open = self.store.open_payouts(i64::MAX, limit).await?;
        Ok(Some(open.iter().map(json).collect::<Result<Vec<_>, _>>()?))
    }

    async fn find(&self, text: &str) -> Result<Option<Vec<Value>>, SourceError> {
        let mut found = Vec::new();
        if let Some(id) = crate::payouts::PayoutId::parse(text) {
            if let Some(p) = self.store.payout(&id).await? {
                found.push(serde_json::json!({ "kind": "payout", "payout": json(&p)? }));
            }
        }
        for provider in crate::providers::ids() {
            if let Some(reference) = self.store.bound_reference(provider, text).await? {
                found.push(
                    serde_json::json!({ "kind": "transaction", "provider": provider.as_str(),
                    "reference": reference.as_str() }),
                );
            }
        }
        Ok(Some(found))
    }

    async fn settled(
        &self,
        keys: &[(String, Option<String>)],
    ) -> Result<Option<HashSet<String>>, SourceError> {
        let keys: Vec<_> = keys
            .iter()
            .map(|(k, reference)| {
                (
                    crate::domain::IdempotencyKey::from_stored(k.clone()),
                    reference
                        .as_deref()
                        .and_then(|r| crate::domain::Reference::parse(r).ok()),
                )
            })
            .collect();
        let done = self.store.done_among(&keys).await?;
        Ok(Some(done.into_iter().map(|k| k.to_string()).collect()))
    }
}

/// A deployed stack's read API (`https://{api}.execute-api.{region}.amazonaws.com`), every GET
/// signed with SigV4 (`execute-api`) from the standard credential chain, so the console needs no
/// new door in AWS: the operator's IAM identity must be allowed `execute-api:Invoke` there.
pub struct ApiSource {
    base: String,
    region: String,
    credentials: aws_credential_types::provider::SharedCredentialsProvider,
    client: Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Empty<bytes::Bytes>,
    >,
}

impl std::fmt::Debug for ApiSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiSource")
            .field("base", &self.base)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

impl ApiSource {
    /// `base` is the read API's URL; credentials and region come from the standard chain
    /// (environment, profile, SSO, instance role), the region also from `region`.
    pub async fn new(base: &str, region: Option<String>) -> Result<Self, SourceError> {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .load()
            .await;
        let credentials = sdk
            .credentials_provider()
            .ok_or_else(|| SourceError::Invalid("no AWS credentials found".into()))?;
        let region = region
            .or_else(|| sdk.region().map(ToString::to_string))
            .ok_or_else(|| {
                SourceError::Invalid("no AWS region: set AWS_REGION or pass --region".into())
            })?;
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|e| SourceError::Invalid(format!("no root certificates: {e}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(ApiSource {
            base: base.trim_end_matches('/').to_owned(),
            region,
            credentials,
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// GETs `path_and_query` signed, and reads the JSON answer (an error answer as its error).
    async fn get(&self, path_and_query: &str) -> Result<Value, SourceError> {
        let url = format!("{}{path_and_query}", self.base);
        let request = signed_get(&url, &self.region, &self.credentials).await?;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| SourceError::Unavailable(format!("GET {url}: {e}")))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| SourceError::Unavailable(format!("GET {url}: {e}")))?
            .to_bytes();
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let message = || {
            value
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_owned()
        };
        match status {
            200 => Ok(value),
            404 => Err(SourceError::NotFound(message())),
            400 => Err(SourceError::Invalid(message())),
            _ => Err(SourceError::Unavailable(format!("{status}: {}", message()))),
        }
    }
}

/// A GET of `url` with SigV4 headers for `execute-api` in `region`.
async fn signed_get(
    url: &str,
    region: &str,
    credentials: &aws_credential_types::provider::SharedCredentialsProvider,
) -> Result<http::Request<Empty<bytes::Bytes>>, SourceError> {
    use aws_credential_types::provider::ProvideCredentials;
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let creds = credentials
        .provide_credentials()
        .await
        .map_err(|e| SourceError::Invalid(format!("AWS credentials: {e}")))?;
    let identity = creds.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("execute-api")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SourceError::Invalid(format!("SigV4: {e}")))?
        .into();
    let signable = SignableRequest::new("GET", url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| SourceError::Invalid(format!("SigV4: {e}")))?;
    let (instructions, _) = sign(signable, &params)
        .map_err(|e| SourceError::Invalid(format!("SigV4: {e}")))?
        .into_parts();
    let mut request = http::Request::get(url)
        .body(Empty::new())
        .map_err(|e| SourceError::Invalid(format!("{url}: {e}")))?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(request)
}

/// The read API's query string for `q` (the names `GET /deliveries` reads).
fn api_query(q: &DeliveryQuery) -> String {
    let f = &q.filter;
    let opt = |v: Option<String>| v.unwrap_or_default();
    super::html::query(&[
        ("provider", opt(f.provider.map(|p| p.to_string()))),
        (
            "reference",
            opt(f.reference.as_ref().map(ToString::to_string)),
        ),
        ("event_id", opt(f.event_id.clone())),
        ("order_id", opt(f.order_id.clone())),
        ("outcome", opt(f.outcome.map(|o| o.as_str().to_owned()))),
        ("since_ms", opt(f.since_ms.map(|t| t.to_string()))),
        ("until_ms", opt(f.until_ms.map(|t| t.to_string()))),
        ("limit", q.limit.to_string()),
        ("cursor", opt(q.cursor.clone())),
    ])
}

impl Source for ApiSource {
    fn label(&self) -> String {
        format!("read API {}", self.base)
    }

    async fn deliveries(&self, q: &DeliveryQuery) -> Result<Value, SourceError> {
        self.get(&format!("/deliveries?{}", api_query(q))).await
    }

    /// Found in the millisecond its id names; the read API never serves bodies.
    async fn delivery(&self, id: &str) -> Result<Value, SourceError> {
        let at_ms: i64 = id
            .get(..13)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| SourceError::Invalid("delivery is not a delivery id".into()))?;
        let mut q = DeliveryQuery {
            limit: read::MAX_PAGE,
            ..DeliveryQuery::default()
        };
        q.filter.since_ms = Some(at_ms);
        q.filter.until_ms = Some(at_ms + 1);
        loop {
            let page = self.deliveries(&q).await?;
            let found = page["deliveries"]
                .as_array()
                .and_then(|l| l.iter().find(|d| d["id"] == id).cloned());
            if let Some(d) = found {
                return Ok(d);
            }
            match page["next_cursor"].as_str() {
                Some(next) => q.cursor = Some(next.to_owned()),
                None => return Err(SourceError::NotFound(format!("delivery {id} not found"))),
            }
        }
    }

    async fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Value, SourceError> {
        let path = format!(
            "/payments/{}/{}",
            super::html::enc(provider.as_str()),
            super::html::enc(reference.as_str())
        );
        self.get(&path).await
    }

    async fn balance(&self, account: &AccountId) -> Result<Value, SourceError> {
        let path = format!("/accounts/{}/balance", super::html::enc(account.as_str()));
        self.get(&path).await
    }

    async fn open_payments(&self, _before_ms: i64) -> Result<Option<Vec<Value>>, SourceError> {
        Ok(None)
    }

    async fn unsettled_payouts(&self, _horizon_ms: i64) -> Result<Option<Vec<Value>>, SourceError> {
        Ok(None)
    }

    async fn day_totals(
        &self,
        _since_ms: i64,
    ) -> Result<Option<crate::eventlog::Rollups>, SourceError> {
        Ok(None)
    }

    async fn tally(&self, _since: i64, _until: i64) -> Result<Option<read::Tally>, SourceError> {
        Ok(None)
    }

    async fn open_payouts(&self, _limit: usize) -> Result<Option<Vec<Value>>, SourceError> {
        Ok(None)
    }

    async fn find(&self, _text: &str) -> Result<Option<Vec<Value>>, SourceError> {
        Ok(None)
    }

    async fn settled(
        &self,
        _keys: &[(String, Option<String>)],
    ) -> Result<Option<HashSet<String>>, SourceError> {
        Ok(None)
    }
}
