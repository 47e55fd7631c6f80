//! Stripe Connect transfers (payouts to a connected account): `POST /v1/transfers`
//! (form-encoded `amount` in Stripe's unit for the currency, [`super::UNITS`], `currency`, `destination` = the destination's
//! `account`, `transfer_group` and `metadata[payhook_payout]` = the payout id, `description`)
//! with `Idempotency-Key: {payout id}`. Stripe answers a created transfer, which has moved the
//! funds (it has no pending state): success. A refusal is a 4xx error object.
//!
//! Asking by reference: `GET /v1/transfers?transfer_group={payout id}` (an empty `data` when
//! it has none). Webhooks: `transfer.created` (the confirmation: success) and
//! `transfer.reversed`, which Stripe also sends for partial reversals: only a full reversal
//! (`reversed: true`) gives the payout back; a partial one is logged and left to a human.

use serde_json::Value;

use crate::domain::{EventKind, Recipient, Reference, TransferFacts, TransferState};
use crate::payouts::{TransferAnswer, TransferWord};
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{api_amount, error_text, ApiCall, TransferDef};
use crate::providers::PayloadError;

pub const TRANSFERS: TransferDef = TransferDef {
    send: |call| {
        let account = call
            .destination
            .get("account")
            .and_then(Value::as_str)
            .filter(|a| a.starts_with("acct_"))
            .ok_or_else(|| {
                PayloadError::invalid(
                    "destination.account",
                    "must be a connected account id (acct_…)",
                )
            })?;
        let mut form = vec![
            (
                "amount",
                api_amount(&super::UNITS, call.money)?.units.to_string(),
            ),
            (
                "currency",
                call.money.currency.as_str().to_ascii_lowercase(),
            ),
            ("destination", account.to_owned()),
            ("transfer_group", call.payout.to_string()),
            ("metadata[payhook_payout]", call.payout.to_string()),
        ];
        if let Some(n) = call.narration {
            form.push(("description", n.to_owned()));
        }
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        Ok(ApiCall {
            path: "/v1/transfers".into(),
            content_type: "application/x-www-form-urlencoded",
            body: body.into_bytes(),
            idempotency_key: Some(call.payout.to_string()),
        })
    },
    // Stripe answers a request still running under the same `Idempotency-Key` with 409 and keeps
    // keys 24 hours; five minutes covers a create it is still executing.
    visibility_ms: 300_000,
    ask_path: |payout| format!("/v1/transfers?transfer_group={payout}"),
    read: |body, _, asked| {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let transfer = if asked {
            match f
                .get("data")
                .and_then(Value::as_array)
                .and_then(|l| l.first())
            {
                Some(t) => t,
                None => {
                    return Ok(TransferAnswer::Absent {
                        status: "no transfer in the group".into(),
                    })
                }
            }
        } else {
            &root
        };
        answer_of(transfer)
    },
    // `idempotency_error`: the key (the payout id) was used by a request Stripe kept, whose
    // outcome this answer does not tell; never a failure. A key still running answers 409,
    // which is ambiguous already.
    held: |_, body| error_text(body, &["error.type"]) == "idempotency_error",
};

fn answer_of(transfer: &Value) -> Result<TransferAnswer, PayloadError> {
    let f = Fields::new(transfer);
    let word = if transfer.get("reversed").and_then(Value::as_bool) == Some(true) {
        TransferWord::new(TransferState::Reversed, "reversed")
    } else {
        TransferWord::new(TransferState::Success, "created")
    };
    let money = match f.get("amount") {
        Some(_) => Some(super::stripe_money(&f, "amount", "currency")?),
        None => None,
    };
    Ok(TransferAnswer::Known(
        word.with_money(money)
            .with_recipient(recipient(&f, "destination")?),
    ))
}

/// The connected account a transfer went to (compared with the destination's `account`).
fn recipient(f: &Fields<'_>, path: &str) -> Result<Option<Recipient>, PayloadError> {
    Ok(f.opt_str(path)?.map(|a| Recipient::new("account", a)))
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `transfer.created` and `transfer.reversed`: the payout is the transfer's
/// `metadata.payhook_payout` (or its `transfer_group`); a transfer without either is not one
/// payhook sent.
pub fn transfer_event(f: &Fields<'_>, created: bool) -> Result<EventKind, PayloadError> {
    let reference = match (
        f.opt_str("data.object.metadata.payhook_payout")?,
        f.opt_str("data.object.transfer_group")?,
    ) {
        (Some(r), _) | (None, Some(r)) => r,
        (None, None) => return Ok(EventKind::Ignored),
    };
    let reference = Reference::parse(reference)
        .map_err(|e| PayloadError::invalid("data.object.transfer_group", e.to_string()))?;
    let reversed = f.get("data.object.reversed").and_then(Value::as_bool) == Some(true);
    let state = match (created, reversed) {
        (_, true) => TransferState::Reversed,
        (true, false) => TransferState::Success,
        // A partial reversal: not the payout's end; logged for a human.
        (false, false) => return Ok(EventKind::Ignored),
    };
    // The transfer's amount: a full reversal reverses all of it.
    let money = if f.get("data.object.amount").is_some() {
        Some(super::stripe_money(
            f,
            "data.object.amount",
            "data.object.currency",
        )?)
    } else {
        None
    };
    Ok(EventKind::Transfer(TransferFacts {
        reference,
        state,
        provider_status: if reversed { "reversed" } else { "created" }.to_owned(),
        money,
        recipient: recipient(f, "data.object.destination")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Currency, Money};
    use crate::payouts::{PayoutId, TransferCall};
    use crate::providers::stripe::Stripe;
    use crate::providers::Provider;

    const PID: &str = "po_3f2a9c1e5b7d4a6c8e0f1a2b3c4d5e6f";

    fn event(kind: &str, reversed: bool, amount_reversed: i64) -> String {
        format!(
            r#"{{"id":"evt_1","type":"{kind}","data":{{"object":{{"id":"tr_1","object":"transfer","amount":400,"currency":"usd","transfer_group":"{PID}","amount_reversed":{amount_reversed},"reversed":{reversed},"metadata":{{"payhook_payout":"{PID}"}}}}}}}}"#
        )
    }

    #[test]
    fn created_is_success_and_only_a_full_reversal_reverses() {
        let s = Stripe::from_env_value("whsec_x", 300, "account").unwrap();
        let kind = |b: String| s.normalise(b.as_bytes()).unwrap().kind;
        assert!(matches!(
            kind(event("transfer.created", false, 0)),
            EventKind::Transfer(TransferFacts {
                state: TransferState::Success,
                ..
            })
        ));
        assert!(matches!(
            kind(event("transfer.reversed", true, 400)),
            EventKind::Transfer(TransferFacts {
                state: TransferState::Reversed,
                ..
            })
        ));
        assert_eq!(
            kind(event("transfer.reversed", false, 150)),
            EventKind::Ignored
        );
        let id = PayoutId::parse(PID).unwrap();
        let listed = format!(
            r#"{{"object":"list","data":[{}]}}"#,
            r#"{"id":"tr_1","reversed":true}"#
        );
        assert!(matches!(
            (TRANSFERS.read)(listed.as_bytes(), &id, true).unwrap(),
            TransferAnswer::Known(TransferWord {
                state: TransferState::Reversed,
                ..
            })
        ));
        assert!(matches!(
            (TRANSFERS.read)(br#"{"object":"list","data":[]}"#, &id, true).unwrap(),
            TransferAnswer::Absent { .. }
        ));
    }

    #[test]
    fn the_transfer_call_is_form_encoded_with_the_idempotency_key() {
        let id = PayoutId::parse(PID).unwrap();
        let money = Money::new(400, Currency::parse("USD").unwrap()).unwrap();
        let mut dest = serde_json::Map::new();
        let call = |d: &serde_json::Map<String, Value>| TransferCall {
            payout: &id,
            money,
            destination: Box::leak(Box::new(d.clone())),
            narration: Some("a b"),
        };
        assert!((TRANSFERS.send)(&call(&dest)).is_err());
        dest.insert("account".into(), Value::from("acct_1"));
        let api = (TRANSFERS.send)(&call(&dest)).unwrap();
        let body = String::from_utf8(api.body).unwrap();
        assert_eq!(api.idempotency_key.as_deref(), Some(PID));
        assert!(
            body.contains("amount=400&currency=usd&destination=acct_1"),
            "{body}"
        );
        assert!(
            body.contains(&format!("transfer_group={PID}")) && body.contains("description=a%20b")
        );
    }

    #[test]
    fn an_answer_names_its_money_in_iso_units_and_its_account() {
        let id = PayoutId::parse(PID).unwrap();
        let created = br#"{"id":"tr_1","object":"transfer","amount":400,"currency":"usd","destination":"acct_1","reversed":false}"#;
        let TransferAnswer::Known(word) = (TRANSFERS.read)(created, &id, false).unwrap() else {
            panic!("not a word");
        };
        let usd = Currency::parse("USD").unwrap();
        assert_eq!(word.money, Some(Money::new(400, usd).unwrap()));
        assert_eq!(word.recipient, Some(Recipient::new("account", "acct_1")));
        let reused = br#"{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}"#;
        assert!((TRANSFERS.held)(400, reused));
        let broke = br#"{"error":{"type":"invalid_request_error","code":"balance_insufficient"}}"#;
        assert!(!(TRANSFERS.held)(400, broke));
    }
}
