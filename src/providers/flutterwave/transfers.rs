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

use crate::domain::{EventKind, TransferFacts, TransferState};
use crate::payouts::TransferAnswer;
use crate::providers::json::{parse_object, Fields};
use crate::providers::transfers::{json_body, major_decimal, ApiCall, TransferDef};
use crate::providers::PayloadError;

pub const TRANSFERS: TransferDef = TransferDef {
    send: |call| {
        let mut own = vec![
            (
                "amount",
                Value::from(major_decimal(call.money).parse::<f64>().unwrap_or(0.0)),
            ),
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
        Ok(TransferAnswer::Known {
            state: state_of(status),
            status: status.to_owned(),
        })
    },
};

fn state_of(status: &str) -> TransferState {
    match status {
        "SUCCESSFUL" => TransferState::Success,
        "FAILED" => TransferState::Failed,
        // NEW, PENDING, and anything it may add: not final.
        _ => TransferState::Pending,
    }
}

/// `transfer.completed`: one event for both ends, told apart by `data.status`.
pub fn transfer_completed(f: &Fields<'_>) -> Result<EventKind, PayloadError> {
    let status = f.str("data.status")?;
    Ok(EventKind::Transfer(TransferFacts {
        reference: f.reference("data.reference")?,
        state: state_of(status),
        provider_status: status.to_owned(),
    }))
}
