//! Reconciliation's configuration: which providers' APIs to ask, and thresholds. Read through
//! the same lookup as [`crate::config::Config`]; the names are listed in `config::ENV_VARS`.

use super::{ApiEndpoint, ReconcileSettings};
use crate::domain::ProviderId;

fn default_base(p: ProviderId) -> Option<&'static str> {
    match p {
        ProviderId::Stripe => Some("https://api.stripe.com"),
        ProviderId::Paystack => Some("https://api.paystack.co"),
        ProviderId::Flutterwave => Some("https://api.flutterwave.com"),
        ProviderId::Generic => None,
    }
}

/// A provider's API is used when its key is set (and, for generic, its URL).
pub fn endpoints(get: &impl Fn(&str) -> Option<String>) -> Vec<ApiEndpoint> {
    let upper = |p: ProviderId| p.as_str().to_uppercase();
    ProviderId::ALL
        .into_iter()
        .filter_map(|p| {
            let var = |suffix: &str| {
                get(&format!("PAYHOOK_{}_{suffix}", upper(p))).filter(|v| !v.trim().is_empty())
            };
            let api_key = var("API_KEY")?;
            let base_url = var("API_URL").or_else(|| default_base(p).map(str::to_owned))?;
            Some(ApiEndpoint {
                provider: p,
                base_url,
                api_key,
            })
        })
        .collect()
}

pub fn settings(get: &impl Fn(&str) -> Option<String>, lease_ms: i64) -> ReconcileSettings {
    let seconds = |name: &str| {
        get(name)
            .and_then(|v| v.trim().parse::<i64>().ok())
            .filter(|v| *v > 0)
    };
    let defaults = ReconcileSettings::default();
    ReconcileSettings {
        pending_after_ms: seconds("PAYHOOK_RECONCILE_PENDING_AFTER_S")
            .map_or(defaults.pending_after_ms, |s| s * 1_000),
        give_up_after_ms: seconds("PAYHOOK_RECONCILE_GIVE_UP_AFTER_S")
            .map_or(defaults.give_up_after_ms, |s| s * 1_000),
        lease_ms,
        ..defaults
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_is_used_only_with_a_key() {
        let get = |n: &str| match n {
            "PAYHOOK_STRIPE_API_KEY" => Some("rk_test".to_owned()),
            "PAYHOOK_GENERIC_API_KEY" => Some("k".to_owned()),
            "PAYHOOK_GENERIC_API_URL" => Some("http://127.0.0.1:9".to_owned()),
            "PAYHOOK_RECONCILE_PENDING_AFTER_S" => Some("60".to_owned()),
            _ => None,
        };
        let eps = endpoints(&get);
        let names: Vec<_> = eps
            .iter()
            .map(|e| (e.provider, e.base_url.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                (ProviderId::Generic, "http://127.0.0.1:9"),
                (ProviderId::Stripe, "https://api.stripe.com")
            ]
        );
        assert_eq!(settings(&get, 5).pending_after_ms, 60_000);
    }
}
