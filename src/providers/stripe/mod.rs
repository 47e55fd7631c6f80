//! Stripe: `Stripe-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "{t}.{raw body}">[,v1=…][,v0=…]`,
//! keyed by the endpoint secret `whsec_…` used as-is (its bytes, prefix included, not decoded).
//! Payloads are `{"id":"evt_…","type":…,"data":{"object":{…}}}` with amounts in Stripe's
//! smallest unit and lower-case currencies.
//!
//! Mapping (see docs/providers.md):
//! - `payment_intent.succeeded`, `charge.succeeded` (captured), `charge.captured` -> a payment
//!   keyed by the PaymentIntent id, so the charge and the intent events credit once;
//! - `payment_intent.processing` -> PROCESSING; `payment_intent.canceled` -> FAILED;
//!   `payment_intent.payment_failed` -> FAILED only if the intent is `canceled`, else ignored
//!   (the intent goes back to `requires_payment_method` and may still succeed);
//! - `refund.created`, `refund.updated`, `charge.refund.updated` (status `succeeded`) and
//!   `charge.refunded` (its newest refund, when listed and succeeded) -> a refund keyed by `re_…`;
//! - `refund.failed`, and those refund events with status `failed` or `canceled` -> a reversal
//!   of that refund (credited back if it was applied, voided if not).

mod disputes;
pub mod eventbridge;
pub mod transfers;

use http::HeaderMap;

use super::json::{parse_object, Fields};
use super::signature::{check_timestamp, ct_eq, hmac_sha256, Secret};
use super::units::Units;
use super::{boxed, ApiDef, ProviderDef, ProviderEnv};
use super::{single_header, PayloadError, Provider, ProviderTruth, SignatureError};
use crate::domain::{
    Currency, EventKind, Money, NormalisedEvent, PaymentFacts, PaymentStatus, ProviderId,
    Reference, RefundFacts, StateFacts,
};

pub const ID: ProviderId = ProviderId::from_static("stripe");

impl ProviderId {
    pub const STRIPE: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_STRIPE_SECRETS";
const ACCOUNT_KEY: &str = "PAYHOOK_STRIPE_ACCOUNT_KEY";

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (
            SECRETS,
            "Stripe endpoint secrets (whsec_…), space-separated (rotation)",
        ),
        (
            ACCOUNT_KEY,
            "metadata key of the account on Stripe objects (default account)",
        ),
        (
            "PAYHOOK_STRIPE_API_URL",
            "reconciliation and payouts: Stripe API base URL (default https://api.stripe.com)",
        ),
        (
            "PAYHOOK_STRIPE_API_KEY",
            "reconciliation: Stripe restricted key with read access to PaymentIntents",
        ),
        (
            "PAYHOOK_STRIPE_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_STRIPE_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_STRIPE_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_STRIPE_SECRETS in AWS",
        ),
        (
            "PAYHOOK_STRIPE_API_KEY_ARN",
            "reconciliation and payouts: Secrets Manager secret (name or ARN) holding PAYHOOK_STRIPE_API_KEY (AWSCURRENT), read at run time; set instead of PAYHOOK_STRIPE_API_KEY in AWS",
        ),
        (
            eventbridge::SOURCE_VAR,
            "the Stripe partner event source (aws.partner/stripe.com/…) whose events, delivered by Amazon EventBridge, are accepted like its webhooks; blank: that door is off",
        ),
    ],
    build,
    source_ips: "PAYHOOK_STRIPE_SOURCE_IPS",
    event_source: Some(eventbridge::EVENT_SOURCE),
    metadata: &["data.object.metadata"],
    signed_headers: &[HEADER],
    secret_arns: &[
        ("PAYHOOK_STRIPE_SECRETS_ARN", "PAYHOOK_STRIPE_SECRETS", true),
        ("PAYHOOK_STRIPE_API_KEY_ARN", "PAYHOOK_STRIPE_API_KEY", false),
    ],
    transfers: Some(transfers::TRANSFERS),
    units: &UNITS,
    api: ApiDef {
        url_var: "PAYHOOK_STRIPE_API_URL",
        default_base_url: Some("https://api.stripe.com"),
        key_var: "PAYHOOK_STRIPE_API_KEY",
        basic_auth: false,
    },
};

fn build(env: ProviderEnv<'_>) -> super::Built {
    let account_key = match env.metadata_key(ACCOUNT_KEY) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    let value = env.get(SECRETS)?;
    boxed(Stripe::from_env_value(value, env.tolerance_s, &account_key))
}

/// The signature header (HTTP header names are case-insensitive; `HeaderMap` keys are lower case).
pub const HEADER: &str = "stripe-signature";

/// Every currency Stripe takes (its supported-currency list, and the three-decimal ones its
/// currencies page adds), upper case: a payout in another is refused before a debit.
pub const CURRENCIES: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BWP", "BYN", "BZD", "CAD", "CDF",
    "CHF", "CLP", "CNY", "COP", "CRC", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD", "EGP", "ETB",
    "EUR", "FJD", "FKP", "GBP", "GEL", "GIP", "GMD", "GNF", "GTQ", "GYD", "HKD", "HNL", "HTG",
    "HUF", "IDR", "ILS", "INR", "ISK", "JMD", "JOD", "JPY", "KES", "KGS", "KHR", "KMF", "KRW",
    "KWD", "KYD", "KZT", "LAK", "LBP", "LKR", "LRD", "LSL", "MAD", "MDL", "MGA", "MKD", "MMK",
    "MNT", "MOP", "MUR", "MVR", "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR",
    "NZD", "OMR", "PAB", "PEN", "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB",
    "RWF", "SAR", "SBD", "SCR", "SEK", "SGD", "SHP", "SLE", "SLL", "SOS", "SRD", "STD", "SZL",
    "THB", "TJS", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS",
    "VND", "VUV", "WST", "XAF", "XCD", "XCG", "XOF", "XPF", "YER", "ZAR", "ZMW",
];

/// Stripe's unit, both ways (docs.stripe.com/currencies; docs/payouts.md quotes each rule).
/// MGA is zero-decimal at Stripe (ISO: 2). ISK and UGX "transitioned to a zero-decimal
/// currency, but backward compatibility requires you to represent it as a two-decimal value,
/// where the decimal amount is always 00" (ISO: 0; Stripe's older zero-decimal list still names
/// UGX, its special-cases section is the newer word). Out: HUF and TWD only in whole units
/// ("evenly divisible by 100"), three-decimal amounts ending in 0.
pub const UNITS: Units = Units {
    exponents: &[("ISK", 2), ("MGA", 0), ("UGX", 2)],
    steps: &[
        ("ISK", 100),
        ("UGX", 100),
        ("HUF", 100),
        ("TWD", 100),
        ("BHD", 10),
        ("JOD", 10),
        ("KWD", 10),
        ("OMR", 10),
        ("TND", 10),
    ],
    out_currencies: Some(CURRENCIES),
    max_out_units: i64::MAX,
};

/// The Stripe adapter: endpoint secrets (several during rotation), the timestamp tolerance, and
/// where in an object's metadata the account is.
#[derive(Debug, Clone)]
pub struct Stripe {
    secrets: Vec<Secret>,
    tolerance_s: i64,
    account_key: String,
}

impl Stripe {
    /// An adapter that maps events and verifies nothing (no secret): the EventBridge door's,
    /// where AWS authenticated the partner source.
    pub fn mapper(account_key: &str) -> Self {
        Stripe {
            secrets: Vec::new(),
            tolerance_s: 0,
            account_key: account_key.to_owned(),
        }
    }

    /// `value` is the space-separated env value; each secret must look like an endpoint secret
    /// (`whsec_…`), so a pasted API key (`sk_…`) is refused at start-up instead of failing every
    /// delivery.
    pub fn from_env_value(
        value: &str,
        tolerance_s: i64,
        account_key: &str,
    ) -> Result<Self, SignatureError> {
        let secrets = value
            .split_whitespace()
            .map(|s| {
                if !s.starts_with("whsec_") || s.len() <= "whsec_".len() {
                    return Err(SignatureError::BadSecret(
                        "Stripe endpoint secrets start with whsec_".into(),
                    ));
                }
                Secret::new(s.as_bytes().to_vec())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        Ok(Stripe {
            secrets,
            tolerance_s,
            account_key: account_key.to_owned(),
        })
    }

    /// The `Stripe-Signature` value Stripe would send at `ts_s`, with the first secret. Used by
    /// `payhook sign` and tests.
    pub fn sign(&self, ts_s: i64, body: &[u8]) -> String {
        let key = self.secrets.first().map(Secret::bytes).unwrap_or_default();
        let ts = ts_s.to_string();
        format!(
            "t={ts},v1={}",
            hex::encode(hmac_sha256(key, &[ts.as_bytes(), b".", body]))
        )
    }

    fn account_path(&self, object: &str) -> String {
        format!("{object}.metadata.{}", self.account_key)
    }
}

/// The parts of a `Stripe-Signature` header: the timestamp as sent (it is signed as text) and
/// the decoded `v1` candidates.
struct SignatureHeader<'a> {
    ts_text: &'a str,
    ts: i64,
    v1: Vec<Vec<u8>>,
}

/// Parses `t=…,v1=…` items. Unknown schemes (`v0`) are skipped; a `v1` that is not 32 bytes of
/// hex cannot match and is dropped; no usable `v1`, no `t`, or two `t` is malformed.
fn parse_header(value: &str) -> Result<SignatureHeader<'_>, SignatureError> {
    let malformed = SignatureError::MalformedHeader(HEADER);
    let mut ts_text = None;
    let mut v1 = Vec::new();
    for item in value.split(',') {
        let (k, v) = item
            .trim()
            .split_once('=')
            .ok_or_else(|| malformed.clone())?;
        match k {
            "t" if ts_text.is_some() => return Err(malformed),
            "t" => ts_text = Some(v),
            "v1" => v1.extend(hex::decode(v).ok().filter(|s| s.len() == 32)),
            _ => {}
        }
    }
    let ts_text = ts_text.ok_or_else(|| malformed.clone())?;
    let digits =
        !ts_text.is_empty() && ts_text.len() <= 18 && ts_text.bytes().all(|b| b.is_ascii_digit());
    let ts = ts_text
        .parse::<i64>()
        .ok()
        .filter(|_| digits)
        .ok_or_else(|| malformed.clone())?;
    if v1.is_empty() {
        return Err(malformed);
    }
    Ok(SignatureHeader { ts_text, ts, v1 })
}

impl Provider for Stripe {
    fn id(&self) -> ProviderId {
        ID
    }

    fn sign(&self, body: &[u8], _event_id: &str, now_s: i64) -> Vec<(String, String)> {
        vec![(HEADER.into(), Stripe::sign(self, now_s, body))]
    }

    /// Checks the signature first and the timestamp after, so only an authentic request learns
    /// that it was too old.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError> {
        let parsed = parse_header(single_header(headers, HEADER)?)?;
        let signed = |s: &Secret| {
            let expected = hmac_sha256(s.bytes(), &[parsed.ts_text.as_bytes(), b".", body]);
            parsed.v1.iter().any(|c| ct_eq(c, &expected))
        };
        if !self.secrets.iter().any(signed) {
            return Err(SignatureError::Mismatch);
        }
        check_timestamp(parsed.ts, now_s, self.tolerance_s)
    }

    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let event_id = f.str("id")?.to_owned();
        let event_type = f.str("type")?.to_owned();
        let kind = match event_type.as_str() {
            "payment_intent.succeeded" => self.intent_succeeded(&f)?,
            "charge.succeeded" | "charge.captured" => self.charge_succeeded(&f)?,
            "payment_intent.processing" => self.intent_state(&f, PaymentStatus::Processing)?,
            "payment_intent.canceled" => self.intent_state(&f, PaymentStatus::Failed)?,
            "payment_intent.payment_failed" => self.intent_failed(&f)?,
            "charge.refunded" => charge_refunded(&f)?,
            "refund.created" | "refund.updated" | "charge.refund.updated" | "refund.failed" => {
                refund_event(&f)?
            }
            t if t.starts_with("charge.dispute.") => disputes::dispute_event(&f, t)?,
            "transfer.created" => transfers::transfer_event(&f, true)?,
            "transfer.reversed" => transfers::transfer_event(&f, false)?,
            // Anything else is acknowledged and logged, so Stripe stops retrying it.
            _ => EventKind::Ignored,
        };
        Ok(NormalisedEvent {
            provider: ProviderId::STRIPE,
            event_id,
            event_type,
            kind,
            transaction_id: None,
        })
    }

    fn api_path(&self, reference: &Reference) -> String {
        format!("/v1/payment_intents/{reference}")
    }

    fn disputes_path(&self, since_s: i64, cursor: Option<&str>) -> Option<String> {
        Some(disputes::list_path(since_s, cursor))
    }

    fn read_disputes(&self, body: &[u8]) -> Result<super::DisputePage, PayloadError> {
        disputes::read_list(body)
    }

    /// `GET /v1/payment_intents/{id}` answers the PaymentIntent itself: read as the object of a
    /// `payment_intent.succeeded` (so `amount_received` and Stripe's units, as for webhooks).
    /// Only `canceled` is final; `requires_payment_method` after a declined card is not.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError> {
        let object = parse_object(body)?;
        let wrapped = serde_json::json!({ "data": { "object": object } });
        let f = Fields::new(&wrapped);
        match f.str("data.object.status")? {
            "succeeded" => super::succeeded(self.intent_succeeded(&f)?, reference),
            "canceled" => Ok(ProviderTruth::Failed {
                status: "canceled".into(),
            }),
            other => Ok(ProviderTruth::NotFinal {
                status: other.to_owned(),
            }),
        }
    }
}

const OBJ: &str = "data.object";

impl Stripe {
    fn intent_succeeded(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        expect_object(f, OBJ, "payment_intent")?;
        // `amount_received` is what arrived (less than `amount` after a partial capture).
        let amount = if f.get("data.object.amount_received").is_some() {
            "amount_received"
        } else {
            "amount"
        };
        Ok(EventKind::PaymentSucceeded(PaymentFacts {
            reference: f.reference("data.object.id")?,
            // None (Checkout, invoices without the metadata key): the registered or default account.
            account: f.opt_account(&self.account_path(OBJ))?,
            money: stripe_money(f, &format!("{OBJ}.{amount}"), "data.object.currency")?,
        }))
    }

    /// A charge of an intent credits under the intent's id; a charge without an intent (the
    /// legacy Charges API) under its own id. An authorisation not yet captured moves no money.
    fn charge_succeeded(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        expect_object(f, OBJ, "charge")?;
        if f.get("data.object.captured") == Some(&serde_json::Value::Bool(false)) {
            return Ok(EventKind::Ignored);
        }
        let amount = if f.get("data.object.amount_captured").is_some() {
            "amount_captured"
        } else {
            "amount"
        };
        Ok(EventKind::PaymentSucceeded(PaymentFacts {
            reference: charge_reference(f)?,
            // None (Checkout, invoices without the metadata key): the registered or default account.
            account: f.opt_account(&self.account_path(OBJ))?,
            money: stripe_money(f, &format!("{OBJ}.{amount}"), "data.object.currency")?,
        }))
    }

    fn intent_state(&self, f: &Fields<'_>, to: PaymentStatus) -> Result<EventKind, PayloadError> {
        expect_object(f, OBJ, "payment_intent")?;
        let money = if f.get("data.object.amount").is_some() {
            Some(stripe_money(
                f,
                "data.object.amount",
                "data.object.currency",
            )?)
        } else {
            None
        };
        Ok(EventKind::PaymentState {
            facts: StateFacts {
                reference: f.reference("data.object.id")?,
                account: f.opt_account(&self.account_path(OBJ))?,
                money,
            },
            to,
        })
    }

    /// A failed attempt leaves the intent open for another payment method; FAILED is terminal
    /// here and would refuse the later success, so only a canceled intent is marked FAILED.
    fn intent_failed(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        match f.opt_str("data.object.status")? {
            Some("canceled") => self.intent_state(f, PaymentStatus::Failed),
            _ => {
                expect_object(f, OBJ, "payment_intent")?;
                Ok(EventKind::Ignored)
            }
        }
    }
}

/// `charge.refunded` carries the charge; its `refunds` list (newest first) is included only by
/// older API versions. The newest refund is the one this event announces: it is applied when
/// succeeded. Without the list the event is ignored and the `refund.*` events carry the refund.
fn charge_refunded(f: &Fields<'_>) -> Result<EventKind, PayloadError> {
    expect_object(f, OBJ, "charge")?;
    let Some(serde_json::Value::Array(list)) = f.get("data.object.refunds.data") else {
        return Ok(EventKind::Ignored);
    };
    let Some(newest) = list.first() else {
        return Ok(EventKind::Ignored);
    };
    let intent = "data.object.payment_intent";
    let charge_payment = if f.get(intent).is_some() {
        f.reference(intent)?
    } else {
        f.reference("data.object.id")?
    };
    let r = Fields::new(newest);
    refund(&r, Some(charge_payment)).map_err(|e| prefixed(e, "data.object.refunds.data[0]"))
}

/// The refund object of a `refund.*` event.
fn refund_event(f: &Fields<'_>) -> Result<EventKind, PayloadError> {
    let object = f
        .get(OBJ)
        .ok_or_else(|| PayloadError::invalid(OBJ, "is required"))?;
    refund(&Fields::new(object), None).map_err(|e| prefixed(e, OBJ))
}

/// Names a field of a nested object by its full path.
fn prefixed(e: PayloadError, prefix: &str) -> PayloadError {
    match e {
        PayloadError::Invalid { field, reason } => PayloadError::Invalid {
            field: format!("{prefix}.{field}"),
            reason,
        },
        other => other,
    }
}

/// A refund object (`r` is rooted at it): applied when `succeeded`; reversed when `failed` or
/// `canceled` (a refund can fail after it succeeded, e.g. the card was closed: its debit is
/// credited back; one that never succeeded is voided so a late success cannot apply); pending
/// ones move no money yet. Its payment is its PaymentIntent, else the charge's
/// (`charge_payment`), else its charge id, matching how the charge's success was keyed.
fn refund(r: &Fields<'_>, charge_payment: Option<Reference>) -> Result<EventKind, PayloadError> {
    expect_object(r, "", "refund")?;
    let reversed = match r.opt_str("status")? {
        Some("succeeded") => false,
        Some("failed" | "canceled") => true,
        _ => return Ok(EventKind::Ignored),
    };
    let payment_reference = match (r.get("payment_intent"), charge_payment) {
        (Some(_), _) => r.reference("payment_intent")?,
        (None, Some(p)) => p,
        (None, None) => r.reference("charge")?,
    };
    let facts = RefundFacts {
        refund_reference: r.reference("id")?,
        payment_reference,
        money: stripe_money(r, "amount", "currency")?,
    };
    Ok(if reversed {
        EventKind::RefundReversed(facts)
    } else {
        EventKind::RefundSucceeded(facts)
    })
}

/// The payment a charge belongs to: its PaymentIntent, else (legacy Charges API) its own id.
fn charge_reference(f: &Fields<'_>) -> Result<Reference, PayloadError> {
    let intent = "data.object.payment_intent";
    if f.get(intent).is_some() {
        return f.reference(intent);
    }
    f.reference("data.object.id")
}

/// Refuses a payload whose object is not the kind its event type promises.
fn expect_object(f: &Fields<'_>, at: &str, kind: &str) -> Result<(), PayloadError> {
    let path = if at.is_empty() {
        "object".to_owned()
    } else {
        format!("{at}.object")
    };
    match f.opt_str(&path)? {
        Some(k) if k == kind => Ok(()),
        _ => Err(PayloadError::invalid(&path, format!("must be {kind:?}"))),
    }
}

/// Stripe amount (its smallest unit) and lower-case currency, converted to ISO minor units.
pub fn stripe_money(
    f: &Fields<'_>,
    amount_path: &str,
    currency_path: &str,
) -> Result<Money, PayloadError> {
    let amount = f.int(amount_path)?;
    let code = f.str(currency_path)?.to_ascii_uppercase();
    let currency =
        Currency::parse(&code).map_err(|e| PayloadError::invalid(currency_path, e.to_string()))?;
    UNITS
        .from_api(amount, currency)
        .map_err(|e| PayloadError::invalid(amount_path, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stripe_currency_is_known() {
        let missing: Vec<&str> = CURRENCIES
            .iter()
            .copied()
            .filter(|c| Currency::parse(c).is_err())
            .collect();
        assert!(missing.is_empty(), "unknown Stripe currencies: {missing:?}");
        assert!(
            CURRENCIES.windows(2).all(|w| w[0] < w[1]),
            "sorted, once each"
        );
    }
    use http::HeaderValue;

    const SECRET: &str = "whsec_test_5f1c0b7e9a2d4c6b8e0f1a3c5e7b9d2f";
    const OTHER: &str = "whsec_other_secret_for_rotation_tests";
    const NOW: i64 = 1_764_670_000;

    fn stripe(secrets: &str) -> Stripe {
        Stripe::from_env_value(secrets, 300, "account").unwrap()
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn intent(kind: &str, id: &str, status: &str) -> String {
        format!(
            r#"{{"id":"evt_1","object":"event","type":"{kind}","created":1764670000,"data":{{"object":{{"id":"{id}","object":"payment_intent","amount":4999,"amount_received":4999,"currency":"usd","status":"{status}","metadata":{{"account":"wallet_42"}}}}}}}}"#
        )
    }

    #[test]
    fn matches_a_reference_computation() {
        // HMAC-SHA256("whsec_test_5f1c…", "1764670000.{}") computed independently (python hmac).
        let s = stripe(SECRET);
        let sig = s.sign(NOW, b"{}");
        assert_eq!(
            sig,
            "t=1764670000,v1=6edffbc19b7f69a43c98c091131049076f88b8494020c42ddcfd985ec25e63dd"
        );
        assert_eq!(s.verify(&headers(&[&sig]), b"{}", NOW), Ok(()));
    }

    #[test]
    fn valid_tampered_wrong_secret_stale_and_future() {
        let s = stripe(SECRET);
        let body = intent("payment_intent.succeeded", "pi_1", "succeeded");
        let sig = s.sign(NOW, body.as_bytes());
        assert_eq!(
            s.verify(&headers(&[&sig]), body.as_bytes(), NOW + 10),
            Ok(())
        );
        let tampered = body.replace("4999", "9999");
        assert_eq!(
            s.verify(&headers(&[&sig]), tampered.as_bytes(), NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            stripe(OTHER).verify(&headers(&[&sig]), body.as_bytes(), NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            s.verify(&headers(&[&sig]), body.as_bytes(), NOW + 301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            s.verify(&headers(&[&sig]), body.as_bytes(), NOW - 301),
            Err(SignatureError::Future)
        );
        // The timestamp is signed: moving it breaks the signature.
        let moved = sig.replace("t=1764670000", "t=1764670001");
        assert_eq!(
            s.verify(&headers(&[&moved]), body.as_bytes(), NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn rotation_and_several_v1_signatures() {
        let both = stripe(&format!("{OTHER} {SECRET}"));
        let sig = stripe(SECRET).sign(NOW, b"{}");
        assert_eq!(both.verify(&headers(&[&sig]), b"{}", NOW), Ok(()));
        let v1 = sig.split(",v1=").nth(1).unwrap();
        let many = format!("t={NOW},v1={},v1={v1},v0=abcd", "00".repeat(32));
        assert_eq!(both.verify(&headers(&[&many]), b"{}", NOW), Ok(()));
    }

    #[test]
    fn malformed_missing_and_repeated_headers() {
        let s = stripe(SECRET);
        let sig = s.sign(NOW, b"{}");
        assert_eq!(
            s.verify(&HeaderMap::new(), b"{}", NOW),
            Err(SignatureError::MissingHeader(HEADER))
        );
        assert_eq!(
            s.verify(&headers(&[&sig, &sig]), b"{}", NOW),
            Err(SignatureError::RepeatedHeader(HEADER))
        );
        let malformed = Err(SignatureError::MalformedHeader(HEADER));
        for bad in [
            "",
            "garbage",
            &format!("v1={}", "00".repeat(32)),
            &format!("t={NOW}"),
            &format!("t={NOW},v1=zz"),
            &format!("t={NOW},v1={}", "00".repeat(31)),
            &format!("t=-5,v1={}", "00".repeat(32)),
            &format!("t=+5,v1={}", "00".repeat(32)),
            &format!("t=99999999999999999999,v1={}", "00".repeat(32)),
            &format!("t={NOW},t={NOW},v1={}", "00".repeat(32)),
        ] {
            assert_eq!(s.verify(&headers(&[bad]), b"{}", NOW), malformed, "{bad}");
        }
    }

    #[test]
    fn secrets_must_be_endpoint_secrets() {
        for bad in ["", "   ", "sk_live_123", "whsec_", "whsec_ok sk_test_1"] {
            assert!(
                matches!(
                    Stripe::from_env_value(bad, 300, "account"),
                    Err(SignatureError::BadSecret(_))
                ),
                "{bad}"
            );
        }
    }

    fn kind(s: &Stripe, body: &str) -> EventKind {
        s.normalise(body.as_bytes()).unwrap().kind
    }

    #[test]
    fn intent_and_charge_successes_share_the_intent_key() {
        let s = stripe(SECRET);
        let a = s
            .normalise(intent("payment_intent.succeeded", "pi_1", "succeeded").as_bytes())
            .unwrap();
        let charge = r#"{"id":"evt_2","type":"charge.succeeded","data":{"object":{"id":"ch_1","object":"charge","amount":4999,"amount_captured":4999,"captured":true,"currency":"usd","payment_intent":"pi_1","metadata":{"account":"wallet_42"}}}}"#;
        let b = s.normalise(charge.as_bytes()).unwrap();
        assert_eq!(a.key(), b.key());
        assert_eq!(a.key().unwrap().as_str(), "stripe:payment:pi_1");
        assert_eq!(a.kind, b.kind);
        match a.kind {
            EventKind::PaymentSucceeded(p) => {
                assert_eq!(
                    (
                        p.money.amount.get(),
                        p.money.currency.as_str(),
                        p.account.as_ref().map(|a| a.as_str())
                    ),
                    (4999, "USD", Some("wallet_42"))
                );
            }
            other => panic!("{other:?}"),
        }
        let uncaptured = charge.replace(r#""captured":true"#, r#""captured":false"#);
        assert_eq!(kind(&s, &uncaptured), EventKind::Ignored);
        let legacy = charge.replace(r#""payment_intent":"pi_1""#, r#""payment_intent":null"#);
        assert_eq!(
            s.normalise(legacy.as_bytes())
                .unwrap()
                .key()
                .unwrap()
                .as_str(),
            "stripe:payment:ch_1"
        );
    }

    #[test]
    fn intent_states() {
        let s = stripe(SECRET);
        let processing = kind(
            &s,
            &intent("payment_intent.processing", "pi_1", "processing"),
        );
        assert!(matches!(
            processing,
            EventKind::PaymentState {
                to: PaymentStatus::Processing,
                ..
            }
        ));
        let canceled = kind(&s, &intent("payment_intent.canceled", "pi_1", "canceled"));
        assert!(matches!(
            canceled,
            EventKind::PaymentState {
                to: PaymentStatus::Failed,
                ..
            }
        ));
        let retryable = kind(
            &s,
            &intent(
                "payment_intent.payment_failed",
                "pi_1",
                "requires_payment_method",
            ),
        );
        assert_eq!(retryable, EventKind::Ignored);
        let final_failure = kind(
            &s,
            &intent("payment_intent.payment_failed", "pi_1", "canceled"),
        );
        assert!(matches!(
            final_failure,
            EventKind::PaymentState {
                to: PaymentStatus::Failed,
                ..
            }
        ));
        assert_eq!(
            kind(&s, &intent("customer.created", "cus_1", "x")),
            EventKind::Ignored
        );
    }

    #[test]
    fn refunds_from_refund_events_and_charge_refunded() {
        let s = stripe(SECRET);
        let refund = r#"{"id":"evt_3","type":"refund.created","data":{"object":{"id":"re_1","object":"refund","amount":1000,"currency":"usd","charge":"ch_1","payment_intent":"pi_1","status":"succeeded"}}}"#;
        let a = s.normalise(refund.as_bytes()).unwrap();
        assert_eq!(a.key().unwrap().as_str(), "stripe:refund:re_1");
        match &a.kind {
            EventKind::RefundSucceeded(r) => {
                assert_eq!(
                    (r.payment_reference.as_str(), r.money.amount.get()),
                    ("pi_1", 1000)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            kind(&s, &refund.replace("succeeded", "pending")),
            EventKind::Ignored
        );
        let updated = refund.replace("refund.created", "charge.refund.updated");
        assert_eq!(kind(&s, &updated), a.kind);
        // A refund that failed (after it succeeded, or before) or was canceled is reversed.
        let EventKind::RefundSucceeded(facts) = a.kind.clone() else {
            panic!()
        };
        for (event, status) in [
            ("refund.failed", "failed"),
            ("refund.updated", "failed"),
            ("charge.refund.updated", "canceled"),
        ] {
            let body = refund.replace("refund.created", event).replace(
                r#""status":"succeeded""#,
                &format!(r#""status":"{status}""#),
            );
            let ev = s.normalise(body.as_bytes()).unwrap();
            assert_eq!(
                ev.kind,
                EventKind::RefundReversed(facts.clone()),
                "{event} {status}"
            );
            assert_eq!(ev.key().unwrap().as_str(), "stripe:refund_reversal:re_1");
        }
        let charge = r#"{"id":"evt_4","type":"charge.refunded","data":{"object":{"id":"ch_1","object":"charge","amount":4999,"amount_refunded":1500,"currency":"usd","payment_intent":"pi_1","refunds":{"object":"list","data":[{"id":"re_1","object":"refund","amount":1000,"currency":"usd","charge":"ch_1","status":"succeeded"},{"id":"re_0","object":"refund","amount":500,"currency":"usd","charge":"ch_1","status":"succeeded"}]}}}}"#;
        assert_eq!(
            kind(&s, charge),
            a.kind,
            "the newest refund, its intent taken from the charge"
        );
        let without_list = r#"{"id":"evt_5","type":"charge.refunded","data":{"object":{"id":"ch_1","object":"charge","amount":4999,"currency":"usd","payment_intent":"pi_1"}}}"#;
        assert_eq!(kind(&s, without_list), EventKind::Ignored);
        let bad = charge.replacen(r#""amount":1000"#, r#""amount":-1"#, 1);
        match s.normalise(bad.as_bytes()) {
            Err(PayloadError::Invalid { field, .. }) => {
                assert_eq!(field, "data.object.refunds.data[0].amount")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn amounts_convert_from_stripe_units() {
        let s = stripe(SECRET);
        let with = |amount: &str, cur: &str| {
            intent("payment_intent.succeeded", "pi_1", "succeeded")
                .replace(
                    r#""amount":4999,"amount_received":4999"#,
                    &format!(r#""amount_received":{amount}"#),
                )
                .replace(r#""currency":"usd""#, &format!(r#""currency":"{cur}""#))
        };
        let money = |amount: &str, cur: &str| match s.normalise(with(amount, cur).as_bytes()) {
            Ok(NormalisedEvent {
                kind: EventKind::PaymentSucceeded(p),
                ..
            }) => Ok(p.money.amount.get()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(money("500", "jpy").unwrap(), 500);
        assert_eq!(
            money("12000", "isk").unwrap(),
            120,
            "ISK is two-decimal in Stripe's API"
        );
        assert!(
            money("12050", "isk").is_err(),
            "fractional krona cannot be credited"
        );
        assert_eq!(
            money("7", "mga").unwrap(),
            700,
            "MGA is zero-decimal in Stripe's API"
        );
        assert_eq!(money("1005", "kwd").unwrap(), 1005);
        for (amount, cur, field) in [
            ("0", "usd", "data.object.amount_received"),
            ("-1", "usd", "data.object.amount_received"),
            ("1.5", "usd", "data.object.amount_received"),
            ("99999999999999999999", "usd", "data.object.amount_received"),
            ("\"100\"", "usd", "data.object.amount_received"),
            ("100", "xyz", "data.object.currency"),
            ("100", "", "data.object.currency"),
        ] {
            match money(amount, cur) {
                Err(PayloadError::Invalid { field: f, .. }) => {
                    assert_eq!(f, field, "{amount} {cur}")
                }
                other => panic!("{amount} {cur}: {other:?}"),
            }
        }
    }

    #[test]
    fn account_key_is_configurable_and_optional_for_credits() {
        let s = Stripe::from_env_value(SECRET, 300, "wallet").unwrap();
        let body = intent("payment_intent.succeeded", "pi_1", "succeeded")
            .replace(r#""account":"#, r#""wallet":"#);
        assert!(matches!(
            kind(&s, &body),
            EventKind::PaymentSucceeded(PaymentFacts {
                account: Some(_),
                ..
            })
        ));
        // Checkout and invoice intents often lack the key: a credit without an account (the
        // payment's registered or default account is used, else it is acknowledged unassigned).
        match kind(&stripe(SECRET), &body) {
            EventKind::PaymentSucceeded(p) => assert_eq!(p.account, None),
            other => panic!("{other:?}"),
        }
        let wrong_object = body.replace(r#""object":"payment_intent""#, r#""object":"charge""#);
        assert!(matches!(
            s.normalise(wrong_object.as_bytes()),
            Err(PayloadError::Invalid { .. })
        ));
    }
}
