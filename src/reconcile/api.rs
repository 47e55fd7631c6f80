//! Asking a provider for the truth about a payment: the small trait reconciliation needs, and its
//! HTTP implementation. *Which* path to ask and *how to read* the answer belong to the provider's
//! adapter (`Provider::api_path`, `Provider::read_api`), the same code that reads its webhooks;
//! this module only moves bytes, bounded: a timeout per call and a cap on the answer's size.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::domain::ProviderId;
use crate::payouts::{Ambiguous, PayoutId, TransferAnswer, TransferCall, Transfers};
use crate::providers::transfers::ApiCall;

pub use crate::providers::ProviderTruth;

/// The largest provider answer read (a verify answer is a few KB).
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// How long one provider call may take, connection included, unless set otherwise.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no API configured for {0}")]
    NotConfigured(ProviderId),
    #[error("request to {provider} failed")]
    Transport {
        provider: ProviderId,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{provider} did not answer within {timeout_ms} ms")]
    Timeout {
        provider: ProviderId,
        timeout_ms: u128,
    },
    #[error("{provider} answered HTTP {status}")]
    Status { provider: ProviderId, status: u16 },
    #[error("{provider} answered something we cannot read: {reason}")]
    Unreadable {
        provider: ProviderId,
        reason: String,
    },
}

/// The capability reconciliation needs from a provider's API: the answer's bytes at `path`
/// (`None` for 404).
#[allow(async_fn_in_trait)]
pub trait ProviderApi {
    async fn fetch(&self, provider: ProviderId, path: &str) -> Result<Option<Bytes>, ApiError>;
}

/// Where and how to call one provider's API.
#[derive(Clone)]
pub struct ApiEndpoint {
    pub provider: ProviderId,
    pub base_url: String,
    pub api_key: String,
    /// `api_key` is `id:secret` for HTTP basic auth rather than a bearer token.
    pub basic_auth: bool,
}

impl std::fmt::Debug for ApiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEndpoint")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl ApiEndpoint {
    /// The `Authorization` value: bearer, or basic (`base64(id:secret)`).
    fn authorization(&self) -> String {
        if self.basic_auth {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD.encode(self.api_key.as_bytes());
            format!("Basic {token}")
        } else {
            format!("Bearer {}", self.api_key)
        }
    }
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// The HTTPS client with the system's root certificates (rustls, aws-lc).
fn build_client() -> Result<HttpsClient, String> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())
        .map_err(|e| format!("no TLS root certificates: {e}"))?
        .https_or_http()
        .enable_http1()
        .build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

type HttpsClient = Client<Https, Full<Bytes>>;

/// Real HTTP client for the providers' APIs (TLS by rustls with the SDK's aws-lc provider, so
/// the binary carries one TLS stack).
pub struct HttpProviderApi {
    /// Built on the first call, not at start: reading and parsing the system's root
    /// certificates was 89% of a process's instructions from start to ready (twice: the payout
    /// service's and reconciliation's), and a process that only takes webhooks never calls a
    /// provider (docs/performance.md, "Init").
    client: OnceLock<Result<HttpsClient, String>>,
    endpoints: Vec<ApiEndpoint>,
    timeout: Duration,
    /// The generic provider's transfer visibility window, when configured (its contract is the
    /// sender's own; every other provider's is its documented one).
    generic_visibility_ms: Option<i64>,
}

impl HttpProviderApi {
    /// The client for `endpoints`; its TLS set-up waits for the first call ([`Self::ready`]).
    /// Never fails today; the `Result` keeps callers written for an eager set-up unchanged.
    pub fn new(endpoints: Vec<ApiEndpoint>) -> Result<Self, std::io::Error> {
        Ok(HttpProviderApi {
            client: OnceLock::new(),
            endpoints,
            timeout: CALL_TIMEOUT,
            generic_visibility_ms: None,
        })
    }

    /// The generic sender's visibility window (`PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS`).
    pub fn with_generic_visibility_ms(mut self, ms: Option<i64>) -> Self {
        self.generic_visibility_ms = ms;
        self
    }

    /// Sets the client up if it is not yet (the root certificates read once per process), and
    /// says why it cannot be: a payout is refused before anything is reserved when no call
    /// could ever leave.
    pub fn ready(&self) -> Result<(), String> {
        self.client
            .get_or_init(build_client)
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }

    fn client(&self, provider: ProviderId) -> Result<&HttpsClient, ApiError> {
        self.client
            .get_or_init(build_client)
            .as_ref()
            .map_err(|e| ApiError::Transport {
                provider,
                source: e.clone().into(),
            })
    }

    /// The same client with another per-call timeout (tests use a short one).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    async fn get(&self, ep: &ApiEndpoint, path: &str) -> Result<Option<Bytes>, ApiError> {
        let provider = ep.provider;
        let transport = |e: Box<dyn std::error::Error + Send + Sync>| ApiError::Transport {
            provider,
            source: e,
        };
        let url = format!("{}{path}", ep.base_url.trim_end_matches('/'));
        let req = http::Request::get(&url)
            .header("authorization", ep.authorization())
            .header("accept", "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| transport(Box::new(e)))?;
        let res = self
            .client(provider)?
            .request(req)
            .await
            .map_err(|e| transport(Box::new(e)))?;
        let status = res.status().as_u16();
        if status == 404 {
            return Ok(None);
        }
        if !(200..300).contains(&status) {
            return Err(ApiError::Status { provider, status });
        }
        // A provider (or something in front of it) answering megabytes is refused, not buffered.
        let body = Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(transport)?;
        Ok(Some(body.to_bytes()))
    }
}

impl ProviderApi for HttpProviderApi {
    async fn fetch(&self, provider: ProviderId, path: &str) -> Result<Option<Bytes>, ApiError> {
        let ep = self
            .endpoints
            .iter()
            .find(|e| e.provider == provider)
            .ok_or(ApiError::NotConfigured(provider))?;
        tokio::time::timeout(self.timeout, self.get(ep, path))
            .await
            .map_err(|_| ApiError::Timeout {
                provider,
                timeout_ms: self.timeout.as_millis(),
            })?
    }
}

impl HttpProviderApi {
    fn endpoint(&self, provider: ProviderId) -> Result<&ApiEndpoint, ApiError> {
        self.endpoints
            .iter()
            .find(|e| e.provider == provider)
            .ok_or(ApiError::NotConfigured(provider))
    }

    /// One `POST`: the status and the body (bounded) of any answer.
    async fn post(&self, ep: &ApiEndpoint, call: &ApiCall) -> Result<(u16, Bytes), ApiError> {
        let provider = ep.provider;
        let transport = |e: Box<dyn std::error::Error + Send + Sync>| ApiError::Transport {
            provider,
            source: e,
        };
        let url = format!("{}{}", ep.base_url.trim_end_matches('/'), call.path);
        let mut req = http::Request::post(&url)
            .header("authorization", ep.authorization())
            .header("accept", "application/json")
            .header("content-type", call.content_type);
        if let Some(key) = &call.idempotency_key {
            req = req.header("idempotency-key", key);
        }
        let req = req
            .body(Full::new(Bytes::from(call.body.clone())))
            .map_err(|e| transport(Box::new(e)))?;
        let res = self
            .client(provider)?
            .request(req)
            .await
            .map_err(|e| transport(Box::new(e)))?;
        let status = res.status().as_u16();
        let body = Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(transport)?;
        Ok((status, body.to_bytes()))
    }

    async fn bounded<T>(
        &self,
        provider: ProviderId,
        f: impl std::future::Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        tokio::time::timeout(self.timeout, f)
            .await
            .map_err(|_| ApiError::Timeout {
                provider,
                timeout_ms: self.timeout.as_millis(),
            })?
    }
}

fn transfer_def(
    provider: ProviderId,
) -> Result<crate::providers::transfers::TransferDef, Ambiguous> {
    crate::providers::def(provider)
        .and_then(|d| d.transfers)
        .ok_or_else(|| Ambiguous(format!("{provider} has no transfer API")))
}

/// A send's refusal, told apart by the provider's own words: one proving it holds a transfer
/// under the reference is [`TransferAnswer::Held`], any other a refusal. Its message is kept
/// (bounded) for the record and the person who may read it.
fn refusal(
    def: &crate::providers::transfers::TransferDef,
    status: u16,
    body: &[u8],
) -> TransferAnswer {
    let said = crate::providers::transfers::error_text(
        body,
        &["message", "error.message", "error.code", "code", "error"],
    );
    let said: String = said.chars().take(200).collect();
    let status_text = if said.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {said}")
    };
    if (def.held)(status, body) {
        TransferAnswer::Held {
            status: format!("held: {status_text}"),
        }
    } else {
        TransferAnswer::Refused {
            status: format!("refused: {status_text}"),
        }
    }
}

/// Anything but a readable answer is ambiguous: the transfer may or may not exist.
fn ambiguous(e: impl std::fmt::Display) -> Ambiguous {
    Ambiguous(e.to_string())
}

impl Transfers for HttpProviderApi {
    async fn send(
        &self,
        provider: ProviderId,
        call: TransferCall<'_>,
    ) -> Result<TransferAnswer, Ambiguous> {
        let def = transfer_def(provider)?;
        let ep = self.endpoint(provider).map_err(ambiguous)?;
        // A destination the provider's call cannot be built from never reaches it: a refusal
        // of our own, as certain as the provider's.
        let api_call = match (def.send)(&call) {
            Ok(c) => c,
            Err(e) => {
                return Ok(TransferAnswer::Refused {
                    status: format!("not sent: {e}"),
                })
            }
        };
        let (status, body) = self
            .bounded(provider, self.post(ep, &api_call))
            .await
            .map_err(ambiguous)?;
        match status {
            200..=299 => (def.read)(&body, call.payout, false).map_err(ambiguous),
            // Timeouts, conflicts (a request still running under the key) and 5xx: unknown.
            408 | 409 | 425 | 429 | 500..=599 => {
                Err(Ambiguous(format!("{provider} answered HTTP {status}")))
            }
            _ => Ok(refusal(&def, status, &body)),
        }
    }

    async fn ask(
        &self,
        provider: ProviderId,
        payout: &PayoutId,
    ) -> Result<TransferAnswer, Ambiguous> {
        let def = transfer_def(provider)?;
        let ep = self.endpoint(provider).map_err(ambiguous)?;
        let path = (def.ask_path)(payout);
        match self
            .bounded(provider, self.get(ep, &path))
            .await
            .map_err(ambiguous)?
        {
            Some(body) => (def.read)(&body, payout, true).map_err(ambiguous),
            None => Ok(TransferAnswer::Absent {
                status: "not found".into(),
            }),
        }
    }

    fn supports(&self, provider: ProviderId) -> bool {
        self.endpoint(provider).is_ok()
            && crate::providers::def(provider).is_some_and(|d| d.transfers.is_some())
    }

    fn bound_ms(&self) -> i64 {
        i64::try_from(self.timeout.as_millis()).unwrap_or(i64::MAX)
    }

    fn visibility_ms(&self, provider: ProviderId) -> i64 {
        match (provider, self.generic_visibility_ms) {
            (ProviderId::GENERIC, Some(ms)) => ms,
            _ => transfer_def(provider).map_or(0, |d| d.visibility_ms),
        }
    }
}
