//! Paystack transfers (payouts): `POST /transfer` `{"source":"balance","amount","recipient",
//! "reference","reason","currency"}` (amount in minor units, `recipient` an `RCP_…` code from
//! the destination), `GET /transfer/verify/{reference}` (404 for a reference it never got), and
//! the `transfer.success` / `transfer.failed` / `transfer.reversed` webhooks. Paystack's
//! `reference` is its idempotency: lower-case letters, digits, `-` and `_` (a payout id fits).
//!
//! Statuses (Paystack's "how transfers work"): `success`, `failed`, `reversed`, `abandoned`,
//! `blocked`, `rejected` are conclusive; `pending`, `otp`, `received` are not.

use serde_json::Value;

use crate::domain::{EventKind, TransferFacts, TransferState};
use crate::payouts::TransferAnswer;
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{json_body, known, ApiCall, TransferDef};
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
            ("amount", Value::from(call.money.amount.get())),
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
    ask_path: |payout| format!("/transfer/verify/{payout}"),
    read: |body, _, _| {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let status = f.str("data.status")?;
        Ok(match state_of(status) {
            Some(state) => known(state, status),
            None => TransferAnswer::Known {
                state: TransferState::Pending,
                status: status.to_owned(),
            },
        })
    },
};

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
    f.opt_money("data.amount", "data.currency")?;
    Ok(EventKind::Transfer(TransferFacts {
        reference: f.reference("data.reference")?,
        state,
        provider_status: f
            .opt_str("data.status")?
            .unwrap_or(state.as_str())
            .to_owned(),
    }))
}
