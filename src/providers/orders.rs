//! The merchant's order id, where a provider carries one: a key of the metadata the merchant
//! attached to the payment (Stripe and Paystack `metadata`, Flutterwave `meta`, Razorpay
//! `notes`, Adyen `additionalData.metadata.*`, the generic provider's `data.metadata` or `data`),
//! `order_id` unless `PAYHOOK_ORDER_KEYS` names another per provider, as the account key is.
//!
//! Read for the delivery log and the console's search only ("my customer paid for order
//! ord_7731"): nothing about money depends on it, so a changed setting changes what later
//! deliveries are findable by, never what any delivery moved.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{ProviderDef, REGISTRY};
use crate::domain::ProviderId;

/// The setting: `provider=key` pairs, space-separated (`stripe=order paystack=cart.order_ref`).
pub const ORDER_KEYS: &str = "PAYHOOK_ORDER_KEYS";
/// The key looked for when the setting names none for a provider.
pub const DEFAULT_KEY: &str = "order_id";
/// Longest order id kept (longer values are not ids: they are not logged).
const MAX_CHARS: usize = 200;

/// The order key of every provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderKeys {
    keys: BTreeMap<ProviderId, String>,
}

impl OrderKeys {
    /// Reads the setting; `Err` names what is wrong with it.
    pub fn parse(setting: Option<&str>) -> Result<Self, String> {
        let mut keys = BTreeMap::new();
        for pair in setting.unwrap_or("").split_whitespace() {
            let (name, key) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not provider=key"))?;
            let provider = super::registered(name)
                .ok_or_else(|| format!("{name:?} is not a provider payhook knows"))?;
            if key.split('.').any(str::is_empty) {
                return Err(format!(
                    "{key:?} is not a key such as order_id or cart.order"
                ));
            }
            keys.insert(provider, key.to_owned());
        }
        Ok(OrderKeys { keys })
    }

    fn key(&self, provider: ProviderId) -> &str {
        self.keys.get(&provider).map_or(DEFAULT_KEY, String::as_str)
    }

    /// The order id in a delivery's body, if its provider's metadata carries the key. Costs a
    /// parse only when the key's last segment occurs in the bytes at all.
    pub fn order_of(&self, provider: ProviderId, body: &[u8]) -> Option<String> {
        let def = REGISTRY.iter().find(|d| d.id == provider)?;
        let key = self.key(provider);
        let last = key.rsplit('.').next().unwrap_or(key);
        if !contains(body, last.as_bytes()) {
            return None;
        }
        let value: Value = serde_json::from_slice(body).ok()?;
        find(def, &value, key)
    }
}

/// The value at `{parent}.{key}` for the first of the provider's metadata parents that has it.
fn find(def: &ProviderDef, body: &Value, key: &str) -> Option<String> {
    def.metadata.iter().find_map(|parent| {
        let found = at(body, &format!("{parent}.{key}"))?;
        let text = match found {
            Value::String(s) => s.trim().to_owned(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let fits = !text.is_empty()
            && text.chars().count() <= MAX_CHARS
            && !text.chars().any(char::is_control);
        fits.then_some(text)
    })
}

/// The value at a dotted path, where a key may itself contain dots (Adyen flattens
/// `additionalData` into keys such as `metadata.order_id`): at each object the rest of the path
/// is tried whole before descending by its first segment.
fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    let object = value.as_object()?;
    if let Some(v) = object.get(path) {
        return Some(v);
    }
    let (first, rest) = path.split_once('.')?;
    at(object.get(first)?, rest)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(keys: &OrderKeys, provider: ProviderId, body: &str) -> Option<String> {
        keys.order_of(provider, body.as_bytes())
    }

    #[test]
    fn each_provider_reads_its_own_metadata() {
        let keys = OrderKeys::default();
        let stripe = r#"{"data":{"object":{"metadata":{"order_id":"ord_7731"}}}}"#;
        assert_eq!(
            of(&keys, super::super::stripe::ID, stripe).as_deref(),
            Some("ord_7731")
        );
        let paystack = r#"{"data":{"metadata":{"order_id":7731}}}"#;
        assert_eq!(
            of(&keys, super::super::paystack::ID, paystack).as_deref(),
            Some("7731")
        );
        let adyen = r#"{"additionalData":{"metadata.order_id":"ord_1"}}"#;
        assert_eq!(
            of(&keys, super::super::adyen::ID, adyen).as_deref(),
            Some("ord_1")
        );
        let razorpay = r#"{"payload":{"payment":{"entity":{"notes":{"order_id":"o9"}}}}}"#;
        assert_eq!(
            of(&keys, super::super::razorpay::ID, razorpay).as_deref(),
            Some("o9")
        );
        // Another provider's place is not this one's: a Stripe-shaped body sent as Paystack.
        assert_eq!(of(&keys, super::super::paystack::ID, stripe), None);
    }

    #[test]
    fn the_setting_names_a_key_per_provider() -> Result<(), String> {
        let keys = OrderKeys::parse(Some("stripe=cart.ref"))?;
        let body = r#"{"data":{"object":{"metadata":{"order_id":"a","cart":{"ref":"b"}}}}}"#;
        assert_eq!(
            of(&keys, super::super::stripe::ID, body).as_deref(),
            Some("b")
        );
        assert!(OrderKeys::parse(Some("nosuch=order")).is_err());
        assert!(OrderKeys::parse(Some("stripe")).is_err());
        assert!(OrderKeys::parse(Some("stripe=a..b")).is_err());
        Ok(())
    }

    #[test]
    fn values_that_are_not_ids_are_not_kept() {
        let keys = OrderKeys::default();
        for body in [
            r#"{"data":{"metadata":{"order_id":""}}}"#,
            r#"{"data":{"metadata":{"order_id":{"nested":1}}}}"#,
            r#"{"data":{"metadata":{"order_id":"a\nb"}}}"#,
        ] {
            assert_eq!(of(&keys, super::super::generic::ID, body), None, "{body}");
        }
    }
}
