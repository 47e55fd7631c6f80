//! How each provider is asked to send a transfer and about one, and how its answers read. The
//! webhook mapping of the same provider's settlement events lives beside its other events; both
//! end in a [`TransferState`], so a webhook, a transfer answer and reconciliation never read
//! one provider two ways.

use serde_json::Value;

use super::units::{ApiAmount, Units};
use super::PayloadError;
use crate::domain::{Money, TransferState};
use crate::payouts::{PayoutId, TransferAnswer, TransferCall, TransferWord};

/// One HTTP request to a provider's API (the client adds the base URL and the key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiCall {
    pub path: String,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    /// The provider's own idempotency header, where it has one (Stripe): the payout id.
    pub idempotency_key: Option<String>,
}

/// A provider's transfer API. A provider without one answers 400 to a payout naming it.
#[derive(Debug, Clone, Copy)]
pub struct TransferDef {
    /// The call that sends a payout's transfer under its id as the reference.
    pub send: fn(&TransferCall<'_>) -> Result<ApiCall, PayloadError>,
    /// The path (`GET`) that tells about the transfer under a reference.
    pub ask_path: fn(&PayoutId) -> String,
    /// Reads a 2xx answer of either call (`asked`: the answer to `ask_path`), with the money
    /// and recipient it names, so it is judged as the same word by webhook would be.
    pub read:
        fn(body: &[u8], payout: &PayoutId, asked: bool) -> Result<TransferAnswer, PayloadError>,
    /// Whether a refusal of a send (a 4xx other than 408/409/425/429, and its body) is the
    /// provider's word that it already holds a transfer under the reference (a duplicate
    /// reference, an idempotency key already used): never a failure, and nothing is sent
    /// again. docs/payouts.md has each provider's refusal table and its sources.
    pub held: fn(status: u16, body: &[u8]) -> bool,
    /// How long after a send (its call's end) a lookup may still miss a transfer the provider
    /// took: a lookup that finds nothing proves it never arrived only after this.
    /// docs/payouts.md says where each number comes from.
    pub visibility_ms: i64,
}

/// A JSON body from the destination's fields and payhook's own (which win: the caller cannot
/// change the reference, amount or currency through the destination).
pub fn json_body(call: &TransferCall<'_>, own: &[(&str, Value)]) -> Vec<u8> {
    let mut body = call.destination.clone();
    for (k, v) in own {
        body.insert((*k).to_owned(), v.clone());
    }
    Value::Object(body).to_string().into_bytes()
}

/// `money` in the provider's unit (its [`Units`] table): a payout the table refuses never
/// reaches the provider (the API refused it with 422 already; this holds for a payout accepted
/// before the table said so).
pub fn api_amount(units: &Units, money: Money) -> Result<ApiAmount, PayloadError> {
    units
        .to_api(money)
        .map_err(|e| PayloadError::invalid("amount", e.to_string()))
}

/// A major-unit JSON number exactly as [`ApiAmount::decimal`] writes it: an integer when there
/// is no fraction, else the double whose shortest form is that decimal (the table keeps the
/// digits within what a double carries exactly).
pub fn major_number(amount: ApiAmount) -> Result<Value, PayloadError> {
    let scale = 10_i64.pow(u32::from(amount.exponent));
    if amount.units % scale == 0 {
        return Ok(Value::from(amount.units / scale));
    }
    let decimal = amount.decimal();
    decimal
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .filter(|n| n.to_string() == decimal.trim_end_matches('0'))
        .map(Value::Number)
        .ok_or_else(|| {
            PayloadError::invalid("amount", format!("{decimal} is not exact as a JSON number"))
        })
}

/// A state word that names neither money nor recipient.
pub fn known(state: TransferState, status: &str) -> TransferAnswer {
    TransferAnswer::Known(TransferWord::new(state, status))
}

/// The message of a JSON error body, at `path` (dotted), lower-cased; empty when there is none.
pub fn error_text(body: &[u8], paths: &[&str]) -> String {
    let Ok(root) = serde_json::from_slice::<Value>(body) else {
        return String::new();
    };
    paths
        .iter()
        .filter_map(|p| {
            p.split('.')
                .try_fold(&root, |v, k| v.get(k))
                .and_then(Value::as_str)
        })
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Currency;

    #[test]
    fn major_numbers_are_exact() {
        let n = |units, exponent| {
            major_number(ApiAmount { units, exponent })
                .unwrap()
                .to_string()
        };
        assert_eq!(n(1250, 2), "12.5");
        assert_eq!(n(1200, 2), "12");
        assert_eq!(n(5, 2), "0.05");
        assert_eq!(n(700, 0), "700");
        assert_eq!(n(1001, 3), "1.001");
        assert_eq!(n(999_999_999_999_999, 2), "9999999999999.99");
        let _ = Currency::parse("NGN");
    }
}
