//! Provider adapters. Each verifies a delivery's raw body the provider's way, then maps its
//! payload to a [`NormalisedEvent`]. Nothing past this module knows a provider's wire format.

pub mod flutterwave;
pub mod generic;
pub mod json;
pub mod paystack;
pub mod signature;
pub mod stripe;

use http::HeaderMap;

use crate::domain::{EventKind, NormalisedEvent, PaymentFacts, ProviderId, Reference};

/// Why a signature check failed. All are answered 401; the variant is logged, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    #[error("header {0} appears more than once")]
    RepeatedHeader(&'static str),
    #[error("header {0} is malformed")]
    MalformedHeader(&'static str),
    #[error("timestamp is older than the tolerance")]
    Stale,
    #[error("timestamp is in the future beyond the tolerance")]
    Future,
    #[error("no signature matches any configured secret")]
    Mismatch,
    #[error("secret is not usable: {0}")]
    BadSecret(String),
}

/// Why a verified payload could not be mapped. Answered 400, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    #[error("body is not UTF-8")]
    NotUtf8,
    #[error("body is not valid JSON: {0}")]
    Malformed(String),
    #[error("{field} {reason}")]
    Invalid { field: String, reason: String },
}

impl PayloadError {
    pub fn invalid(field: &str, reason: impl Into<String>) -> Self {
        PayloadError::Invalid {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// One provider's verification and mapping.
pub trait Provider: Send + Sync {
    fn id(&self) -> ProviderId;

    /// Verifies the signature over the raw body bytes, before any parsing.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError>;

    /// Maps a verified (or stored, for replay) body to a normalised event.
    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError>;

    /// The path (under the provider's API base URL) that tells the truth about one payment.
    fn api_path(&self, reference: &Reference) -> String;

    /// Reads the provider API's answer about `reference` with the same mapping as its webhooks
    /// (one place per provider knows its payloads, so webhook and API never disagree about an
    /// amount). Only a status the provider documents as final ends a payment.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError>;
}

/// What a provider's API says about a payment, for reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderTruth {
    /// Paid: the facts its webhook would carry (account `None` if it names none).
    Succeeded(PaymentFacts),
    /// Not final (pending, abandoned, a failed attempt that may still be retried): ask again.
    NotFinal {
        status: String,
    },
    /// A status the provider documents as final without payment (Stripe `canceled`).
    Failed {
        status: String,
    },
    NotFound,
}

/// The payment facts of a mapped event, for an API answer mapped as a webhook: `reference` is
/// the payment asked about (the answer may name it by another field).
pub(crate) fn succeeded(
    kind: EventKind,
    reference: &Reference,
) -> Result<ProviderTruth, PayloadError> {
    match kind {
        EventKind::PaymentSucceeded(mut p) => {
            p.reference = reference.clone();
            Ok(ProviderTruth::Succeeded(p))
        }
        _ => Err(PayloadError::invalid(
            "status",
            "says paid but the payment does not map",
        )),
    }
}

/// The single value of a header that must appear exactly once.
pub fn single_header<'a>(
    headers: &'a HeaderMap,
    name: &'static str,
) -> Result<&'a str, SignatureError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next().ok_or(SignatureError::MissingHeader(name))?;
    if values.next().is_some() {
        return Err(SignatureError::RepeatedHeader(name));
    }
    first
        .to_str()
        .map_err(|_| SignatureError::MalformedHeader(name))
}

/// The configured adapters. A provider without secrets is absent, and requests for it are
/// refused (503), never accepted unsigned.
#[derive(Default)]
pub struct Providers {
    adapters: Vec<Box<dyn Provider>>,
}

impl Providers {
    pub fn new(adapters: Vec<Box<dyn Provider>>) -> Self {
        Providers { adapters }
    }

    pub fn get(&self, id: ProviderId) -> Option<&dyn Provider> {
        self.adapters
            .iter()
            .find(|a| a.id() == id)
            .map(|a| a.as_ref())
    }

    pub fn configured(&self) -> Vec<ProviderId> {
        self.adapters.iter().map(|a| a.id()).collect()
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.configured()).finish()
    }
}
