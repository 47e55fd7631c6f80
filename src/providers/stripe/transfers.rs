//! Stripe Connect transfers (payouts to a connected account): `POST /v1/transfers`
//! (form-encoded `amount` in minor units, `currency`, `destination` = the destination's
//! `account`, `transfer_group` and `metadata[payhook_payout]` = the payout id, `description`)
//! with `Idempotency-Key: {payout id}`. Stripe answers a created transfer, which has moved the
//! funds (it has no pending state): success. A refusal is a 4xx error object.
//!
//! Asking by reference: `GET /v1/transfers?transfer_group={payout id}` (an empty `data` when
//! it has none). Webhooks: `transfer.created` (the confirmation: success) and
//! `transfer.reversed`, which Stripe also sends for partial reversals: only a full reversal
//! (`reversed: true`) gives the payout back; a partial one is logged and left to a human.

use serde_json::Value;

use crate::domain::{EventKind, Reference, TransferFacts, TransferState};
use crate::payouts::TransferAnswer;
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{ApiCall, TransferDef};
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
            ("amount", call.money.amount.get().to_string()),
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
        Ok(answer_of(transfer))
    },
};

fn answer_of(transfer: &Value) -> TransferAnswer {
    if transfer.get("reversed").and_then(Value::as_bool) == Some(true) {
        TransferAnswer::Known {
            state: TransferState::Reversed,
            status: "reversed".into(),
        }
    } else {
        TransferAnswer::Known {
            state: TransferState::Success,
            status: "created".into(),
        }
    }
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
    Ok(EventKind::Transfer(TransferFacts {
        reference,
        state,
        provider_status: if reversed { "reversed" } else { "created" }.to_owned(),
    }))
}
