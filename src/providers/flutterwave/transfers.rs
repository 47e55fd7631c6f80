//! Flutterwave (v3) transfers (payouts): `POST /v3/transfers` with the destination's fields
//! (`account_bank`, `account_number`, or `meta` for other corridors) and `amount` in **major**
//! units, `currency`, `narration`, `reference` (the payout id: Flutterwave's idempotency), and
//! the `transfer.completed` webhook, whose `data.status` is `SUCCESSFUL` or `FAILED`.
//!
//! Asking by reference: `GET /v3/transfers?reference={reference}` (a list; empty when it has
//! none). Flutterwave's reference documents fetching by its own numeric id, which payhook does
//! not have after a timeout; the list filter by reference is what integrators use. An empty
//! list makes payhook resend under the *same* reference, which Flutterwave refuses as a
//! duplicate if the first did arrive, so the worst case is a refused resend, never a second
//! transfer.

use serde_json::Value;

use crate::domain::{Currency, EventKind, Money, Recipient, TransferFacts, TransferState};
use crate::payouts::{TransferAnswer, TransferWord};
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{
    api_amount, error_text, json_body, major_number, ApiCall, TransferDef,
};
use crate::providers::PayloadError;

pub const TRANSFERS: TransferDef = TransferDef {
    send: |call| {
        let amount = major_number(api_amount(&super::UNITS, call.money)?)?;
        let mut own = vec![
            ("amount", amount),
            ("currency", Value::from(call.money.currency.as_str())),
            ("reference", Value::from(call.payout.as_str())),
        ];
        if let Some(n) = call.narration {
            own.push(("narration", Value::from(n)));
        }
        Ok(ApiCall {
            path: "/v3/transfers".into(),
            content_type: "application/json",
            body: json_body(call, &own),
            idempotency_key: None,
        })
    },
    // Flutterwave documents no window for its list filter; ten minutes, conservatively (its
    // `reference` is unique: a late resend is refused as a duplicate).
    visibility_ms: 600_000,
    ask_path: |payout| format!("/v3/transfers?reference={payout}"),
    read: |body, payout, asked| {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let transfer = if asked {
            let list = f
                .get("data")
                .and_then(Value::as_array)
                .ok_or_else(|| PayloadError::invalid("data", "must be a list"))?;
            match list
                .iter()
                .find(|t| t.get("reference").and_then(Value::as_str) == Some(payout.as_str()))
            {
                Some(t) => t,
                None => {
                    return Ok(TransferAnswer::Absent {
                        status: "no transfer under the reference".into(),
                    })
                }
            }
        } else {
            f.get("data")
                .ok_or_else(|| PayloadError::invalid("data", "is missing"))?
        };
        let status = transfer
            .get("status")
            .and_then(Value::as_str)
            .ok_or_else(|| PayloadError::invalid("data.status", "must be a string"))?;
        let f = Fields::new(transfer);
        Ok(TransferAnswer::Known(
            TransferWord::new(state_of(status), status)
                .with_money(answered_money(&f)?)
                .with_recipient(recipient(&f, "account_number")?),
        ))
    },
    // Flutterwave documents no duplicate-reference refusal (docs/payouts.md): a refusal that
    // says the reference is a duplicate or already used is read as one, and any other refused
    // resend waits for a person anyway.
    held: |_, body| {
        let said = error_text(body, &["message", "data.message"]);
        said.contains("reference")
            && ["duplicate", "already", "exist"]
                .iter()
                .any(|w| said.contains(w))
    },
};

/// The money of a transfer object in an API answer: `amount` in major units. serde_json keeps
/// a decimal as the shortest float that reads back the same, so `1250.5` prints as written
/// (exact to 15 significant digits, the most [`super::UNITS`] sends).
fn answered_money(f: &Fields<'_>) -> Result<Option<Money>, PayloadError> {
    let (Some(amount), Some(code)) = (f.get("amount"), f.opt_str("currency")?) else {
        return Ok(None);
    };
    let currency =
        Currency::parse(code).map_err(|e| PayloadError::invalid("currency", e.to_string()))?;
    let Value::Number(n) = amount else {
        return Err(PayloadError::invalid("amount", "must be a number"));
    };
    super::UNITS
        .from_api_decimal(&n.to_string(), currency)
        .map(Some)
        .map_err(|e| PayloadError::invalid("amount", e.to_string()))
}

/// The bank account a transfer names (compared with the destination's `account_number`).
fn recipient(f: &Fields<'_>, path: &str) -> Result<Option<Recipient>, PayloadError> {
    Ok(f.opt_str(path)?
        .map(|n| Recipient::new("account_number", n)))
}

fn state_of(status: &str) -> TransferState {
    match status {
        "SUCCESSFUL" => TransferState::Success,
        "FAILED" => TransferState::Failed,
        // NEW, PENDING, and anything it may add: not final.
        _ => TransferState::Pending,
    }
}

/// `transfer.completed`: one event for both ends, told apart by `data.status`.
pub fn transfer_completed(f: &Fields<'_>, text: &str) -> Result<EventKind, PayloadError> {
    let status = f.str("data.status")?;
    // Major units, converted exactly; compared with the payout's own.
    let money = if f.get("data.amount").is_some() {
        Some(super::flutterwave_money(f, text)?)
    } else {
        None
    };
    Ok(EventKind::Transfer(TransferFacts {
        reference: f.reference("data.reference")?,
        state: state_of(status),
        provider_status: status.to_owned(),
        money,
        recipient: recipient(f, "data.account_number")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Currency, Money};
    use crate::payouts::{PayoutId, TransferCall};
    use crate::providers::flutterwave::{Flutterwave, ReferenceField};
    use crate::providers::Provider;

    const PID: &str = "po_3f2a9c1e5b7d4a6c8e0f1a2b3c4d5e6f";

    #[test]
    fn transfer_completed_and_the_list_answer_read_the_same_words() {
        let f = Flutterwave::from_env_values(Some("hash"), None, ReferenceField::TxRef, "account")
            .unwrap();
        let id = PayoutId::parse(PID).unwrap();
        for (status, state) in [
            ("SUCCESSFUL", TransferState::Success),
            ("FAILED", TransferState::Failed),
            ("NEW", TransferState::Pending),
        ] {
            let body = format!(
                r#"{{"event":"transfer.completed","event.type":"Transfer","data":{{"id":33286,"reference":"{PID}","amount":250,"currency":"NGN","status":"{status}"}}}}"#
            );
            match f.normalise(body.as_bytes()).unwrap().kind {
                EventKind::Transfer(t) => assert_eq!((t.reference.as_str(), t.state), (PID, state)),
                other => panic!("{status}: {other:?}"),
            }
            let listed = format!(
                r#"{{"status":"success","data":[{{"id":1,"reference":"{PID}","status":"{status}"}}]}}"#
            );
            assert_eq!(
                (TRANSFERS.read)(listed.as_bytes(), &id, true).unwrap(),
                TransferAnswer::Known(TransferWord::new(state, status))
            );
        }
        let empty = r#"{"status":"success","data":[]}"#;
        assert!(matches!(
            (TRANSFERS.read)(empty.as_bytes(), &id, true).unwrap(),
            TransferAnswer::Absent { .. }
        ));
    }

    #[test]
    fn the_transfer_call_is_in_major_units_under_the_reference() {
        let id = PayoutId::parse(PID).unwrap();
        let money = Money::new(125_050, Currency::parse("NGN").unwrap()).unwrap();
        let mut dest = serde_json::Map::new();
        dest.insert("account_bank".into(), Value::from("044"));
        dest.insert("account_number".into(), Value::from("0690000040"));
        let api = (TRANSFERS.send)(&TransferCall {
            payout: &id,
            money,
            destination: &dest,
            narration: None,
        })
        .unwrap();
        let body: Value = serde_json::from_slice(&api.body).unwrap();
        assert_eq!(
            (api.path.as_str(), body["reference"].as_str()),
            ("/v3/transfers", Some(PID))
        );
        assert_eq!(body["amount"].as_f64(), Some(1250.5));
        assert_eq!(body["account_bank"], "044");
    }

    #[test]
    fn a_listed_transfer_names_its_money_and_account() {
        let id = PayoutId::parse(PID).unwrap();
        let listed = format!(
            r#"{{"status":"success","data":[{{"id":1,"reference":"{PID}","status":"SUCCESSFUL","amount":1250.5,"currency":"NGN","account_number":"0690000040"}}]}}"#
        );
        let TransferAnswer::Known(word) = (TRANSFERS.read)(listed.as_bytes(), &id, true).unwrap()
        else {
            panic!("not a word");
        };
        assert_eq!(word.money.map(|m| m.amount.get()), Some(125_050));
        assert_eq!(
            word.recipient,
            Some(Recipient::new("account_number", "0690000040"))
        );
        let dup = br#"{"status":"error","message":"Duplicate reference: a transfer with this reference already exists","data":null}"#;
        assert!((TRANSFERS.held)(400, dup));
        let invalid = br#"{"status":"error","message":"Invalid account number","data":null}"#;
        assert!(!(TRANSFERS.held)(400, invalid));
    }
}
