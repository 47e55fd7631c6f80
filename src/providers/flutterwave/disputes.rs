//! Flutterwave chargebacks. Flutterwave documents no chargeback webhook (merchants are told on
//! the dashboard), so its chargebacks reach payhook only through reconciliation, from
//! `GET /v3/chargebacks`. Flutterwave "debits and holds" the amount when a chargeback is
//! initiated and lifts the hold when the merchant wins: every listed chargeback is a withdrawal
//! (`flutterwave:dispute_withdrawal:{id}`), and one `won` is also a reinstatement. Amounts are
//! major units with no currency: priced in the payment's currency by the pipeline, exactly (from
//! the number as written), as Flutterwave refunds are. The payment is named as its charges are
//! (`tx_ref`, or the transaction id with `PAYHOOK_FLUTTERWAVE_REFERENCE=id`), and the transaction
//! id goes with it, so the binding of its first sighting decides, as for every Flutterwave event.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

use super::{id_text, raw_at, Flutterwave, ReferenceField};
use crate::domain::{DisputeMovement, EventKind, Reference, UnpricedDispute};
use crate::providers::json::{parse_object, Fields};
use crate::providers::{DisputePage, ListedMovement, PayloadError};

/// Statuses of a chargeback whose amount Flutterwave holds or took.
const HELD: [&str; 5] = ["initiated", "declined", "accepted", "lost", "won"];

/// `GET /v3/chargebacks`: chargebacks from the UTC day of `since_s` on, page `cursor` (1 first).
pub(super) fn list_path(since_s: i64, cursor: Option<&str>) -> String {
    let (y, m, d) = crate::domain::civil_from_days(since_s.max(0).div_euclid(86_400));
    let page = cursor.and_then(|c| c.parse::<u32>().ok()).unwrap_or(1);
    format!("/v3/chargebacks?from={y:04}-{m:02}-{d:02}&page={page}")
}

impl Flutterwave {
    /// A page of `GET /v3/chargebacks`
    /// (`{"status":"success","data":[chargeback…],"meta":{"page_info":{"current_page","total_pages"}}}`).
    pub(super) fn read_chargebacks(&self, body: &[u8]) -> Result<DisputePage, PayloadError> {
        let root = parse_object(body)?;
        let text = std::str::from_utf8(body).map_err(|_| PayloadError::NotUtf8)?;
        let raw: BTreeMap<String, &RawValue> =
            serde_json::from_str(text).map_err(|e| PayloadError::Malformed(e.to_string()))?;
        let items: Vec<&RawValue> = match raw.get("data") {
            Some(list) => serde_json::from_str(list.get())
                .map_err(|_| PayloadError::invalid("data", "must be a list"))?,
            None => return Err(PayloadError::invalid("data", "must be a list")),
        };
        let mut page = DisputePage::default();
        for (i, item) in items.iter().enumerate() {
            self.chargeback(item.get(), &mut page)
                .map_err(|e| at_item(e, i))?;
        }
        let f = Fields::new(&root);
        let number = |path: &str| f.get(path).and_then(Value::as_i64);
        if let (Some(at), Some(count)) = (
            number("meta.page_info.current_page"),
            number("meta.page_info.total_pages"),
        ) {
            if at < count {
                page.next = Some((at + 1).to_string());
            }
        }
        Ok(page)
    }

    /// One chargeback (`text` is its JSON): its withdrawal, and its reinstatement if won.
    fn chargeback(&self, text: &str, page: &mut DisputePage) -> Result<(), PayloadError> {
        let item: Value =
            serde_json::from_str(text).map_err(|e| PayloadError::Malformed(e.to_string()))?;
        let f = Fields::new(&item);
        let status = f.str("status")?;
        if !HELD.contains(&status) {
            return Ok(());
        }
        if !matches!(f.get("amount"), Some(Value::Number(_))) {
            return Err(PayloadError::invalid("amount", "must be a number"));
        }
        let amount_major = raw_at(text, &["amount"])
            .ok_or_else(|| PayloadError::invalid("amount", "is required"))?
            .trim()
            .to_owned();
        let transaction = id_text(&f, "transaction_id")?;
        let reference = match self.reference {
            ReferenceField::TxRef => id_text(&f, "tx_ref")?,
            ReferenceField::Id => transaction.clone(),
        };
        let reference_path = match self.reference {
            ReferenceField::TxRef => "tx_ref",
            ReferenceField::Id => "transaction_id",
        };
        let dispute = Reference::parse(&id_text(&f, "id")?)
            .map_err(|e| PayloadError::invalid("id", e.to_string()))?;
        let payment_reference = Reference::parse(&reference)
            .map_err(|e| PayloadError::invalid(reference_path, e.to_string()))?;
        let mut movements = vec![DisputeMovement::Withdrawal];
        if status == "won" {
            movements.push(DisputeMovement::Reinstatement);
        }
        for movement in movements {
            page.movements.push(ListedMovement {
                kind: EventKind::DisputeUnpriced(UnpricedDispute {
                    dispute: dispute.clone(),
                    payment_reference: payment_reference.clone(),
                    movement,
                    amount_major: amount_major.clone(),
                }),
                transaction_id: Some(transaction.clone()),
            });
        }
        Ok(())
    }
}

/// Names the list item a mapping error is about.
fn at_item(e: PayloadError, i: usize) -> PayloadError {
    match e {
        PayloadError::Invalid { field, reason } => PayloadError::Invalid {
            field: format!("data[{i}].{field}"),
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_held_chargeback_withdraws_and_a_won_one_is_reinstated() {
        let fw = Flutterwave::from_env_values(Some("hash"), None, ReferenceField::TxRef, "account")
            .unwrap_or_else(|_| unreachable!());
        let body = r#"{"status":"success","message":"Chargebacks fetched",
            "meta":{"page_info":{"total":3,"current_page":1,"total_pages":2,"page_size":20}},
            "data":[
              {"id":1390,"amount":100.5,"flw_ref":"URF_1","status":"lost","stage":"new","transaction_id":1554166,"tx_ref":"ord_10"},
              {"id":1391,"amount":20,"flw_ref":"URF_2","status":"won","stage":"new","transaction_id":1554167,"tx_ref":"ord_11"},
              {"id":1392,"amount":5,"flw_ref":"URF_3","status":"pending-review","transaction_id":1554168,"tx_ref":"ord_12"}]}"#;
        let page = fw.read_chargebacks(body.as_bytes()).unwrap_or_default();
        let got: Vec<(String, DisputeMovement, String, String, Option<String>)> = page
            .movements
            .iter()
            .filter_map(|m| match &m.kind {
                EventKind::DisputeUnpriced(u) => Some((
                    u.dispute.to_string(),
                    u.movement,
                    u.payment_reference.to_string(),
                    u.amount_major.clone(),
                    m.transaction_id.clone(),
                )),
                _ => None,
            })
            .collect();
        let row = |id: &str, m, r: &str, a: &str, t: &str| {
            (
                id.to_owned(),
                m,
                r.to_owned(),
                a.to_owned(),
                Some(t.to_owned()),
            )
        };
        assert_eq!(
            got,
            vec![
                row(
                    "1390",
                    DisputeMovement::Withdrawal,
                    "ord_10",
                    "100.5",
                    "1554166"
                ),
                row(
                    "1391",
                    DisputeMovement::Withdrawal,
                    "ord_11",
                    "20",
                    "1554167"
                ),
                row(
                    "1391",
                    DisputeMovement::Reinstatement,
                    "ord_11",
                    "20",
                    "1554167"
                ),
            ]
        );
        assert_eq!(page.next.as_deref(), Some("2"));
        assert_eq!(
            list_path(1_796_256_000, Some("2")),
            "/v3/chargebacks?from=2026-12-03&page=2"
        );
    }
}
