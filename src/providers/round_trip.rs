//! The property the tables exist for, through each paying provider's own send and read: a
//! payout's amount, written into the provider's call and echoed back in its answer (as a
//! transfer object, which is also what its webhooks and lookups carry), reads back as the same
//! money; and the call is refused exactly when the table refuses the amount ([`super::units`]).
//! A file of its own, so the tables import no adapter.

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::domain::{Currency, Money, MAX_AMOUNT_MINOR};
use crate::payouts::{PayoutId, TransferAnswer, TransferCall};
use crate::providers::transfers::TransferDef;
use crate::providers::{flutterwave, generic, paystack, stripe};

const PID: &str = "po_3f2a9c1e5b7d4a6c8e0f1a2b3c4d5e6f";

struct Paying {
    name: &'static str,
    def: TransferDef,
    units: &'static super::units::Units,
    destination: fn() -> Map<String, Value>,
    /// The provider's answer naming the amount as its call wrote it (raw text).
    echo: fn(raw_amount: &str, currency: &str) -> String,
    /// The amount's raw text in the call's body.
    sent: fn(body: &str) -> Option<String>,
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// A JSON body's top-level `amount`, as written (not re-printed by a parser).
fn raw_json_amount(body: &str) -> Option<String> {
    let at = body.find("\"amount\":")? + "\"amount\":".len();
    let rest = &body[at..];
    let end = rest.find([',', '}'])?;
    Some(rest[..end].trim().to_owned())
}

fn paying() -> Vec<Paying> {
    vec![
        Paying {
            name: "stripe",
            def: stripe::transfers::TRANSFERS,
            units: &stripe::UNITS,
            destination: || object(json!({"account": "acct_1"})),
            echo: |raw, cur| {
                format!(
                    r#"{{"id":"tr_1","object":"transfer","amount":{raw},"currency":"{}","destination":"acct_1","reversed":false}}"#,
                    cur.to_ascii_lowercase()
                )
            },
            sent: |body| {
                body.split('&')
                    .find_map(|kv| kv.strip_prefix("amount="))
                    .map(str::to_owned)
            },
        },
        Paying {
            name: "paystack",
            def: paystack::transfers::TRANSFERS,
            units: &paystack::UNITS,
            destination: || object(json!({"recipient": "RCP_1"})),
            echo: |raw, cur| {
                format!(
                    r#"{{"status":true,"data":{{"status":"success","amount":{raw},"currency":"{cur}","reference":"{PID}","recipient":{{"recipient_code":"RCP_1"}}}}}}"#
                )
            },
            sent: raw_json_amount,
        },
        Paying {
            name: "flutterwave",
            def: flutterwave::transfers::TRANSFERS,
            units: &flutterwave::UNITS,
            destination: || object(json!({"account_bank": "044", "account_number": "0690000031"})),
            echo: |raw, cur| {
                format!(
                    r#"{{"status":"success","data":{{"status":"SUCCESSFUL","amount":{raw},"currency":"{cur}","reference":"{PID}","account_number":"0690000031"}}}}"#
                )
            },
            sent: raw_json_amount,
        },
        Paying {
            name: "generic",
            def: generic::TRANSFERS,
            units: &super::units::ISO,
            destination: || object(json!({"account": "acct-1"})),
            echo: |raw, cur| {
                format!(
                    r#"{{"reference":"{PID}","status":"success","amount":{raw},"currency":"{cur}"}}"#
                )
            },
            sent: raw_json_amount,
        },
    ]
}

/// Out and back for one provider: `Err` names what broke the property.
fn out_and_back(p: &Paying, money: Money) -> Result<(), String> {
    let payout = PayoutId::parse(PID).ok_or("payout id")?;
    let destination = (p.destination)();
    let call = TransferCall {
        payout: &payout,
        money,
        destination: &destination,
        narration: None,
    };
    let table = p.units.to_api(money);
    let sent = (p.def.send)(&call);
    let api = match (table, sent) {
        (Err(_), Err(_)) => return Ok(()),
        (Ok(_), Ok(api)) => api,
        (t, s) => {
            return Err(format!(
                "{}: table said {t:?} but the call was {:?}",
                p.name,
                s.map(|_| "built")
            ))
        }
    };
    let body = String::from_utf8(api.body).map_err(|e| e.to_string())?;
    let raw = (p.sent)(&body).ok_or_else(|| format!("{}: no amount in {body}", p.name))?;
    let echoed = (p.echo)(&raw, money.currency.as_str());
    match (p.def.read)(echoed.as_bytes(), &payout, false) {
        Ok(TransferAnswer::Known(word)) if word.money == Some(money) => Ok(()),
        other => Err(format!(
            "{}: {money:?} sent as {raw} read back as {other:?}",
            p.name
        )),
    }
}

fn currencies() -> Vec<Currency> {
    Currency::all().collect()
}

#[test]
fn every_currency_at_the_edges_round_trips_or_is_refused_by_the_table() {
    let amounts = [
        1,
        5,
        9,
        10,
        11,
        99,
        100,
        101,
        1_000,
        1_045,
        100_000,
        999_999_999_999_999,
        MAX_AMOUNT_MINOR,
    ];
    let mut checked = 0;
    for p in &paying() {
        for currency in currencies() {
            for amount in amounts {
                let money = Money::new(amount, currency).map_err(|e| e.to_string());
                out_and_back(p, money.unwrap()).unwrap();
                checked += 1;
            }
        }
    }
    assert!(checked > 4 * 150 * amounts.len(), "{checked}");
}

#[test]
fn the_tables_refuse_what_the_issue_and_the_docs_name() {
    let m = |a, c| Money::new(a, Currency::parse(c).unwrap()).unwrap();
    let s = &stripe::UNITS;
    assert_eq!(s.to_api(m(100_000, "MGA")).map(|a| a.units), Ok(1_000));
    assert!(s.to_api(m(150, "MGA")).is_err(), "a fraction of an ariary");
    assert_eq!(s.to_api(m(5_000, "ISK")).map(|a| a.units), Ok(500_000));
    assert_eq!(s.to_api(m(5, "UGX")).map(|a| a.units), Ok(500));
    assert!(s.to_api(m(1_045, "HUF")).is_err() && s.to_api(m(1_000, "HUF")).is_ok());
    assert!(s.to_api(m(80_001, "TWD")).is_err());
    assert!(s.to_api(m(5_124, "KWD")).is_err() && s.to_api(m(5_120, "KWD")).is_ok());
    assert!(s.to_api(m(100, "IQD")).is_err(), "not a Stripe currency");
    assert!(paystack::UNITS.to_api(m(100, "USD")).is_err());
    assert!(paystack::UNITS.to_api(m(100, "GHS")).is_ok());
    assert!(flutterwave::UNITS
        .to_api(m(MAX_AMOUNT_MINOR, "NGN"))
        .is_err());
    let adyen = &crate::providers::adyen::UNITS;
    assert_eq!(
        adyen.from_api(10_000, Currency::parse("CLP").unwrap()),
        Ok(m(100, "CLP"))
    );
    assert_eq!(
        adyen.from_api(5_000, Currency::parse("IDR").unwrap()),
        Ok(m(500_000, "IDR"))
    );
}

fn amount() -> impl Strategy<Value = i64> {
    prop_oneof![
        1..=10_000_i64,
        (1..=10_000_000_i64).prop_map(|a| a * 100),
        (1..=100_000_000_i64).prop_map(|a| a * 10),
        1..=MAX_AMOUNT_MINOR,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_amount_in_any_currency_round_trips_through_every_provider(
        index in 0..500_usize,
        amount in amount(),
    ) {
        let all = currencies();
        let currency = all[index % all.len()];
        let money = Money::new(amount, currency).unwrap();
        for p in &paying() {
            prop_assert_eq!(out_and_back(p, money), Ok(()));
        }
    }

    /// Reading in is exact too: an amount in the provider's unit converts to ISO minor
    /// units and back out to itself, or is refused as not a whole minor unit.
    #[test]
    fn an_amount_read_in_writes_back_out_as_itself(
        index in 0..500_usize,
        units in amount(),
    ) {
        let all = currencies();
        let currency = all[index % all.len()];
        for table in [&stripe::UNITS, &crate::providers::adyen::UNITS, &flutterwave::UNITS] {
            if let Ok(money) = table.from_api(units, currency) {
                let back = super::units::Units { steps: &[], out_currencies: None, max_out_units: i64::MAX, ..*table }
                    .to_api(money);
                prop_assert_eq!(back.map(|a| a.units), Ok(units));
            }
        }
    }
}
