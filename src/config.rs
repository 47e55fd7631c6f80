//! Configuration, read once from the environment at start-up. Later code never reads env vars,
//! so a bad value is one clear error at start, not a panic on some request.

use crate::providers::generic::{Generic, StandardWebhooks};
use crate::providers::{Provider, Providers, SignatureError};
use crate::store::dynamodb::{StoreSettings, TableNames};
use crate::domain::ProviderId;

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
    ("PAYHOOK_LEDGER_SHARDS", "ledger write shards per account (only ever grow it)"),
    ("PAYHOOK_GENERIC_SECRETS", "Standard Webhooks secrets, space-separated (rotation)"),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} must be a positive integer, got {value:?}")]
    NotPositive { name: &'static str, value: String },
}

#[derive(Debug, Clone)]
pub struct Config {
    pub tables: TableNames,
    pub store: StoreSettings,
    pub lease_ms: i64,
    pub max_lease_ms: i64,
    pub tolerance_s: i64,
    /// Raw secret values per provider; parsed by [`Config::providers`].
    pub secrets: Vec<(ProviderId, String)>,
}

/// The largest body accepted, well under DynamoDB's 400 KB item limit so the raw body fits in
/// the delivery log untruncated.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

fn positive(get: &impl Fn(&str) -> Option<String>, name: &'static str, default: i64) -> Result<i64, ConfigError> {
    match get(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ConfigError::NotPositive { name, value: v }),
        },
    }
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
            ledger_shards: u32::try_from(positive(&get, "PAYHOOK_LEDGER_SHARDS", 4)?).unwrap_or(4),
        };
        let secrets = [(ProviderId::Generic, "PAYHOOK_GENERIC_SECRETS")]
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
        })
    }

    /// Builds the adapters whose secrets parse. A provider whose secret is missing or unusable is
    /// left out (requests for it get 503) and reported here, for the start-up log.
    pub fn providers(&self) -> (Providers, Vec<(ProviderId, SignatureError)>) {
        let mut adapters: Vec<Box<dyn Provider>> = Vec::new();
        let mut problems = Vec::new();
        for (provider, value) in &self.secrets {
            let built = match provider {
                ProviderId::Generic => StandardWebhooks::from_env_value(value, self.tolerance_s)
                    .map(|scheme| Box::new(Generic { scheme }) as Box<dyn Provider>),
                other => Err(SignatureError::BadSecret(format!("{other} is not supported yet"))),
            };
            match built {
                Ok(a) => adapters.push(a),
                Err(e) => problems.push((*provider, e)),
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
        assert!(Config::from_lookup(|n| (n == "PAYHOOK_LEASE_MS").then(|| "-1".to_owned())).is_err());
        Ok(())
    }

    #[test]
    fn unusable_secrets_leave_the_provider_out() -> Result<(), ConfigError> {
        let c = Config::from_lookup(|n| (n == "PAYHOOK_GENERIC_SECRETS").then(|| "whsec_!!!".to_owned()))?;
        let (providers, problems) = c.providers();
        assert!(providers.get(ProviderId::Generic).is_none());
        assert_eq!(problems.len(), 1);
        let c = Config::from_lookup(|n| (n == "PAYHOOK_GENERIC_SECRETS").then(|| "   ".to_owned()))?;
        assert!(c.providers().0.get(ProviderId::Generic).is_none());
        Ok(())
    }
}
