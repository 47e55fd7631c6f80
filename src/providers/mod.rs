//! Provider adapters. Each verifies a delivery's raw body the provider's way, then maps its
//! payload to a [`NormalisedEvent`]. Nothing past this module knows a provider's wire format.
//!
//! One module per provider holds all it takes: its name ([`ProviderId`] constant), the env vars
//! it reads, how its adapter is built from them, how it signs (tooling and tests), how its API is
//! asked about a payment and how that answer is read (reconciliation). Each exports a
//! [`ProviderDef`] and is listed once in [`REGISTRY`]; the rest of the code iterates the registry.

pub mod adyen;
pub mod flutterwave;
pub mod generic;
pub mod json;
pub mod orders;
pub mod paystack;
pub mod razorpay;
#[cfg(test)]
mod round_trip;
pub mod signature;
pub mod stripe;
pub mod transfers;
pub mod units;

use std::collections::BTreeMap;

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

    /// The headers that sign `body` as this provider sends them at `now_s`, with its first
    /// secret (sample events, tests, the demo). `event_id` is used where the scheme signs one.
    fn sign(&self, body: &[u8], event_id: &str, now_s: i64) -> Vec<(String, String)>;

    /// Maps a verified (or stored, for replay) body to a normalised event.
    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError>;

    /// A provider whose signatures sit inside the body (Adyen's items) returns the body signed
    /// afresh (`payhook sign`, samples, tests); `None`: signatures are headers only ([`sign`]).
    ///
    /// [`sign`]: Provider::sign
    fn sign_body(&self, _body: &[u8]) -> Option<Vec<u8>> {
        None
    }

    /// A provider that sends several events in one request (Adyen) splits the body into its
    /// items here; each item is then verified, mapped, claimed and logged on its own. `None`:
    /// one event per request.
    fn batch(&self, _body: &[u8]) -> Option<Result<Vec<Vec<u8>>, PayloadError>> {
        None
    }

    /// The path (under the provider's API base URL) that tells the truth about one payment.
    fn api_path(&self, reference: &Reference) -> String;

    /// Reads the provider API's answer about `reference` with the same mapping as its webhooks
    /// (one place per provider knows its payloads, so webhook and API never disagree about an
    /// amount). Only a status the provider documents as final ends a payment.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError>;

    /// The path of one page of the provider's dispute list (disputes created since `since_s`,
    /// the page after `cursor`), for reconciliation's backstop. `None`: it lists none.
    fn disputes_path(&self, _since_s: i64, _cursor: Option<&str>) -> Option<String> {
        None
    }

    /// One page of that list: each dispute's money movements, mapped by the same code as the
    /// provider's dispute webhooks, and the cursor of the next page.
    fn read_disputes(&self, _body: &[u8]) -> Result<DisputePage, PayloadError> {
        Ok(DisputePage::default())
    }
}

/// One page of a provider's dispute list, mapped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisputePage {
    /// Withdrawals and reinstatements, as the webhooks would carry them.
    pub movements: Vec<ListedMovement>,
    /// The cursor of the next page, when there is one.
    pub next: Option<String>,
}

/// One listed dispute movement: [`EventKind::Dispute`] (or [`EventKind::DisputeUnpriced`]), and
/// the provider transaction it is about where the provider keys payments through a binding
/// (Flutterwave), as [`NormalisedEvent::transaction_id`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedMovement {
    pub kind: EventKind,
    pub transaction_id: Option<String>,
}

impl From<EventKind> for ListedMovement {
    fn from(kind: EventKind) -> Self {
        ListedMovement {
            kind,
            transaction_id: None,
        }
    }
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

    /// Every configured adapter.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Provider> {
        self.adapters.iter().map(|a| a.as_ref())
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

/// A provider's environment, read once at start-up by [`crate::config::Config`]: the values of
/// the variables its [`ProviderDef`] names, and the common signature tolerance.
#[derive(Debug, Clone, Copy)]
pub struct ProviderEnv<'a> {
    pub values: &'a BTreeMap<&'static str, String>,
    pub tolerance_s: i64,
}

impl ProviderEnv<'_> {
    /// The value of `name` as set, blanks included: a secret variable set to nothing is a
    /// configuration mistake to report, not an absent provider.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of a setting, if set to something other than blanks.
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.trim().is_empty())
    }

    /// A metadata key setting (`account`, `customer.wallet`): dotted segments, none empty;
    /// `account` when unset.
    pub fn metadata_key(&self, name: &'static str) -> Result<String, ProviderConfigError> {
        let Some(value) = self.setting(name) else {
            return Ok("account".to_owned());
        };
        let key = value.trim();
        if key
            .split('.')
            .any(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(ProviderConfigError::Setting {
                name,
                value: value.to_owned(),
                reason: "must be a key such as account or customer.wallet",
            });
        }
        Ok(key.to_owned())
    }
}

/// Why a provider's configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderConfigError {
    /// A secret that cannot be a secret of this provider: the provider is left out (503).
    #[error(transparent)]
    Secret(#[from] SignatureError),
    /// A setting with no sensible meaning: the process refuses to start.
    #[error("{name} {reason}, got {value:?}")]
    Setting {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
}

/// Where reconciliation asks a provider about a payment.
#[derive(Debug, Clone, Copy)]
pub struct ApiDef {
    /// Env var overriding the base URL.
    pub url_var: &'static str,
    /// The provider's public API, if it has one (generic: none, the URL must be set).
    pub default_base_url: Option<&'static str>,
    /// Env var of the API key; the API is used only when it is set.
    pub key_var: &'static str,
    /// The key is `id:secret` for HTTP basic auth (Razorpay), not a bearer token.
    pub basic_auth: bool,
}

/// The adapter a [`ProviderDef`] builds: `None` when its secrets are not set.
pub type Built = Option<Result<Box<dyn Provider>, ProviderConfigError>>;

/// Everything payhook knows about one provider besides its adapter's methods.
#[derive(Debug, Clone, Copy)]
pub struct ProviderDef {
    pub id: ProviderId,
    /// Every env var it reads, with what it means (listed by `config::env_vars`, set by
    /// template.yaml, checked by tests/it/template.rs).
    pub env: &'static [(&'static str, &'static str)],
    /// Builds its adapter from its env. Settings are checked even when no secret is set, so a
    /// bad one stops start-up rather than waiting for the secret.
    pub build: fn(ProviderEnv<'_>) -> Built,
    pub api: ApiDef,
    /// The env var of its source-IP allowlist (also in `env`): addresses or CIDR blocks its
    /// webhooks may come from, checked by the router ([`crate::http::source`]); blank: off.
    pub source_ips: &'static str,
    /// How its API sends and tells about transfers (payouts), if payhook pays out through it.
    pub transfers: Option<transfers::TransferDef>,
    /// Its API's unit for every currency, both ways: each amount it sends in is read through
    /// this table and each amount payhook sends it is written through it ([`units`]).
    pub units: &'static units::Units,
    /// Whether its events may also arrive through Amazon EventBridge (a partner event source,
    /// authenticated by AWS rather than by a signature).
    pub event_source: Option<EventSourceDef>,
    /// Its secrets that may be read from Secrets Manager at run time instead of the
    /// environment: `(the variable naming the secret, the variable it fills, every rotation
    /// stage?)`. Both names are in `env`.
    pub secret_arns: &'static [(&'static str, &'static str, bool)],
    /// Where the merchant's own metadata sits in its payloads (dotted paths to objects, first
    /// match wins): where [`orders`] looks for the merchant's order id.
    pub metadata: &'static [&'static str],
    /// The headers its signature check reads: logged with each delivery, secret values
    /// masked ([`masked_headers`]).
    pub signed_headers: &'static [&'static str],
}

/// The headers `def`'s signature check reads, as received, with every signature, hash and
/// credential value masked: an operator sees which scheme, timestamp and key version signed a
/// delivery, and never a value that could sign (or reveal a shared secret: Flutterwave's
/// `verif-hash` *is* the secret).
pub fn masked_headers(def: &ProviderDef, headers: &HeaderMap) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in def.signed_headers {
        for value in headers.get_all(*name) {
            let text = String::from_utf8_lossy(value.as_bytes());
            out.push(((*name).to_owned(), mask(name, &text)));
        }
    }
    out
}

/// A signature scheme's name (`v1`, `v1a`, `v0`): short, letters and digits.
fn is_scheme(text: &str) -> bool {
    (1..=3).contains(&text.len()) && text.chars().all(|c| c.is_ascii_alphanumeric())
}

/// What stands for a masked value: no length, no part of it.
const MASK: &str = "\u{2022}\u{2022}\u{2022}\u{2022}";

/// Keeps what identifies (ids, timestamps, scheme and version names), masks what signs, header
/// by header: a value whose form is not the one expected is masked whole. Anything not known
/// to be safe (Flutterwave's `verif-hash` is the shared secret itself; Paystack's and
/// Razorpay's hex HMACs) is masked whole.
fn mask(name: &str, value: &str) -> String {
    match name {
        "webhook-id" | "webhook-timestamp" | razorpay::EVENT_ID => value.to_owned(),
        // `Basic …`: the scheme, never the credentials.
        "authorization" => match value.split_once(' ') {
            Some((scheme, _)) if scheme.chars().all(|c| c.is_ascii_alphabetic()) => {
                format!("{scheme} {MASK}")
            }
            _ => MASK.to_owned(),
        },
        // `t=1733400000,v1=…,v0=…`: the time and the scheme names.
        stripe::HEADER => value
            .split(',')
            .map(|part| match part.split_once('=') {
                Some(("t", ts)) if !ts.is_empty() && ts.bytes().all(|b| b.is_ascii_digit()) => {
                    format!("t={ts}")
                }
                Some((k, _)) if is_scheme(k) => format!("{k}={MASK}"),
                _ => MASK.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(","),
        // `v1,… v1a,…` (Standard Webhooks, space-separated): the scheme names.
        "webhook-signature" => value
            .split(' ')
            .filter(|p| !p.is_empty())
            .map(|part| match part.split_once(',') {
                Some((v, _)) if is_scheme(v) => format!("{v},{MASK}"),
                _ => MASK.to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => MASK.to_owned(),
    }
}

/// A provider's Amazon EventBridge door: the variable naming the partner event source whose
/// events are accepted, and the mapper of their `detail` (the provider's own event, mapped by
/// the same code as its webhooks, so both doors share keys).
#[derive(Debug, Clone, Copy)]
pub struct EventSourceDef {
    pub source_var: &'static str,
    pub mapper: fn(ProviderEnv<'_>) -> Result<Box<dyn Provider>, ProviderConfigError>,
}

/// A configured EventBridge door.
pub struct EventDoor {
    pub provider: ProviderId,
    /// The partner event source (`aws.partner/stripe.com/…`): events from any other source are
    /// refused.
    pub source: String,
    /// Maps `detail` (never asked to verify: AWS authenticated the source).
    pub mapper: Box<dyn Provider>,
}

impl std::fmt::Debug for EventDoor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventDoor")
            .field("provider", &self.provider)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Boxes a built adapter.
pub fn boxed<P: Provider + 'static>(r: Result<P, SignatureError>) -> Built {
    Some(
        r.map(|p| Box::new(p) as Box<dyn Provider>)
            .map_err(Into::into),
    )
}

/// Every provider payhook serves. Adding one: a module under providers/ exporting its
/// `ProviderDef`, and its line here.
pub const REGISTRY: &[ProviderDef] = &[
    generic::DEF,
    stripe::DEF,
    paystack::DEF,
    flutterwave::DEF,
    razorpay::DEF,
    adyen::DEF,
];

/// The provider's definition.
pub fn def(id: ProviderId) -> Option<&'static ProviderDef> {
    REGISTRY.iter().find(|d| d.id == id)
}

/// The registered provider named `name`.
pub fn registered(name: &str) -> Option<ProviderId> {
    REGISTRY.iter().map(|d| d.id).find(|id| id.as_str() == name)
}

/// The unit table of `provider`'s API (ISO 4217 for one payhook does not know).
pub fn units_of(provider: ProviderId) -> &'static units::Units {
    def(provider).map_or(&units::ISO, |d| d.units)
}

/// Every registered provider, in registry order.
pub fn ids() -> impl Iterator<Item = ProviderId> {
    REGISTRY.iter().map(|d| d.id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(def: &ProviderDef, pairs: &[(&'static str, &str)]) -> Vec<(String, String)> {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(*k, v.parse().unwrap());
        }
        masked_headers(def, &headers)
    }

    #[test]
    fn signature_values_are_masked_and_what_identifies_is_kept() {
        let sig = "Lm0TxMyYbBqaRAAVmPJ4XIHs2ybJDHzGW5/Y/4bNLw4=";
        let generic = shown(
            &generic::DEF,
            &[
                ("webhook-id", "msg_1"),
                ("webhook-timestamp", "1796490785"),
                ("webhook-signature", &format!("v1,{sig} v1a,{sig}")),
                ("x-other", "not read by the check"),
            ],
        );
        assert_eq!(generic[0], ("webhook-id".into(), "msg_1".into()));
        assert_eq!(generic[1].1, "1796490785");
        assert_eq!(generic.len(), 3, "only the headers the check reads");
        let masked = &generic[2].1;
        assert!(masked.starts_with("v1,\u{2022}"), "{masked}");
        assert!(
            !masked.contains("Lm0T") && !masked.contains("Nw4"),
            "{masked}"
        );

        let stripe = shown(
            &stripe::DEF,
            &[("stripe-signature", "t=17,v1=abcdef0123,v0=99aa")],
        );
        assert!(stripe[0].1.starts_with("t=17,v1=\u{2022}"), "{:?}", stripe);
        assert!(!stripe[0].1.contains("abcdef"), "{:?}", stripe);

        // Flutterwave's verif-hash is the shared secret itself.
        // Whatever its form: no piece of it, not its length.
        for secret in [
            "my-shared-secret",
            "pay 4u Zq9",
            "t=S3cret",
            "v1=abc,t=1",
            "ab",
        ] {
            let flw = shown(&flutterwave::DEF, &[("verif-hash", secret)]);
            assert_eq!(flw[0].1, MASK, "{secret:?}");
        }
        let odd = shown(&stripe::DEF, &[("stripe-signature", "t=S3cret,zzzzzz,v1")]);
        assert_eq!(odd[0].1, format!("t={MASK},{MASK},{MASK}"), "{odd:?}");
        let adyen = shown(&adyen::DEF, &[("authorization", "Basic dXNlcjpwYXNz")]);
        assert!(adyen[0].1.starts_with("Basic \u{2022}"), "{:?}", adyen);
        assert!(!adyen[0].1.contains("dXNl"), "{:?}", adyen);
    }
}
