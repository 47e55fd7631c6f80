//! Paystack transfers (payouts): `POST /transfer` `{"source":"balance","amount","recipient",
//! "reference","reason","currency"}` (amount in minor units, `recipient` an `RCP_…` code from
//! the destination), `GET /transfer/verify/{reference}` (404 for a reference it never got), and
//! the `transfer.success` / `transfer.failed` / `transfer.reversed` webhooks. Paystack's
//! `reference` is its idempotency: lower-case letters, digits, `-` and `_` (a payout id fits).
//!
//! Statuses (Paystack's "how transfers work"): `success`, `failed`, `reversed`, `abandoned`,
//! `blocked`, `rejected` are conclusive; `pending`, `otp`, `received` are not.

use serde_json::Value;

use crate::domain::{EventKind, Recipient, TransferFacts, TransferState};
use crate::payouts::{TransferAnswer, TransferWord};
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{api_amount, error_text, json_body, ApiCall, TransferDef};
use crate::providers::PayloadError;

pub const TRANSFERS: TransferDef = TransferDef {
    send: |call| {
        if !call.destination.contains_key("recipient") {
            return Err(PayloadError::invalid(
                "destination.recipient",
                "is required (a Paystack transfer recipient code, RCP_…)",
            ));
        }
        let mut own = vec![
            ("source", Value::from("balance")),
            (
                "amount",
                Value::from(api_amount(&super::UNITS, call.money)?.units),
            ),
            ("currency", Value::from(call.money.currency.as_str())),
            ("reference", Value::from(call.payout.as_str())),
        ];
        if let Some(n) = call.narration {
            own.push(("reason", Value::from(n)));
        }
        Ok(ApiCall {
            path: "/transfer".into(),
            content_type: "application/json",
            body: json_body(call, &own),
            idempotency_key: None,
        })
    },
    // Paystack documents no window for `verify`; ten minutes, conservatively (a duplicate
    // reference is refused by Paystack, so a late resend is refused rather than paid twice).
    visibility_ms: 600_000,
    ask_path: |payout| format!("/transfer/verify/{payout}"),
    read: |body, _, _| {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let status = f.str("data.status")?;
        let state = state_of(status).unwrap_or(TransferState::Pending);
        Ok(TransferAnswer::Known(
            TransferWord::new(state, status)
                .with_money(f.opt_money(&super::UNITS, "data.amount", "data.currency")?)
                .with_recipient(recipient(&f)?),
        ))
    },
    // "Please provide a unique reference. Reference already exists on a transfer" (code
    // `duplicate_transfer_reference`): the status is not documented, the words are.
    held: |_, body| {
        let said = error_text(body, &["message", "code"]);
        said.contains("reference already exists") || said.contains("duplicate_transfer_reference")
    },
};

/// The recipient code a transfer names (`data.recipient.recipient_code` in a verify answer and
/// in webhooks; the create answer's `data.recipient` is a numeric id, which names nothing to
/// compare).
fn recipient(f: &Fields<'_>) -> Result<Option<Recipient>, PayloadError> {
    Ok(f.opt_str("data.recipient.recipient_code")?
        .map(|code| Recipient::new("recipient", code)))
}

/// Paystack's status word as payhook reads it (`None`: not one it documents).
fn state_of(status: &str) -> Option<TransferState> {
    Some(match status {
        "success" => TransferState::Success,
        "failed" | "abandoned" | "blocked" | "rejected" => TransferState::Failed,
        "reversed" => TransferState::Reversed,
        "pending" | "otp" | "received" | "queued" => TransferState::Pending,
        _ => return None,
    })
}

/// `transfer.success` / `transfer.failed` / `transfer.reversed`: `data.reference` is the
/// reference payhook sent; the event names the word.
pub fn transfer_event(f: &Fields<'_>, state: TransferState) -> Result<EventKind, PayloadError> {
    Ok(EventKind::Transfer(TransferFacts {
        reference: f.reference("data.reference")?,
        state,
        provider_status: f
            .opt_str("data.status")?
            .unwrap_or(state.as_str())
            .to_owned(),
        // Minor units, as Paystack sends them; compared with the payout's own.
        money: f.opt_money(&super::UNITS, "data.amount", "data.currency")?,
        recipient: recipient(f)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Currency;
    use crate::payouts::{PayoutId, TransferCall};
    use crate::providers::Provider;

    const PID: &str = "po_3f2a9c1e5b7d4a6c8e0f1a2b3c4d5e6f";

    #[test]
    fn webhooks_and_answers_read_the_same_words() {
        let p = super::super::Paystack::from_env_value("sk_test_x", "account").unwrap();
        for (event, status, state) in [
            ("transfer.success", "success", TransferState::Success),
            ("transfer.failed", "failed", TransferState::Failed),
            ("transfer.reversed", "reversed", TransferState::Reversed),
        ] {
            let body = format!(
                r#"{{"event":"{event}","data":{{"reference":"{PID}","amount":25000,"currency":"NGN","status":"{status}","transfer_code":"TRF_1","id":1}}}}"#
            );
            match p.normalise(body.as_bytes()).unwrap().kind {
                EventKind::Transfer(t) => {
                    assert_eq!((t.reference.as_str(), t.state), (PID, state));
                }
                other => panic!("{event}: {other:?}"),
            }
            let answer =
                format!(r#"{{"status":true,"data":{{"reference":"{PID}","status":"{status}"}}}}"#);
            let id = PayoutId::parse(PID).unwrap();
            assert_eq!(
                (TRANSFERS.read)(answer.as_bytes(), &id, true).unwrap(),
                TransferAnswer::Known(TransferWord::new(state, status))
            );
        }
        let id = PayoutId::parse(PID).unwrap();
        for (status, state) in [
            ("otp", TransferState::Pending),
            ("abandoned", TransferState::Failed),
        ] {
            let answer = format!(r#"{{"status":true,"data":{{"status":"{status}"}}}}"#);
            assert_eq!(
                (TRANSFERS.read)(answer.as_bytes(), &id, false).unwrap(),
                TransferAnswer::Known(TransferWord::new(state, status))
            );
        }
    }

    #[test]
    fn the_transfer_call_carries_the_reference_and_needs_a_recipient() {
        let id = PayoutId::parse(PID).unwrap();
        let money = crate::domain::Money::new(25_000, Currency::parse("NGN").unwrap()).unwrap();
        let mut dest = serde_json::Map::new();
        let call = |d: &serde_json::Map<String, Value>| TransferCall {
            payout: &id,
            money,
            destination: Box::leak(Box::new(d.clone())),
            narration: Some("May"),
        };
        assert!((TRANSFERS.send)(&call(&dest)).is_err());
        dest.insert("recipient".into(), Value::from("RCP_1"));
        dest.insert("reference".into(), Value::from("caller_cannot_override"));
        let api = (TRANSFERS.send)(&call(&dest)).unwrap();
        let body: Value = serde_json::from_slice(&api.body).unwrap();
        assert_eq!(api.path, "/transfer");
        assert_eq!(body["reference"], PID);
        assert_eq!(body["amount"], 25_000);
        assert_eq!(
            (body["recipient"].as_str(), body["reason"].as_str()),
            (Some("RCP_1"), Some("May"))
        );
    }

    #[test]
    fn a_verify_answer_names_its_money_and_recipient_and_a_duplicate_reference_is_held() {
        let id = PayoutId::parse(PID).unwrap();
        let answer = br#"{"status":true,"data":{"status":"success","amount":1,"currency":"NGN","recipient":{"recipient_code":"RCP_other"}}}"#;
        let TransferAnswer::Known(word) = (TRANSFERS.read)(answer, &id, true).unwrap() else {
            panic!("not a word");
        };
        assert_eq!(word.money.map(|m| m.amount.get()), Some(1));
        assert_eq!(
            word.recipient,
            Some(Recipient::new("recipient", "RCP_other"))
        );
        // The create answer's recipient is a number: nothing to compare.
        let created = br#"{"status":true,"data":{"status":"pending","amount":100,"currency":"NGN","recipient":77}}"#;
        assert!(matches!(
            (TRANSFERS.read)(created, &id, false).unwrap(),
            TransferAnswer::Known(TransferWord {
                recipient: None,
                money: Some(_),
                ..
            })
        ));
        let duplicate = br#"{"status":false,"message":"Please provide a unique reference. Reference already exists on a transfer","type":"validation_error","code":"duplicate_transfer_reference"}"#;
        assert!((TRANSFERS.held)(400, duplicate));
        let broke =
            br#"{"status":false,"message":"Your balance is not enough to fulfill this request"}"#;
        assert!(!(TRANSFERS.held)(400, broke));
    }
}
