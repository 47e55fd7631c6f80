//! Paystack disputes. Paystack takes the money when a dispute is *resolved against the
//! merchant*: `charge.dispute.resolve` with `resolution` `merchant-accepted` or `auto-accepted`
//! ("deducted from your settlement and reversed to the customer"), for `refund_amount` (kobo;
//! the merchant may accept a part). That event withdraws, under `paystack:dispute_withdrawal:{id}`.
//!
//! - `charge.dispute.create` and `charge.dispute.remind` move nothing (no debit before the
//!   resolution).
//! - A `declined` resolution (the merchant won; nothing was taken) moves nothing and is recorded
//!   on its payment (`paystack:dispute_declined:{id}`), so the payment lists the dispute.
//! - Paystack documents no reinstatement event.
//! - Paystack takes an accepted dispute's money by refunding the customer, so the same money
//!   also arrives as a `refund.processed` of `refund_amount`, before or after the resolution:
//!   whichever report comes second pairs with the first and debits nothing
//!   ([`crate::payments::pairs`]); both are answered 2xx.

use serde_json::Value;

use super::{id_reference, paystack_money};
use crate::domain::{DisputeFacts, DisputeMovement, EventKind};
use crate::providers::json::Fields;
use crate::providers::{DisputePage, PayloadError};

/// `charge.dispute.resolve`, mapped.
pub(super) fn dispute_resolved(f: &Fields<'_>) -> Result<EventKind, PayloadError> {
    let movement = match f.opt_str("data.resolution")? {
        Some("merchant-accepted" | "auto-accepted") => DisputeMovement::Withdrawal,
        Some("declined") => DisputeMovement::Declined,
        _ => return Ok(EventKind::Ignored),
    };
    // A declined dispute took nothing: it is listed with the disputed charge's amount.
    let amount = match (movement, f.get("data.refund_amount")) {
        (DisputeMovement::Declined, _) | (_, Some(Value::Null) | None) => "data.transaction.amount",
        _ => "data.refund_amount",
    };
    let currency = match f.get("data.currency") {
        Some(Value::Null) | None => "data.transaction.currency",
        Some(_) => "data.currency",
    };
    Ok(EventKind::Dispute {
        facts: DisputeFacts {
            dispute: id_reference(f, "data.id")?,
            payment_reference: f.reference("data.transaction.reference")?,
            money: paystack_money(f, amount, currency)?,
        },
        movement,
    })
}

/// `GET /dispute`: disputes from the UTC day of `since_s` on, 100 a page, page `cursor` (1 first).
pub(super) fn list_path(since_s: i64, cursor: Option<&str>) -> String {
    let (y, m, d) = crate::domain::civil_from_days(since_s.max(0).div_euclid(86_400));
    let page = cursor.and_then(|c| c.parse::<u32>().ok()).unwrap_or(1);
    format!("/dispute?from={y:04}-{m:02}-{d:02}&perPage=100&page={page}")
}

/// A page of `GET /dispute` (`{"status":true,"data":[dispute…],"meta":{"page","pageCount"}}`):
/// each dispute read as its `charge.dispute.resolve` would be, so only one resolved against the
/// merchant withdraws, with the same amount, and a declined one is recorded.
pub(super) fn read_list(body: &[u8]) -> Result<DisputePage, PayloadError> {
    let root = crate::providers::json::parse_object(body)?;
    let f = Fields::new(&root);
    let Some(disputes) = f.get("data").and_then(Value::as_array) else {
        return Err(PayloadError::invalid("data", "must be a list"));
    };
    let mut page = DisputePage::default();
    for (i, dispute) in disputes.iter().enumerate() {
        let event = serde_json::json!({ "event": "charge.dispute.resolve", "data": dispute });
        match dispute_resolved(&Fields::new(&event)).map_err(|e| at_item(e, i))? {
            EventKind::Ignored => {}
            movement => page.movements.push(movement.into()),
        }
    }
    let number = |path: &str| f.get(path).and_then(Value::as_i64);
    if let (Some(at), Some(count)) = (number("meta.page"), number("meta.pageCount")) {
        if at < count {
            page.next = Some((at + 1).to_string());
        }
    }
    Ok(page)
}

/// Names the list item a mapping error is about.
fn at_item(e: PayloadError, i: usize) -> PayloadError {
    match e {
        PayloadError::Invalid { field, reason } => PayloadError::Invalid {
            field: field.replacen("data", &format!("data[{i}]"), 1),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_page_withdraws_only_what_was_resolved_against_the_merchant() {
        let item = |id: i64, resolution: Value, refund: Value| {
            serde_json::json!({"id": id, "refund_amount": refund, "currency": "NGN",
                "status": "resolved", "resolution": resolution,
                "transaction": {"reference": format!("T_{id}"), "amount": 9000, "currency": "NGN"}})
        };
        let body = serde_json::json!({"status": true, "data": [
            item(1, Value::from("merchant-accepted"), Value::from(4000)),
            item(2, Value::from("declined"), Value::from(4000)),
            item(3, Value::Null, Value::Null),
            item(4, Value::from("auto-accepted"), Value::Null),
        ], "meta": {"page": 1, "pageCount": 3}});
        let page = read_list(body.to_string().as_bytes()).unwrap_or_default();
        let got: Vec<(String, DisputeMovement, i64)> = page
            .movements
            .iter()
            .filter_map(|m| match &m.kind {
                EventKind::Dispute { facts, movement } => Some((
                    facts.dispute.to_string(),
                    *movement,
                    facts.money.amount.get(),
                )),
                _ => None,
            })
            .collect();
        let withdrawal = DisputeMovement::Withdrawal;
        assert_eq!(
            got,
            vec![
                ("1".to_owned(), withdrawal, 4000),
                ("2".to_owned(), DisputeMovement::Declined, 9000),
                ("4".to_owned(), withdrawal, 9000)
            ]
        );
        assert_eq!(page.next.as_deref(), Some("2"));
        // 2026-12-03T00:00:00Z
        assert_eq!(
            list_path(1_796_256_000, page.next.as_deref()),
            "/dispute?from=2026-12-03&perPage=100&page=2"
        );
    }
}
