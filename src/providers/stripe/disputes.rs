//! Stripe disputes. The money is what Stripe moved: the dispute's balance transactions
//! (`balance_transactions[]`, sent whole in webhooks), the withdrawal with
//! `reporting_category: "dispute"` and the reinstatement with `"dispute_reversal"`. Their
//! `amount` is the customer's money (negative for the withdrawal); the dispute fee is in `fee`
//! and left out, since fees are not the customer's money. That amount can differ from the
//! dispute's own `amount` (a dispute of a partially refunded charge).
//!
//! - `charge.dispute.funds_withdrawn` withdraws, `charge.dispute.funds_reinstated` reinstates.
//! - `charge.dispute.created` withdraws too when it already carries the withdrawal (a chargeback
//!   debits at once): the same key as the `funds_withdrawn` that follows, so it moves once.
//! - An inquiry (`warning_*`, no balance transaction) moves nothing; `updated` and `closed` only
//!   change status (the money comes with the `funds_*` events).
//! - A balance transaction in another currency than the dispute (the account settles in another
//!   currency) is not the payment's money: the dispute's own `amount` is used instead.

use super::{expect_object, stripe_money, OBJ, UNITS};
use crate::domain::{DisputeFacts, DisputeMovement, EventKind, Money};
use crate::providers::json::{parse_object, Fields};
use crate::providers::{DisputePage, PayloadError};

/// The dispute event `event_type`, mapped.
pub(super) fn dispute_event(f: &Fields<'_>, event_type: &str) -> Result<EventKind, PayloadError> {
    let movement = match event_type {
        "charge.dispute.funds_withdrawn" | "charge.dispute.created" => DisputeMovement::Withdrawal,
        "charge.dispute.funds_reinstated" => DisputeMovement::Reinstatement,
        _ => return Ok(EventKind::Ignored),
    };
    expect_object(f, OBJ, "dispute")?;
    let Some(money) = moved(f, movement)? else {
        // An inquiry, or an event that carries no such movement: nothing moved.
        return Ok(EventKind::Ignored);
    };
    let payment = if f.get("data.object.payment_intent").is_some() {
        "data.object.payment_intent"
    } else {
        "data.object.charge"
    };
    Ok(EventKind::Dispute {
        facts: DisputeFacts {
            dispute: f.reference("data.object.id")?,
            // How the charge's success was keyed: its PaymentIntent, else the charge.
            payment_reference: f.reference(payment)?,
            money,
        },
        movement,
    })
}

/// The money of the balance transactions of `movement`'s category, in the dispute's currency.
fn moved(f: &Fields<'_>, movement: DisputeMovement) -> Result<Option<Money>, PayloadError> {
    let category = match movement {
        DisputeMovement::Withdrawal => "dispute",
        DisputeMovement::Reinstatement => "dispute_reversal",
        // Stripe reports no declined movement: nothing of it is in the balance transactions.
        DisputeMovement::Declined => return Ok(None),
    };
    let dispute = stripe_money(f, "data.object.amount", "data.object.currency")?;
    let path = "data.object.balance_transactions";
    let Some(list) = f.get(path).and_then(|v| v.as_array()) else {
        return Ok(None);
    };
    let mut total: Option<i64> = None;
    for (i, txn) in list.iter().enumerate() {
        let t = Fields::new(txn);
        if t.opt_str("reporting_category")? != Some(category) {
            continue;
        }
        let at = |field: &str| format!("{path}[{i}].{field}");
        let code = t
            .str("currency")
            .map_err(|_| PayloadError::invalid(&at("currency"), "is required"))?;
        if !code.eq_ignore_ascii_case(dispute.currency.as_str()) {
            return Ok(Some(dispute));
        }
        // Negative for the withdrawal: the magnitude is what moved.
        let amount = t
            .int("amount")
            .ok()
            .and_then(i64::checked_abs)
            .and_then(|a| UNITS.from_api(a, dispute.currency).ok())
            .map(|m| m.amount.get())
            .ok_or_else(|| PayloadError::invalid(&at("amount"), "is not an amount"))?;
        total = Some(
            total
                .unwrap_or(0)
                .checked_add(amount)
                .ok_or_else(|| PayloadError::invalid(path, "amounts overflow"))?,
        );
    }
    total
        .map(|t| Money::new(t, dispute.currency))
        .transpose()
        .map_err(|e| PayloadError::invalid(path, e.to_string()))
}

/// `GET /v1/disputes`: disputes created since `since_s`, 100 a page, after dispute `cursor`.
pub(super) fn list_path(since_s: i64, cursor: Option<&str>) -> String {
    let mut path = format!("/v1/disputes?limit=100&created%5Bgte%5D={}", since_s.max(0));
    if let Some(after) = cursor {
        path.push_str("&starting_after=");
        path.push_str(&percent_encode(after));
    }
    path
}

/// A page of `GET /v1/disputes` (`{"object":"list","has_more","data":[dispute…]}`): each
/// dispute's withdrawal and reinstatement, read as `funds_withdrawn` / `funds_reinstated` would
/// carry them, so the list and the webhooks can never disagree about an amount.
pub(super) fn read_list(body: &[u8]) -> Result<DisputePage, PayloadError> {
    let root = parse_object(body)?;
    let f = Fields::new(&root);
    let Some(disputes) = f.get("data").and_then(|v| v.as_array()) else {
        return Err(PayloadError::invalid("data", "must be a list"));
    };
    let mut page = DisputePage::default();
    for (i, dispute) in disputes.iter().enumerate() {
        let event = serde_json::json!({ "data": { "object": dispute } });
        let f = Fields::new(&event);
        for kind in [
            "charge.dispute.funds_withdrawn",
            "charge.dispute.funds_reinstated",
        ] {
            match dispute_event(&f, kind).map_err(|e| super::prefixed(e, &format!("data[{i}]")))? {
                EventKind::Ignored => {}
                movement => page.movements.push(movement.into()),
            }
        }
    }
    if f.get("has_more").and_then(|v| v.as_bool()) == Some(true) {
        page.next = disputes
            .last()
            .and_then(|d| d.get("id"))
            .and_then(|id| id.as_str())
            .map(str::to_owned);
    }
    Ok(page)
}

/// A Stripe id in a query string (they are `[A-Za-z0-9_]`, but a cursor is never trusted).
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispute(id: &str, currency: &str, txns: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"id": id, "object": "dispute", "amount": 5000, "currency": "usd",
            "payment_intent": "pi_1", "charge": "ch_1", "status": "needs_response",
            "balance_transactions": txns.as_array().map(|t| t.iter().map(|x| {
                let mut x = x.clone();
                x["currency"] = serde_json::json!(currency);
                x
            }).collect::<Vec<_>>())})
    }

    fn amounts(page: &DisputePage) -> Vec<(DisputeMovement, &str, i64)> {
        page.movements
            .iter()
            .filter_map(|m| match &m.kind {
                EventKind::Dispute { facts, movement } => {
                    Some((*movement, facts.dispute.as_str(), facts.money.amount.get()))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_list_page_maps_each_dispute_as_its_webhooks_would_and_names_the_next_page() {
        let txns = serde_json::json!([
            {"amount": -3000, "fee": 1500, "reporting_category": "dispute"},
            {"amount": 3000, "fee": 0, "reporting_category": "dispute_reversal"}]);
        let body = serde_json::json!({"object": "list", "has_more": true, "data": [
            dispute("dp_won", "usd", txns),
            dispute("du_inquiry", "usd", serde_json::json!([])),
            // Settled in another currency: the dispute's own amount, in its currency.
            dispute("dp_fx", "eur", serde_json::json!([{"amount": -4600, "reporting_category": "dispute"}])),
        ]});
        let page = read_list(body.to_string().as_bytes()).unwrap_or_default();
        assert_eq!(
            amounts(&page),
            vec![
                (DisputeMovement::Withdrawal, "dp_won", 3000),
                (DisputeMovement::Reinstatement, "dp_won", 3000),
                (DisputeMovement::Withdrawal, "dp_fx", 5000),
            ]
        );
        assert_eq!(page.next.as_deref(), Some("dp_fx"));
        assert_eq!(
            list_path(1_700_000_000, page.next.as_deref()),
            "/v1/disputes?limit=100&created%5Bgte%5D=1700000000&starting_after=dp_fx"
        );
    }
}
