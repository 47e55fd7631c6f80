//! Configuration, read once from the environment at start-up: this is the only code that reads
//! env vars, so a bad value is one clear error at start, not a failure on some request.

use crate::domain::{AccountId, ProviderId};
use crate::dynamodb::{StoreSettings, TableNames};
use crate::http::payouts::PayoutCaller;
use crate::http::source::SourceAllowlist;
use crate::http::ReadToken;
use std::collections::BTreeMap;

use crate::providers::{ProviderConfigError, ProviderEnv, Providers, REGISTRY};
use crate::reconcile::{ApiEndpoint, ReconcilePolicy};

/// The environment variables payhook reads besides the providers' (each provider lists its own in
/// its [`crate::providers::ProviderDef`]), with what they mean. [`env_vars`] is the whole list.
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
    ("PAYHOOK_ORDER_KEYS", "where the merchant's order id is read from, for the log and the console's search: `provider=key` pairs, space-separated, a key of the provider's metadata (default order_id in each provider's metadata)"),
    ("PAYHOOK_READ_TOKEN", "local: bearer token of the read routes under `payhook serve --read-api` (at least 24 characters); never set in Lambda, where reads are IAM-authorized"),
    ("PAYHOOK_PAYOUT_TOKEN", "local: bearer token(s) of POST /payouts and GET /payouts/{payout} under `payhook serve`, space-separated during a rotation, all the one caller `local` (each at least 24 characters; unset with no PAYHOOK_PAYOUT_CALLERS: the routes are off); never set in Lambda, where payouts are IAM-authorized"),
    ("PAYHOOK_PAYOUT_CALLERS", "local: named payout callers, `name=token[,token]` space-separated (a payout key is scoped by the caller's name, never by a token, so a retry after a rotation names the same payout)"),
    ("PAYHOOK_PAYOUT_UNRESOLVED_AFTER_S", "payouts: a payout not settled this long after it was opened is listed as needing a person (reconciliation, `payhook payouts list --unsettled`, the PayoutsUnresolved alarm; default 86400)"),
    ("PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS", "payouts: how long after a send the generic sender may still not show the transfer to GET /transfers/{reference} (default 60000); recorded on each send"),
    ("PAYHOOK_PAYOUT_MAX_MINOR", "payouts: the largest payout accepted, in minor units of its currency (default 100000000: 1,000,000.00 of a two-decimal currency)"),
    ("PAYHOOK_PROVIDER_TIMEOUT_MS", "payouts: how long one transfer call or question to a provider may take (default 5000; at most 23000: with the lease, less the store clock's second and capped at 25 s for API Gateway, it must leave 1 s before the call and 1 s after it, or a process that pays out refuses to start)"),
    ("PAYHOOK_SECRETS_REFRESH_S", "how often provider secrets read from Secrets Manager (the *_ARN variables) are read again (default 300); a signature no known secret verifies also reads them again, at most every 30 s"),
    ("PAYHOOK_SECRET_PREVIOUS_GRACE_S", "how long a signing secret's AWSPREVIOUS version still verifies after the AWSCURRENT version that demoted it was created, by Secrets Manager's CreatedDate (default 3600; 0: never); removing the AWSPREVIOUS label ends it at the next refresh (docs/deploy.md, revoking a leaked secret)"),
    ("PAYHOOK_RECONCILE_PENDING_AFTER_S", "reconciliation: ask about PENDING/PROCESSING payments untouched this long (default 900)"),
    ("PAYHOOK_RECONCILE_GIVE_UP_AFTER_S", "reconciliation: stop asking about a payment the provider still calls not final this long after it was created (default 259200, 72 h)"),
];

/// Every environment variable payhook reads, with what it means: [`ENV_VARS`] and every
/// registered provider's. The template check asserts that template.yaml sets each one the
/// functions need; this is the only list.
pub fn env_vars() -> Vec<(&'static str, &'static str)> {
    ENV_VARS
        .iter()
        .copied()
        .chain(REGISTRY.iter().flat_map(|d| d.env.iter().copied()))
        .collect()
}

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
    /// Payouts are configured, and no transfer call could ever start under these times.
    #[error("payouts: {0}")]
    NoCallFits(String),
}

#[derive(Clone)]
pub struct Config {
    pub tables: TableNames,
    pub store: StoreSettings,
    pub lease_ms: i64,
    pub max_lease_ms: i64,
    pub tolerance_s: i64,
    /// The values of every registered provider's env vars (secrets among them: never logged;
    /// see the `Debug` impl), built into adapters by [`Config::providers`].
    provider_env: BTreeMap<&'static str, String>,
    /// Reconciliation: the providers' APIs that have a key set, and when to ask.
    pub api_endpoints: Vec<ApiEndpoint>,
    pub reconcile: ReconcilePolicy,
    /// Credited when a payment success names no account and its payment has none.
    pub default_account: Option<AccountId>,
    /// Where each provider's payloads carry the merchant's order id (`PAYHOOK_ORDER_KEYS`).
    pub order_keys: crate::providers::orders::OrderKeys,
    /// The read routes' bearer token under `payhook serve --read-api`.
    pub read_token: Option<ReadToken>,
    /// Who may pay out under `payhook serve`, each with the bearer tokens that name them
    /// (`PAYHOOK_PAYOUT_TOKEN`: the caller `local`; `PAYHOOK_PAYOUT_CALLERS`: named callers).
    pub payout_callers: Vec<PayoutCaller>,
    /// The generic sender's transfer visibility window, when it documents its own.
    pub generic_transfer_visibility_ms: Option<i64>,
    pub payout_max_minor: i64,
    pub provider_timeout_ms: i64,
    /// How often secrets from Secrets Manager are read again.
    pub secrets_refresh_ms: i64,
    /// How long `AWSPREVIOUS` still verifies after the current version was created.
    pub secret_previous_grace_ms: i64,
    /// Where the provider secrets named by `*_ARN` variables are read from (set by
    /// [`crate::runtime::read_secrets`]); `None`: the environment's values are all there is.
    pub secret_source: Option<std::sync::Arc<crate::secrets::SecretSource>>,
    /// Per provider, where its webhooks may come from (`PAYHOOK_{PROVIDER}_SOURCE_IPS`).
    pub source_allowlists: BTreeMap<ProviderId, SourceAllowlist>,
}

pub use crate::domain::MAX_BODY_BYTES;

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

/// A count of seconds that may be zero (at most ten years).
fn not_negative(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: i64,
) -> Result<i64, ConfigError> {
    match get(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) if (0..=315_360_000).contains(&n) => Ok(n),
            _ => Err(ConfigError::Invalid {
                name,
                value: v,
                reason: "must be a whole number of seconds, 0 or more",
            }),
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
            ..StoreSettings::default()
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
        let name = crate::providers::orders::ORDER_KEYS;
        let order_keys =
            crate::providers::orders::OrderKeys::parse(get(name).as_deref()).map_err(|_| {
                ConfigError::Invalid {
                    name,
                    value: get(name).unwrap_or_default(),
                    reason: "must be provider=key pairs, space-separated, of known providers",
                }
            })?;
        let name = "PAYHOOK_READ_TOKEN";
        let read_token = match get(name).filter(|v| !v.trim().is_empty()) {
            None => None,
            Some(v) => Some(ReadToken::new(&v).ok_or(ConfigError::Invalid {
                name,
                value: "<redacted>".into(),
                reason: "must be at least 24 characters",
            })?),
        };
        let payout_callers = PayoutCaller::from_env(
            get("PAYHOOK_PAYOUT_TOKEN").as_deref(),
            get("PAYHOOK_PAYOUT_CALLERS").as_deref(),
        )
        .map_err(|(name, reason)| ConfigError::Invalid {
            name,
            value: "<redacted>".into(),
            reason,
        })?;
        let generic_transfer_visibility_ms = get("PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS")
            .map(|_| positive(&get, "PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS", 60_000))
            .transpose()?;
        let payout_max_minor = positive(&get, "PAYHOOK_PAYOUT_MAX_MINOR", 100_000_000)?;
        if payout_max_minor > crate::domain::MAX_AMOUNT_MINOR {
            return Err(ConfigError::Invalid {
                name: "PAYHOOK_PAYOUT_MAX_MINOR",
                value: payout_max_minor.to_string(),
                reason: "must be at most 10^15",
            });
        }
        let provider_timeout_ms = positive(&get, "PAYHOOK_PROVIDER_TIMEOUT_MS", 5_000)?;
        let secrets_refresh_ms = positive(&get, "PAYHOOK_SECRETS_REFRESH_S", 300)? * 1_000;
        let secret_previous_grace_ms = not_negative(
            &get,
            "PAYHOOK_SECRET_PREVIOUS_GRACE_S",
            crate::secrets::DEFAULT_PREVIOUS_GRACE_MS / 1_000,
        )? * 1_000;
        let provider_env: BTreeMap<&'static str, String> = REGISTRY
            .iter()
            .flat_map(|d| d.env.iter())
            .filter_map(|(name, _)| get(name).map(|v| (*name, v)))
            .collect();
        let source_allowlists = source_allowlists(&provider_env)?;
        let tolerance_s = positive(&get, "PAYHOOK_SIGNATURE_TOLERANCE_S", 300)?;
        check_provider_settings(&provider_env, tolerance_s)?;
        Ok(Config {
            tables: TableNames::from_env(&get),
            store,
            lease_ms: positive(&get, "PAYHOOK_LEASE_MS", 30_000)?,
            max_lease_ms: positive(&get, "PAYHOOK_MAX_LEASE_MS", 900_000)?,
            tolerance_s,
            api_endpoints: api_endpoints(&provider_env),
            reconcile: ReconcilePolicy {
                pending_after_ms: positive(&get, "PAYHOOK_RECONCILE_PENDING_AFTER_S", 900)? * 1_000,
                give_up_after_ms: positive(&get, "PAYHOOK_RECONCILE_GIVE_UP_AFTER_S", 259_200)?
                    * 1_000,
                payout_unresolved_after_ms: positive(
                    &get,
                    "PAYHOOK_PAYOUT_UNRESOLVED_AFTER_S",
                    crate::payouts::calls::UNRESOLVED_AFTER_MS / 1_000,
                )? * 1_000,
            },
            provider_env,
            default_account,
            order_keys,
            read_token,
            payout_callers,
            generic_transfer_visibility_ms,
            payout_max_minor,
            provider_timeout_ms,
            secrets_refresh_ms,
            secret_previous_grace_ms,
            secret_source: None,
            source_allowlists,
        })
    }

    /// Refuses a configuration under which this process would reserve payouts and never send
    /// one: when it can call a transfer API, its longest lease must fit a call
    /// ([`crate::payouts::calls::call_fits`]). Inside Lambda the lease is the invocation's
    /// (bounded by `PAYHOOK_MAX_LEASE_MS`; tests/it/template.rs holds each function's timeout
    /// to the same rule); outside it is `PAYHOOK_LEASE_MS`, bounded the same way.
    pub fn check_payout_timing(&self, in_lambda: bool) -> Result<(), ConfigError> {
        let pays_out = self
            .api_endpoints
            .iter()
            .any(|e| crate::providers::def(e.provider).is_some_and(|d| d.transfers.is_some()));
        if !pays_out {
            return Ok(());
        }
        let lease_ms = if in_lambda {
            self.max_lease_ms
        } else {
            self.lease_ms.min(self.max_lease_ms)
        };
        crate::payouts::calls::call_fits(lease_ms, self.provider_timeout_ms)
            .map_err(ConfigError::NoCallFits)
    }

    /// The EventBridge doors whose partner event source is set.
    pub fn event_doors(&self) -> Result<Vec<crate::providers::EventDoor>, ProviderConfigError> {
        let mut doors = Vec::new();
        for def in REGISTRY {
            let Some(es) = def.event_source else { continue };
            let Some(source) = self
                .provider_env()
                .setting(es.source_var)
                .map(str::to_owned)
            else {
                continue;
            };
            doors.push(crate::providers::EventDoor {
                provider: def.id,
                source: source.trim().to_owned(),
                mapper: (es.mapper)(self.provider_env())?,
            });
        }
        Ok(doors)
    }

    /// The secrets to read from Secrets Manager: every provider secret whose `*_ARN` variable
    /// is set.
    pub fn secret_refs(&self) -> Vec<crate::secrets::SecretRef> {
        REGISTRY
            .iter()
            .flat_map(|d| d.secret_arns.iter())
            .filter_map(|(arn_var, target, rotating)| {
                let id = self.provider_env.get(arn_var)?.trim();
                (!id.is_empty()).then(|| crate::secrets::SecretRef {
                    target,
                    secret_id: id.to_owned(),
                    rotating: *rotating,
                })
            })
            .collect()
    }

    /// The same configuration with secret values read at run time (they replace any value
    /// the environment gave the same variable). An empty value is a revoked secret: the
    /// variable is removed, so its provider is not configured (503), never left with the value
    /// read before.
    pub fn with_secret_values(&self, values: &BTreeMap<&'static str, String>) -> Config {
        let mut c = self.clone();
        for (k, v) in values {
            if v.trim().is_empty() {
                c.provider_env.remove(k);
            } else {
                c.provider_env.insert(k, v.clone());
            }
        }
        // API keys among them: the endpoints are built from the values now set.
        c.api_endpoints = api_endpoints(&c.provider_env);
        c
    }

    fn provider_env(&self) -> ProviderEnv<'_> {
        ProviderEnv {
            values: &self.provider_env,
            tolerance_s: self.tolerance_s,
        }
    }

    /// Sets one provider env var (tooling that signs with a secret of its own, tests).
    pub fn with_provider_var(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.provider_env.insert(name, value.into());
        self
    }

    /// Builds the adapters whose secrets parse, in registry order. A provider whose secret is
    /// missing or unusable is left out (requests for it get 503) and reported here, for the
    /// start-up log.
    pub fn providers(&self) -> (Providers, Vec<(ProviderId, ProviderConfigError)>) {
        let mut adapters = Vec::new();
        let mut problems = Vec::new();
        for def in REGISTRY {
            match (def.build)(self.provider_env()) {
                None => {}
                Some(Ok(a)) => adapters.push(a),
                Some(Err(e)) => problems.push((def.id, e)),
            }
        }
        (Providers::new(adapters), problems)
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("tables", &self.tables)
            .field("store", &self.store)
            .field("lease_ms", &self.lease_ms)
            .field("max_lease_ms", &self.max_lease_ms)
            .field("tolerance_s", &self.tolerance_s)
            .field(
                "providers_env_set",
                &self.provider_env.keys().collect::<Vec<_>>(),
            )
            .field("api_endpoints", &self.api_endpoints)
            .field("reconcile", &self.reconcile)
            .field("default_account", &self.default_account)
            .field("read_token", &self.read_token)
            .field("source_allowlists", &self.source_allowlists)
            .finish()
    }
}

/// Each provider's source allowlist that is set; an unreadable one stops start-up (a typo must
/// not silently open or close the door).
fn source_allowlists(
    provider_env: &BTreeMap<&'static str, String>,
) -> Result<BTreeMap<ProviderId, SourceAllowlist>, ConfigError> {
    let mut lists = BTreeMap::new();
    for def in REGISTRY {
        let Some(value) = provider_env.get(def.source_ips) else {
            continue;
        };
        match SourceAllowlist::parse(value) {
            Ok(Some(list)) => {
                lists.insert(def.id, list);
            }
            Ok(None) => {}
            Err(_) => {
                return Err(ConfigError::Invalid {
                    name: def.source_ips,
                    value: value.clone(),
                    reason: "must list IP addresses or CIDR blocks (a.b.c.d, a.b.c.d/n, IPv6), separated by spaces or commas",
                })
            }
        }
    }
    Ok(lists)
}

/// A provider setting with no sensible meaning stops start-up; a bad secret only leaves its
/// provider out (reported by [`Config::providers`]).
fn check_provider_settings(
    values: &BTreeMap<&'static str, String>,
    tolerance_s: i64,
) -> Result<(), ConfigError> {
    let env = ProviderEnv {
        values,
        tolerance_s,
    };
    for def in REGISTRY {
        if let Some(Err(ProviderConfigError::Setting {
            name,
            value,
            reason,
        })) = (def.build)(env)
        {
            return Err(ConfigError::Invalid {
                name,
                value,
                reason,
            });
        }
    }
    Ok(())
}

/// A provider's API is used when its key is set (and its URL, where it has no public default).
fn api_endpoints(values: &BTreeMap<&'static str, String>) -> Vec<ApiEndpoint> {
    let get = |name: &str| {
        values
            .get(name)
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.trim().to_owned())
    };
    REGISTRY
        .iter()
        .filter_map(|d| {
            let api_key = get(d.api.key_var)?;
            let base_url =
                get(d.api.url_var).or_else(|| d.api.default_base_url.map(str::to_owned))?;
            Some(ApiEndpoint {
                provider: d.id,
                base_url,
                api_key,
                basic_auth: d.api.basic_auth,
            })
        })
        .collect()
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
        assert!(providers.get(ProviderId::GENERIC).is_none());
        assert_eq!(problems.len(), 1);
        let c =
            Config::from_lookup(|n| (n == "PAYHOOK_GENERIC_SECRETS").then(|| "   ".to_owned()))?;
        assert!(c.providers().0.get(ProviderId::GENERIC).is_none());
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
                ProviderId::STRIPE,
                ProviderId::PAYSTACK,
                ProviderId::FLUTTERWAVE
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
                ProviderId::STRIPE,
                ProviderId::PAYSTACK,
                ProviderId::FLUTTERWAVE
            ]
        );
        // No problem reported names a secret's value.
        assert!(problems
            .iter()
            .all(|(_, e)| !e.to_string().contains("oops")));
        Ok(())
    }

    #[test]
    fn adapter_settings_are_checked_at_start() -> Result<(), ConfigError> {
        with(&[
            ("PAYHOOK_PAYSTACK_ACCOUNT_KEY", "customer.wallet"),
            ("PAYHOOK_FLUTTERWAVE_REFERENCE", "id"),
        ])?;
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
                env_vars().iter().any(|(v, _)| v == name),
                "{name} is read but not in env_vars()"
            );
        }
    }

    #[test]
    fn apis_are_used_only_with_a_key_and_policy_has_defaults() -> Result<(), ConfigError> {
        let c = with(&[
            ("PAYHOOK_STRIPE_API_KEY", "rk_test"),
            ("PAYHOOK_GENERIC_API_KEY", "k"),
            ("PAYHOOK_GENERIC_API_URL", "http://127.0.0.1:9"),
            ("PAYHOOK_PAYSTACK_API_URL", "http://127.0.0.1:8"),
            ("PAYHOOK_RECONCILE_PENDING_AFTER_S", "60"),
        ])?;
        let names: Vec<_> = c
            .api_endpoints
            .iter()
            .map(|e| (e.provider, e.base_url.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                (ProviderId::GENERIC, "http://127.0.0.1:9"),
                (ProviderId::STRIPE, "https://api.stripe.com")
            ]
        );
        assert_eq!(c.reconcile.pending_after_ms, 60_000);
        assert_eq!(c.reconcile.give_up_after_ms, 259_200_000);
        assert!(!format!("{c:?}").contains("rk_test"));
        Ok(())
    }
}
