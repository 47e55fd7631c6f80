//! Configuration, read once from the environment at start-up. Later code never reads env vars,
//! so a bad value is one clear error at start, not a panic on some request.

use crate::domain::{AccountId, ProviderId};
use crate::dynamodb::{StoreSettings, TableNames};
use crate::http::ReadToken;
use crate::providers::flutterwave::{Flutterwave, ReferenceField};
use crate::providers::generic::{Generic, StandardWebhooks};
use crate::providers::paystack::Paystack;
use crate::providers::stripe::Stripe;
use crate::providers::{Provider, Providers, SignatureError};

/// Every environment variable payhook reads, with what it means. The template check asserts that
/// template.yaml sets each one the functions need; keep this the only list.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("PAYHOOK_IDEMPOTENCY_TABLE", "claims table name"),
    ("PAYHOOK_PAYMENTS_TABLE", "payments table name"),
    ("PAYHOOK_LEDGER_TABLE", "ledger table name"),
    ("PAYHOOK_EVENTS_TABLE", "delivery log table name"),
    ("PAYHOOK_LEASE_MS", "claim lease outside Lambda (inside, it comes from the deadline)"),
    ("PAYHOOK_MAX_LEASE_MS", "upper bound of any lease"),
    ("PAYHOOK_SIGNATURE_TOLERANCE_S", "accepted clock difference of signed timestamps"),
    ("PAYHOOK_CLAIM_RETENTION_DAYS", "how long claims (and their stored responses) are kept"),
    ("PAYHOOK_LOG_RETENTION_DAYS", "how long delivery-log entries are kept"),
    ("PAYHOOK_DEFAULT_ACCOUNT", "account credited for a payment success that names none and was not registered with one (unset: such payments are acknowledged as unassigned)"),
    ("PAYHOOK_READ_TOKEN", "local: bearer token of the read routes under `payhook serve --read-api` (at least 24 characters); never set in Lambda, where reads are IAM-authorized"),
    ("PAYHOOK_GENERIC_SECRETS", "Standard Webhooks secrets, space-separated (rotation)"),
    ("PAYHOOK_STRIPE_SECRETS", "Stripe endpoint secrets (whsec_…), space-separated (rotation)"),
    ("PAYHOOK_STRIPE_ACCOUNT_KEY", "metadata key of the account on Stripe objects (default account)"),
    ("PAYHOOK_PAYSTACK_SECRETS", "Paystack secret keys (sk_…), space-separated (rotation)"),
    ("PAYHOOK_PAYSTACK_ACCOUNT_KEY", "key of the account in Paystack data.metadata (default account)"),
    ("PAYHOOK_FLUTTERWAVE_SECRETS", "Flutterwave v3 secret hashes: verif-hash and HMAC keys, space-separated"),
    ("PAYHOOK_FLUTTERWAVE_V4_SECRETS", "Flutterwave v4 secret hashes: HMAC keys only, space-separated"),
    ("PAYHOOK_FLUTTERWAVE_ACCOUNT_KEY", "key of the account in Flutterwave data.meta / meta_data (default account)"),
    ("PAYHOOK_FLUTTERWAVE_REFERENCE", "field keying Flutterwave payments: tx_ref (default) or id"),
    ("PAYHOOK_GENERIC_API_URL", "reconciliation: base URL of the generic provider's payment API"),
    ("PAYHOOK_GENERIC_API_KEY", "reconciliation: bearer key of the generic provider's API"),
    ("PAYHOOK_STRIPE_API_URL", "reconciliation: Stripe API base URL (default https://api.stripe.com)"),
    ("PAYHOOK_STRIPE_API_KEY", "reconciliation: Stripe restricted key with read access to PaymentIntents"),
    ("PAYHOOK_PAYSTACK_API_URL", "reconciliation: Paystack API base URL (default https://api.paystack.co)"),
    ("PAYHOOK_PAYSTACK_API_KEY", "reconciliation: Paystack secret key"),
    ("PAYHOOK_FLUTTERWAVE_API_URL", "reconciliation: Flutterwave API base URL (default https://api.flutterwave.com)"),
    ("PAYHOOK_FLUTTERWAVE_API_KEY", "reconciliation: Flutterwave secret key"),
    ("PAYHOOK_RECONCILE_PENDING_AFTER_S", "reconciliation: ask about PENDING/PROCESSING payments untouched this long (default 900)"),
    ("PAYHOOK_RECONCILE_GIVE_UP_AFTER_S", "reconciliation: stop asking about a payment the provider still calls not final this long after it was created (default 259200, 72 h)"),
];

/// Env vars holding secrets, per provider. Flutterwave's v4 secrets are read separately.
const SECRET_VARS: [(ProviderId, &str); 4] = [
    (ProviderId::Generic, "PAYHOOK_GENERIC_SECRETS"),
    (ProviderId::Stripe, "PAYHOOK_STRIPE_SECRETS"),
    (ProviderId::Paystack, "PAYHOOK_PAYSTACK_SECRETS"),
    (ProviderId::Flutterwave, "PAYHOOK_FLUTTERWAVE_SECRETS"),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} must be a positive integer, got {value:?}")]
    NotPositive { name: &'static str, value: String },
    #[error("{name} {reason}, got {value:?}")]
    Invalid {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
}

/// Per-provider mapping settings (not secrets; safe to log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSettings {
    pub stripe_account_key: String,
    pub paystack_account_key: String,
    pub flutterwave_account_key: String,
    pub flutterwave_reference: ReferenceField,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub tables: TableNames,
    pub store: StoreSettings,
    pub lease_ms: i64,
    pub max_lease_ms: i64,
    pub tolerance_s: i64,
    /// Raw secret values per provider; parsed by [`Config::providers`]. For Flutterwave, the v3
    /// secret hashes.
    pub secrets: Vec<(ProviderId, String)>,
    /// Flutterwave v4 secrets (HMAC keys only), parsed with the v3 hashes.
    pub flutterwave_v4_secrets: Option<String>,
    pub adapters: AdapterSettings,
    /// Credited when a payment success names no account and its payment has none.
    pub default_account: Option<AccountId>,
    /// The read routes' bearer token under `payhook serve --read-api`.
    pub read_token: Option<ReadToken>,
}

/// The largest body accepted, well under DynamoDB's 400 KB item limit so the raw body fits in
/// the delivery log untruncated.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

fn positive(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: i64,
) -> Result<i64, ConfigError> {
    match get(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ConfigError::NotPositive { name, value: v }),
        },
    }
}

/// A metadata key: dotted segments, none empty (`account`, `customer.wallet`).
fn key(get: &impl Fn(&str) -> Option<String>, name: &'static str) -> Result<String, ConfigError> {
    let Some(value) = get(name).filter(|v| !v.trim().is_empty()) else {
        return Ok("account".to_owned());
    };
    let key = value.trim();
    if key
        .split('.')
        .any(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(ConfigError::Invalid {
            name,
            value,
            reason: "must be a key such as account or customer.wallet",
        });
    }
    Ok(key.to_owned())
}

fn adapter_settings(get: &impl Fn(&str) -> Option<String>) -> Result<AdapterSettings, ConfigError> {
    let name = "PAYHOOK_FLUTTERWAVE_REFERENCE";
    let flutterwave_reference = match get(name).filter(|v| !v.trim().is_empty()) {
        None => ReferenceField::TxRef,
        Some(v) => ReferenceField::parse(v.trim()).ok_or(ConfigError::Invalid {
            name,
            value: v,
            reason: "must be tx_ref or id",
        })?,
    };
    Ok(AdapterSettings {
        stripe_account_key: key(get, "PAYHOOK_STRIPE_ACCOUNT_KEY")?,
        paystack_account_key: key(get, "PAYHOOK_PAYSTACK_ACCOUNT_KEY")?,
        flutterwave_account_key: key(get, "PAYHOOK_FLUTTERWAVE_ACCOUNT_KEY")?,
        flutterwave_reference,
    })
}

impl Config {
    pub fn from_env() -> Result<Self, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads configuration through `get`, so tests can pass a map instead of the process env.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let day_s = 86_400;
        let store = StoreSettings {
            claim_retention_s: positive(&get, "PAYHOOK_CLAIM_RETENTION_DAYS", 30)? * day_s,
            log_retention_s: positive(&get, "PAYHOOK_LOG_RETENTION_DAYS", 90)? * day_s,
        };
        let name = "PAYHOOK_DEFAULT_ACCOUNT";
        let default_account = match get(name).filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) => Some(
                AccountId::parse(v.trim()).map_err(|_| ConfigError::Invalid {
                    name,
                    value: v,
                    reason: "must be an account id (no control characters, at most 200 characters)",
                })?,
            ),
        };
        let name = "PAYHOOK_READ_TOKEN";
        let read_token = match get(name).filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) => Some(ReadToken::new(&v).ok_or(ConfigError::Invalid {
                name,
                value: "<redacted>".into(),
                reason: "must be at least 24 characters",
            })?),
        };
        let secrets = SECRET_VARS
            .into_iter()
            .filter_map(|(p, name)| get(name).map(|v| (p, v)))
            .collect();
        Ok(Config {
            tables: TableNames::from_env(&get),
            store,
            lease_ms: positive(&get, "PAYHOOK_LEASE_MS", 30_000)?,
            max_lease_ms: positive(&get, "PAYHOOK_MAX_LEASE_MS", 900_000)?,
            tolerance_s: positive(&get, "PAYHOOK_SIGNATURE_TOLERANCE_S", 300)?,
            secrets,
            flutterwave_v4_secrets: get("PAYHOOK_FLUTTERWAVE_V4_SECRETS"),
            adapters: adapter_settings(&get)?,
            default_account,
            read_token,
        })
    }

    fn secret(&self, provider: ProviderId) -> Option<&str> {
        self.secrets
            .iter()
            .find(|(p, _)| *p == provider)
            .map(|(_, s)| s.as_str())
    }

    /// The Standard Webhooks scheme, if its secrets are set (`Err` if they are unusable).
    pub fn generic(&self) -> Option<Result<StandardWebhooks, SignatureError>> {
        self.secret(ProviderId::Generic)
            .map(|v| StandardWebhooks::from_env_value(v, self.tolerance_s))
    }

    pub fn stripe(&self) -> Option<Result<Stripe, SignatureError>> {
        self.secret(ProviderId::Stripe)
            .map(|v| Stripe::from_env_value(v, self.tolerance_s, &self.adapters.stripe_account_key))
    }

    pub fn paystack(&self) -> Option<Result<Paystack, SignatureError>> {
        self.secret(ProviderId::Paystack)
            .map(|v| Paystack::from_env_value(v, &self.adapters.paystack_account_key))
    }

    /// Flutterwave is configured when either its v3 hashes or its v4 secrets are set.
    pub fn flutterwave(&self) -> Option<Result<Flutterwave, SignatureError>> {
        let v3 = self.secret(ProviderId::Flutterwave);
        let v4 = self.flutterwave_v4_secrets.as_deref();
        if v3.is_none() && v4.is_none() {
            return None;
        }
        let a = &self.adapters;
        Some(Flutterwave::from_env_values(
            v3,
            v4,
            a.flutterwave_reference,
            &a.flutterwave_account_key,
        ))
    }

    /// The adapter of `provider`: `None` when it has no secret set at all.
    fn adapter(&self, provider: ProviderId) -> Option<Result<Box<dyn Provider>, SignatureError>> {
        fn boxed<P: Provider + 'static>(
            r: Result<P, SignatureError>,
        ) -> Result<Box<dyn Provider>, SignatureError> {
            r.map(|p| Box::new(p) as Box<dyn Provider>)
        }
        match provider {
            ProviderId::Generic => self
                .generic()
                .map(|r| boxed(r.map(|scheme| Generic { scheme }))),
            ProviderId::Stripe => self.stripe().map(boxed),
            ProviderId::Paystack => self.paystack().map(boxed),
            ProviderId::Flutterwave => self.flutterwave().map(boxed),
        }
    }

    /// Builds the adapters whose secrets parse. A provider whose secret is missing or unusable is
    /// left out (requests for it get 503) and reported here, for the start-up log.
    pub fn providers(&self) -> (Providers, Vec<(ProviderId, SignatureError)>) {
        let mut adapters: Vec<Box<dyn Provider>> = Vec::new();
        let mut problems = Vec::new();
        for provider in ProviderId::ALL {
            match self.adapter(provider) {
                None => {}
                Some(Ok(a)) => adapters.push(a),
                Some(Err(e)) => problems.push((provider, e)),
            }
        }
        (Providers::new(adapters), problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() -> Result<(), ConfigError> {
        let c = Config::from_lookup(|_| None)?;
        assert_eq!(c.lease_ms, 30_000);
        assert_eq!(c.tables.idempotency, "payhook-idempotency");
        assert_eq!(c.store.claim_retention_s, 30 * 86_400);
        let c = Config::from_lookup(|n| (n == "PAYHOOK_LEASE_MS").then(|| "250".to_owned()))?;
        assert_eq!(c.lease_ms, 250);
        assert!(
            Config::from_lookup(|n| (n == "PAYHOOK_LEASE_MS").then(|| "-1".to_owned())).is_err()
        );
        Ok(())
    }

    #[test]
    fn unusable_secrets_leave_the_provider_out() -> Result<(), ConfigError> {
        let c = Config::from_lookup(|n| {
            (n == "PAYHOOK_GENERIC_SECRETS").then(|| "whsec_!!!".to_owned())
        })?;
        let (providers, problems) = c.providers();
        assert!(providers.get(ProviderId::Generic).is_none());
        assert_eq!(problems.len(), 1);
        let c =
            Config::from_lookup(|n| (n == "PAYHOOK_GENERIC_SECRETS").then(|| "   ".to_owned()))?;
        assert!(c.providers().0.get(ProviderId::Generic).is_none());
        Ok(())
    }

    fn with(pairs: &'static [(&'static str, &'static str)]) -> Result<Config, ConfigError> {
        Config::from_lookup(|n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn every_provider_is_built_from_its_secrets() -> Result<(), ConfigError> {
        let c = with(&[
            ("PAYHOOK_STRIPE_SECRETS", "whsec_a whsec_b"),
            ("PAYHOOK_PAYSTACK_SECRETS", "sk_test_a"),
            ("PAYHOOK_FLUTTERWAVE_V4_SECRETS", "fw-v4"),
        ])?;
        let (providers, problems) = c.providers();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            providers.configured(),
            vec![
                ProviderId::Stripe,
                ProviderId::Paystack,
                ProviderId::Flutterwave
            ]
        );
        Ok(())
    }

    #[test]
    fn bad_or_empty_provider_secrets_are_reported_and_left_out() -> Result<(), ConfigError> {
        let c = with(&[
            ("PAYHOOK_STRIPE_SECRETS", "sk_live_oops"),
            ("PAYHOOK_PAYSTACK_SECRETS", ""),
            ("PAYHOOK_FLUTTERWAVE_SECRETS", " "),
        ])?;
        let (providers, problems) = c.providers();
        assert!(providers.configured().is_empty());
        let names: Vec<_> = problems.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            names,
            vec![
                ProviderId::Stripe,
                ProviderId::Paystack,
                ProviderId::Flutterwave
            ]
        );
        // No problem reported names a secret's value.
        assert!(problems
            .iter()
            .all(|(_, e)| !e.to_string().contains("oops")));
        Ok(())
    }

    #[test]
    fn adapter_settings_have_defaults_and_are_checked() -> Result<(), ConfigError> {
        let c = with(&[])?;
        assert_eq!(c.adapters.stripe_account_key, "account");
        assert_eq!(c.adapters.flutterwave_reference, ReferenceField::TxRef);
        let c = with(&[
            ("PAYHOOK_PAYSTACK_ACCOUNT_KEY", "customer.wallet"),
            ("PAYHOOK_FLUTTERWAVE_REFERENCE", "id"),
        ])?;
        assert_eq!(c.adapters.paystack_account_key, "customer.wallet");
        assert_eq!(c.adapters.flutterwave_reference, ReferenceField::Id);
        assert!(with(&[("PAYHOOK_FLUTTERWAVE_REFERENCE", "flw_ref")]).is_err());
        assert!(with(&[("PAYHOOK_STRIPE_ACCOUNT_KEY", "a..b")]).is_err());
        assert!(with(&[("PAYHOOK_STRIPE_ACCOUNT_KEY", "my key")]).is_err());
        Ok(())
    }

    #[test]
    fn a_read_token_is_optional_checked_and_never_shown() {
        assert!(with(&[]).unwrap().read_token.is_none());
        let c = with(&[("PAYHOOK_READ_TOKEN", "0123456789abcdef0123456789")]).unwrap();
        assert!(c
            .read_token
            .as_ref()
            .is_some_and(|t| t.matches("0123456789abcdef0123456789")));
        assert!(!format!("{c:?}").contains("0123456789abcdef"));
        let e = with(&[("PAYHOOK_READ_TOKEN", "tooshortsecret")]).unwrap_err();
        assert!(!e.to_string().contains("tooshortsecret"), "{e}");
    }

    #[test]
    fn env_vars_list_every_name_read() {
        let read = std::cell::RefCell::new(Vec::new());
        let _ = Config::from_lookup(|n| {
            read.borrow_mut().push(n.to_owned());
            None
        });
        for name in read.borrow().iter().filter(|n| n.starts_with("PAYHOOK_")) {
            assert!(
                ENV_VARS.iter().any(|(v, _)| v == name),
                "{name} is read but not in ENV_VARS"
            );
        }
    }
}
