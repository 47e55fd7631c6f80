//! Asking a provider for the truth about a payment: the small trait reconciliation needs, and its
//! HTTP implementation (Stripe `GET /v1/payment_intents/{id}`, Paystack
//! `GET /transaction/verify/{reference}`, Flutterwave `GET /v3/transactions/verify_by_reference`,
//! and the generic provider's `GET /payments/{reference}`), with configurable base URLs.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::domain::{AccountId, Currency, Money, ProviderId, Reference};
use crate::providers::json::Fields;

/// What the provider says about a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderTruth {
    /// Paid: the money it says, and the account if its metadata carries one.
    Succeeded { money: Money, account: Option<AccountId> },
    /// Still being processed: ask again later.
    Processing,
    Failed,
    NotFound,
}

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
    #[error("{provider} answered HTTP {status}")]
    Status { provider: ProviderId, status: u16 },
    #[error("{provider} answered something we cannot read: {reason}")]
    Unreadable { provider: ProviderId, reason: String },
}

/// The capability reconciliation needs from a provider.
#[allow(async_fn_in_trait)]
pub trait ProviderApi {
    async fn payment_status(&self, provider: ProviderId, reference: &Reference) -> Result<ProviderTruth, ApiError>;
}

/// Where and how to call one provider's API.
#[derive(Clone)]
pub struct ApiEndpoint {
    pub provider: ProviderId,
    pub base_url: String,
    pub api_key: String,
    /// Metadata key holding the account (as in the webhook adapters).
    pub account_key: String,
}

impl std::fmt::Debug for ApiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEndpoint").field("provider", &self.provider).field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// Real HTTP client for the providers' APIs (TLS by rustls with the SDK's aws-lc provider, so
/// the binary carries one TLS stack).
pub struct HttpProviderApi {
    client: Client<Https, Empty<Bytes>>,
    endpoints: Vec<ApiEndpoint>,
}

impl HttpProviderApi {
    pub fn new(endpoints: Vec<ApiEndpoint>) -> Result<Self, std::io::Error> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::aws_lc_rs::default_provider())?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(HttpProviderApi { client: Client::builder(TokioExecutor::new()).build(connector), endpoints })
    }

    async fn get_json(&self, ep: &ApiEndpoint, path: &str) -> Result<Option<Value>, ApiError> {
        let provider = ep.provider;
        let url = format!("{}{path}", ep.base_url.trim_end_matches('/'));
        let req = http::Request::get(&url)
            .header("authorization", format!("Bearer {}", ep.api_key))
            .header("accept", "application/json")
            .body(Empty::new())
            .map_err(|e| ApiError::Transport { provider, source: Box::new(e) })?;
        let res = self.client.request(req).await.map_err(|e| ApiError::Transport { provider, source: Box::new(e) })?;
        let status = res.status().as_u16();
        if status == 404 {
            return Ok(None);
        }
        if !(200..300).contains(&status) {
            return Err(ApiError::Status { provider, status });
        }
        let body = res.into_body().collect().await.map_err(|e| ApiError::Transport { provider, source: Box::new(e) })?;
        serde_json::from_slice(&body.to_bytes())
            .map(Some)
            .map_err(|e| ApiError::Unreadable { provider, reason: e.to_string() })
    }
}

impl ProviderApi for HttpProviderApi {
    async fn payment_status(&self, provider: ProviderId, reference: &Reference) -> Result<ProviderTruth, ApiError> {
        let ep = self.endpoints.iter().find(|e| e.provider == provider).ok_or(ApiError::NotConfigured(provider))?;
        let path = match provider {
            ProviderId::Stripe => format!("/v1/payment_intents/{reference}"),
            ProviderId::Paystack => format!("/transaction/verify/{reference}"),
            ProviderId::Flutterwave => format!("/v3/transactions/verify_by_reference?tx_ref={reference}"),
            ProviderId::Generic => format!("/payments/{reference}"),
        };
        match self.get_json(ep, &path).await? {
            None => Ok(ProviderTruth::NotFound),
            Some(body) => interpret(provider, &body, &ep.account_key)
                .map_err(|reason| ApiError::Unreadable { provider, reason }),
        }
    }
}

/// Maps each provider's answer to a [`ProviderTruth`]. Pure, so every shape is unit-tested.
pub fn interpret(provider: ProviderId, body: &Value, account_key: &str) -> Result<ProviderTruth, String> {
    let f = Fields::new(body);
    let text = |p: &str| f.opt_str(p).map_err(|e| e.to_string()).map(|s| s.unwrap_or_default().to_owned());
    let account = |p: &str| f.opt_account(p).map_err(|e| e.to_string());
    let minor = |amount: &str, currency: &str| -> Result<Money, String> {
        let c = Currency::parse(&text(currency)?.to_uppercase()).map_err(|e| e.to_string())?;
        Money::new(f.int(amount).map_err(|e| e.to_string())?, c).map_err(|e| e.to_string())
    };
    let (status, paid) = match provider {
        ProviderId::Stripe => (text("status")?, "succeeded"),
        ProviderId::Paystack => (text("data.status")?, "success"),
        ProviderId::Flutterwave => (text("data.status")?, "successful"),
        ProviderId::Generic => (text("status")?, "succeeded"),
    };
    if status != paid {
        return Ok(match status.as_str() {
            "failed" | "canceled" | "abandoned" | "reversed" => ProviderTruth::Failed,
            _ => ProviderTruth::Processing,
        });
    }
    Ok(match provider {
        ProviderId::Stripe => ProviderTruth::Succeeded {
            money: minor("amount", "currency")?,
            account: account(&format!("metadata.{account_key}"))?,
        },
        ProviderId::Paystack => ProviderTruth::Succeeded {
            money: minor("data.amount", "data.currency")?,
            account: account(&format!("data.metadata.{account_key}"))?,
        },
        ProviderId::Flutterwave => {
            let currency = Currency::parse(&text("data.currency")?.to_uppercase()).map_err(|e| e.to_string())?;
            let amount = match f.get("data.amount") {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s.clone(),
                _ => return Err("data.amount is required".into()),
            };
            ProviderTruth::Succeeded {
                money: Money::from_major_decimal(&amount, currency).map_err(|e| e.to_string())?,
                account: account(&format!("data.meta.{account_key}"))?,
            }
        }
        ProviderId::Generic => ProviderTruth::Succeeded { money: minor("amount", "currency")?, account: account("account")? },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ngn(minor: i64) -> Money {
        Money::new(minor, Currency::parse("NGN").unwrap()).unwrap()
    }

    #[test]
    fn reads_each_providers_answer() {
        let acct = Some(AccountId::parse("wallet_42").unwrap());
        let stripe = json!({"id": "pi_1", "status": "succeeded", "amount": 125000, "currency": "ngn", "metadata": {"account": "wallet_42"}});
        assert_eq!(interpret(ProviderId::Stripe, &stripe, "account"), Ok(ProviderTruth::Succeeded { money: ngn(125_000), account: acct.clone() }));
        let paystack = json!({"status": true, "data": {"status": "success", "amount": 125000, "currency": "NGN", "metadata": {"account": "wallet_42"}}});
        assert_eq!(interpret(ProviderId::Paystack, &paystack, "account"), Ok(ProviderTruth::Succeeded { money: ngn(125_000), account: acct.clone() }));
        let flw = json!({"status": "success", "data": {"status": "successful", "amount": 1250.5, "currency": "NGN", "meta": {"account": "wallet_42"}}});
        assert_eq!(interpret(ProviderId::Flutterwave, &flw, "account"), Ok(ProviderTruth::Succeeded { money: ngn(125_050), account: acct }));
        let pending = json!({"status": "processing"});
        assert_eq!(interpret(ProviderId::Stripe, &pending, "account"), Ok(ProviderTruth::Processing));
        let failed = json!({"data": {"status": "failed"}});
        assert_eq!(interpret(ProviderId::Paystack, &failed, "account"), Ok(ProviderTruth::Failed));
        let bad = json!({"status": "succeeded", "amount": 1.5, "currency": "NGN"});
        assert!(interpret(ProviderId::Generic, &bad, "account").is_err());
    }
}
