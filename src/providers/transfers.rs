//! How each provider is asked to send a transfer and about one, and how its answers read. The
//! webhook mapping of the same provider's settlement events lives beside its other events; both
//! end in a [`TransferState`], so a webhook, a transfer answer and reconciliation never read
//! one provider two ways.

use serde_json::Value;

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

/// `12.50` for 1250 minor units of a 2-decimal currency (Flutterwave's amounts).
pub fn major_decimal(money: Money) -> String {
    let exp = u32::from(money.currency.exponent());
    let amount = money.amount.get();
    if exp == 0 {
        return amount.to_string();
    }
    let scale = 10_i64.pow(exp);
    format!(
        "{}.{:0width$}",
        amount / scale,
        amount % scale,
        width = exp as usize
    )
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
    fn major_decimals_are_exact() {
        let m = |a, c| Money::new(a, Currency::parse(c).unwrap()).unwrap();
        assert_eq!(major_decimal(m(1250, "NGN")), "12.50");
        assert_eq!(major_decimal(m(5, "USD")), "0.05");
        assert_eq!(major_decimal(m(700, "JPY")), "700");
        assert_eq!(major_decimal(m(1001, "KWD")), "1.001");
    }
}
