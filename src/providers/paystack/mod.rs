//! Paystack: `x-paystack-signature: <hex HMAC-SHA512 of the raw body>` keyed by the secret key
//! (`sk_live_…`/`sk_test_…`). There is no timestamp: a replayed request is stopped by the claim
//! on its money movement, not by the signature. Payloads are `{"event":…,"data":{…}}`; charge
//! amounts are integers in the minor unit (kobo), refund amounts the same as digit strings.
//!
//! Mapping (see docs/providers.md):
//! - `charge.success` (data.status `success`) -> a payment keyed by `data.reference`, crediting
//!   `data.metadata.<account key>`;
//! - `refund.processed` -> a refund keyed by `data.id` when present, else `data.refund_reference`,
//!   of the payment `data.transaction_reference` (or `data.transaction.reference`);
//! - `refund.pending`, `refund.processing`, `refund.failed`, `refund.needs-attention` and every
//!   other event -> ignored: they move no money. Paystack sends no webhook for a failed charge.

mod disputes;
pub mod transfers;

use http::HeaderMap;
use serde_json::Value;

use super::json::{parse_object, Fields};
use super::signature::{ct_eq, hmac_sha512, Secret};
use super::units::Units;
use super::{boxed, ApiDef, ProviderDef, ProviderEnv};
use super::{single_header, PayloadError, Provider, ProviderTruth, SignatureError};
use crate::domain::{
    AccountId, EventKind, Money, NormalisedEvent, PaymentFacts, ProviderId, Reference, RefundFacts,
    TransferState,
};

pub const ID: ProviderId = ProviderId::from_static("paystack");

impl ProviderId {
    pub const PAYSTACK: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_PAYSTACK_SECRETS";
const ACCOUNT_KEY: &str = "PAYHOOK_PAYSTACK_ACCOUNT_KEY";

/// Paystack's amounts are "in the subunit of the supported currency" (kobo, pesewas, cents),
/// ISO's minor unit; it transfers in NGN, GHS, KES and ZAR only (`TransferInitiate.currency`).
pub const UNITS: Units = Units {
    out_currencies: Some(&["NGN", "GHS", "KES", "ZAR"]),
    ..super::units::ISO
};

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (
            SECRETS,
            "Paystack secret keys (sk_…), space-separated (rotation)",
        ),
        (
            ACCOUNT_KEY,
            "key of the account in Paystack data.metadata (default account)",
        ),
        (
            "PAYHOOK_PAYSTACK_API_URL",
            "reconciliation and payouts: Paystack API base URL (default https://api.paystack.co)",
        ),
        (
            "PAYHOOK_PAYSTACK_API_KEY",
            "reconciliation: Paystack secret key",
        ),
        (
            "PAYHOOK_PAYSTACK_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_PAYSTACK_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_PAYSTACK_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_PAYSTACK_SECRETS in AWS",
        ),
        (
            "PAYHOOK_PAYSTACK_API_KEY_ARN",
            "reconciliation and payouts: Secrets Manager secret (name or ARN) holding PAYHOOK_PAYSTACK_API_KEY (AWSCURRENT), read at run time; set instead of PAYHOOK_PAYSTACK_API_KEY in AWS",
        ),
    ],
    build,
    source_ips: "PAYHOOK_PAYSTACK_SOURCE_IPS",
    event_source: None,
    metadata: &["data.metadata"],
    signed_headers: &[HEADER],
    secret_arns: &[
        ("PAYHOOK_PAYSTACK_SECRETS_ARN", "PAYHOOK_PAYSTACK_SECRETS", true),
        ("PAYHOOK_PAYSTACK_API_KEY_ARN", "PAYHOOK_PAYSTACK_API_KEY", false),
    ],
    transfers: Some(transfers::TRANSFERS),
    units: &UNITS,
    api: ApiDef {
        url_var: "PAYHOOK_PAYSTACK_API_URL",
        default_base_url: Some("https://api.paystack.co"),
        key_var: "PAYHOOK_PAYSTACK_API_KEY",
        basic_auth: false,
    },
};

fn build(env: ProviderEnv<'_>) -> super::Built {
    let account_key = match env.metadata_key(ACCOUNT_KEY) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    boxed(Paystack::from_env_value(env.get(SECRETS)?, &account_key))
}

/// The signature header.
pub const HEADER: &str = "x-paystack-signature";

/// The Paystack adapter: secret keys (several during rotation) and the metadata key of the
/// account.
#[derive(Debug, Clone)]
pub struct Paystack {
    secrets: Vec<Secret>,
    account_key: String,
}

impl Paystack {
    /// `value` is the space-separated env value. Only secret keys (`sk_…`) are accepted: the
    /// public key (`pk_…`) is public, and a signature keyed by it could be forged by anyone.
    pub fn from_env_value(value: &str, account_key: &str) -> Result<Self, SignatureError> {
        let secrets = value
            .split_whitespace()
            .map(|s| {
                if !s.starts_with("sk_") || s.len() <= "sk_".len() {
                    return Err(SignatureError::BadSecret(
                        "Paystack secret keys start with sk_".into(),
                    ));
                }
                Secret::new(s.as_bytes().to_vec())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        Ok(Paystack {
            secrets,
            account_key: account_key.to_owned(),
        })
    }

    /// The `x-paystack-signature` value Paystack would send, with the first secret.
    pub fn sign(&self, body: &[u8]) -> String {
        let key = self.secrets.first().map(Secret::bytes).unwrap_or_default();
        hex::encode(hmac_sha512(key, body))
    }
}

impl Provider for Paystack {
    fn id(&self) -> ProviderId {
        ID
    }

    fn sign(&self, body: &[u8], _event_id: &str, _now_s: i64) -> Vec<(String, String)> {
        vec![(HEADER.into(), Paystack::sign(self, body))]
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        let value = single_header(headers, HEADER)?;
        let sig = hex::decode(value.trim())
            .ok()
            .filter(|s| s.len() == 64)
            .ok_or(SignatureError::MalformedHeader(HEADER))?;
        if self
            .secrets
            .iter()
            .any(|s| ct_eq(&sig, &hmac_sha512(s.bytes(), body)))
        {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let event_type = f.str("event")?.to_owned();
        if !matches!(f.get("data"), Some(Value::Object(_))) {
            return Err(PayloadError::invalid("data", "must be an object"));
        }
        let kind = match event_type.as_str() {
            "charge.success" => self.charge_success(&f)?,
            "refund.processed" => refund_processed(&f)?,
            "charge.dispute.resolve" => disputes::dispute_resolved(&f)?,
            "transfer.success" => transfers::transfer_event(&f, TransferState::Success)?,
            "transfer.failed" => transfers::transfer_event(&f, TransferState::Failed)?,
            "transfer.reversed" => transfers::transfer_event(&f, TransferState::Reversed)?,
            // Anything else is acknowledged and logged, so Paystack stops retrying it.
            _ => EventKind::Ignored,
        };
        let event_id = event_id(&f, &event_type)?;
        Ok(NormalisedEvent {
            provider: ProviderId::PAYSTACK,
            event_id,
            event_type,
            kind,
            transaction_id: None,
        })
    }

    fn api_path(&self, reference: &Reference) -> String {
        format!("/transaction/verify/{reference}")
    }

    fn disputes_path(&self, since_s: i64, cursor: Option<&str>) -> Option<String> {
        Some(disputes::list_path(since_s, cursor))
    }

    fn read_disputes(&self, body: &[u8]) -> Result<super::DisputePage, PayloadError> {
        disputes::read_list(body)
    }

    /// `GET /transaction/verify/{reference}` answers `{"status":true,"data":{…}}` whose `data` is
    /// the charge as `charge.success` carries it. Paystack documents no final failure there:
    /// `abandoned` and `failed` mean the customer has not finished (and may still pay).
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        match f.str("data.status")? {
            "success" => super::succeeded(self.charge_success(&f)?, reference),
            other => Ok(ProviderTruth::NotFinal {
                status: other.to_owned(),
            }),
        }
    }
}

impl Paystack {
    fn charge_success(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        if f.opt_str("data.status")?.is_some_and(|s| s != "success") {
            return Ok(EventKind::Ignored);
        }
        Ok(EventKind::PaymentSucceeded(PaymentFacts {
            reference: f.reference("data.reference")?,
            account: self.account(f)?,
            money: paystack_money(f, "data.amount", "data.currency")?,
        }))
    }

    /// The account in `data.metadata`, which Paystack echoes as the merchant sent it to the
    /// Initialize API: an object, or (as its docs say to send it) a JSON-encoded string. Absent
    /// metadata (`0`, `""`, `null`) or a missing key names no account.
    fn account(&self, f: &Fields<'_>) -> Result<Option<AccountId>, PayloadError> {
        let path = format!("data.metadata.{}", self.account_key);
        match f.get("data.metadata") {
            Some(Value::Object(_)) => f.opt_account(&path),
            Some(Value::String(text)) if !text.trim().is_empty() => {
                let parsed: Value = serde_json::from_str(text).map_err(|e| {
                    PayloadError::invalid("data.metadata", format!("is a string but not JSON: {e}"))
                })?;
                if !parsed.is_object() {
                    return Ok(None);
                }
                Fields::new(&parsed)
                    .opt_account(&self.account_key)
                    .map_err(|e| match e {
                        PayloadError::Invalid { reason, .. } => PayloadError::Invalid {
                            field: path.clone(),
                            reason,
                        },
                        other => other,
                    })
            }
            _ => Ok(None),
        }
    }
}

fn refund_processed(f: &Fields<'_>) -> Result<EventKind, PayloadError> {
    let refund_reference = match f.get("data.id") {
        Some(_) => id_reference(f, "data.id")?,
        None => f.reference("data.refund_reference")?,
    };
    let payment_reference = match f.get("data.transaction_reference") {
        Some(_) => f.reference("data.transaction_reference")?,
        None => f.reference("data.transaction.reference")?,
    };
    Ok(EventKind::RefundSucceeded(RefundFacts {
        refund_reference,
        payment_reference,
        money: paystack_money(f, "data.amount", "data.currency")?,
    }))
}

/// Paystack sends no event id; `{event}:{data.id or reference}` names the delivery in the log.
fn event_id(f: &Fields<'_>, event_type: &str) -> Result<String, PayloadError> {
    for path in [
        "data.id",
        "data.reference",
        "data.refund_reference",
        "data.transaction_reference",
    ] {
        if f.get(path).is_some() {
            return Ok(format!("{event_type}:{}", id_reference(f, path)?));
        }
    }
    Ok(event_type.to_owned())
}

/// An identifier that Paystack sends as an integer (`"id": 302961`) or a string.
fn id_reference(f: &Fields<'_>, path: &str) -> Result<Reference, PayloadError> {
    let text = match f.get(path) {
        Some(Value::Number(_)) => f.int(path)?.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => {
            return Err(PayloadError::invalid(
                path,
                "must be a string or an integer",
            ))
        }
    };
    Reference::parse(&text).map_err(|e| PayloadError::invalid(path, e.to_string()))
}

/// Minor units as an integer or a string of digits (refund payloads quote them), and an ISO
/// currency. `"5.00"`, `"-5"`, `"+5"` and `""` are refused, never rounded or trimmed.
pub fn paystack_money(
    f: &Fields<'_>,
    amount_path: &str,
    currency_path: &str,
) -> Result<Money, PayloadError> {
    let amount = match f.get(amount_path) {
        Some(Value::String(s)) => digits(s).ok_or_else(|| {
            PayloadError::invalid(
                amount_path,
                "must be an integer number of minor units that fits in 64 bits",
            )
        })?,
        _ => f.int(amount_path)?,
    };
    let currency = f.currency(currency_path)?;
    UNITS
        .from_api(amount, currency)
        .map_err(|e| PayloadError::invalid(amount_path, e.to_string()))
}

fn digits(s: &str) -> Option<i64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const SECRET: &str = "sk_test_4a7f0c2e9b1d3f5a7c9e1b3d5f7a9c1e3b5d7f9a";
    const OTHER: &str = "sk_test_rotated_key_0000000000000000000000";
    const CHARGE: &str = r#"{"event":"charge.success","data":{"id":4099260516,"domain":"test","status":"success","reference":"T2154954_412829","amount":500000,"currency":"NGN","metadata":{"account":"wallet_42"}}}"#;
    const REFUND: &str = r#"{"event":"refund.processed","data":{"status":"processed","transaction_reference":"T2154954_412829","refund_reference":"132013318360","amount":"200000","currency":"NGN","integration":412829,"domain":"live"}}"#;

    fn paystack(secrets: &str) -> Paystack {
        Paystack::from_env_value(secrets, "account").unwrap()
    }

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HEADER, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn matches_hmac_sha512_of_the_raw_body() {
        // RFC 4231 test case 2, the same primitive Paystack uses.
        assert_eq!(
            hex::encode(hmac_sha512(b"Jefe", b"what do ya want for nothing?")),
            "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737"
        );
        let p = paystack(SECRET);
        assert_eq!(
            p.sign(CHARGE.as_bytes()),
            hex::encode(hmac_sha512(SECRET.as_bytes(), CHARGE.as_bytes()))
        );
    }

    #[test]
    fn valid_tampered_wrong_secret_and_rotation() {
        let p = paystack(SECRET);
        let sig = p.sign(CHARGE.as_bytes());
        assert_eq!(p.verify(&headers(&[&sig]), CHARGE.as_bytes(), 0), Ok(()));
        assert_eq!(
            p.verify(&headers(&[&sig.to_uppercase()]), CHARGE.as_bytes(), 0),
            Ok(())
        );
        let tampered = CHARGE.replace("500000", "900000");
        assert_eq!(
            p.verify(&headers(&[&sig]), tampered.as_bytes(), 0),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            paystack(OTHER).verify(&headers(&[&sig]), CHARGE.as_bytes(), 0),
            Err(SignatureError::Mismatch)
        );
        let both = paystack(&format!("{OTHER} {SECRET}"));
        assert_eq!(both.verify(&headers(&[&sig]), CHARGE.as_bytes(), 0), Ok(()));
    }

    #[test]
    fn missing_repeated_and_malformed_headers() {
        let p = paystack(SECRET);
        let sig = p.sign(CHARGE.as_bytes());
        assert_eq!(
            p.verify(&HeaderMap::new(), CHARGE.as_bytes(), 0),
            Err(SignatureError::MissingHeader(HEADER))
        );
        assert_eq!(
            p.verify(&headers(&[&sig, &sig]), CHARGE.as_bytes(), 0),
            Err(SignatureError::RepeatedHeader(HEADER))
        );
        for bad in [
            "",
            "zz",
            &sig[..126],
            &format!("{sig}00"),
            &sig.replace(|c: char| c.is_ascii_digit(), "g"),
        ] {
            assert_eq!(
                p.verify(&headers(&[bad]), CHARGE.as_bytes(), 0),
                Err(SignatureError::MalformedHeader(HEADER)),
                "{bad}"
            );
        }
    }

    #[test]
    fn secrets_must_be_secret_keys() {
        for bad in ["", "  ", "pk_live_abc", "sk_", "sk_test_1 pk_test_2"] {
            assert!(
                matches!(
                    Paystack::from_env_value(bad, "account"),
                    Err(SignatureError::BadSecret(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn maps_charge_success_and_refund_processed() {
        let p = paystack(SECRET);
        let ev = p.normalise(CHARGE.as_bytes()).unwrap();
        assert_eq!(
            ev.key().unwrap().as_str(),
            "paystack:payment:T2154954_412829"
        );
        assert_eq!(ev.event_id, "charge.success:4099260516");
        match ev.kind {
            EventKind::PaymentSucceeded(pf) => {
                assert_eq!(
                    (
                        pf.money.amount.get(),
                        pf.money.currency.as_str(),
                        pf.account.as_ref().map(|a| a.as_str())
                    ),
                    (500_000, "NGN", Some("wallet_42"))
                );
            }
            other => panic!("{other:?}"),
        }
        let ev = p.normalise(REFUND.as_bytes()).unwrap();
        assert_eq!(ev.key().unwrap().as_str(), "paystack:refund:132013318360");
        match ev.kind {
            EventKind::RefundSucceeded(r) => {
                assert_eq!(
                    (r.payment_reference.as_str(), r.money.amount.get()),
                    ("T2154954_412829", 200_000)
                );
            }
            other => panic!("{other:?}"),
        }
        let with_id = REFUND.replace(r#""status""#, r#""id":1234567,"status""#);
        assert_eq!(
            p.normalise(with_id.as_bytes())
                .unwrap()
                .key()
                .unwrap()
                .as_str(),
            "paystack:refund:1234567"
        );
        let nested = REFUND.replace(
            r#""transaction_reference":"T2154954_412829""#,
            r#""transaction":{"reference":"T2154954_412829"}"#,
        );
        assert!(matches!(
            p.normalise(nested.as_bytes()).unwrap().kind,
            EventKind::RefundSucceeded(_)
        ));
    }

    fn account_of(body: &str) -> Option<String> {
        match paystack(SECRET).normalise(body.as_bytes()).unwrap().kind {
            EventKind::PaymentSucceeded(p) => p.account.map(|a| a.to_string()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn metadata_may_be_a_json_string_or_absent() {
        let meta = r#""metadata":{"account":"wallet_42"}"#;
        // As the Initialize API documents it: a JSON-encoded string.
        let string = CHARGE.replace(
            meta,
            r#""metadata":"{\"account\":\"wallet_42\",\"cart\":3}""#,
        );
        assert_eq!(account_of(&string).as_deref(), Some("wallet_42"));
        // No metadata, or none with our key: no account (acknowledged as unassigned, not 400).
        for absent in [
            r#""metadata":0"#,
            r#""metadata":"""#,
            r#""metadata":null"#,
            r#""metadata":{"wallet":"x"}"#,
            r#""metadata":"[1]""#,
        ] {
            assert_eq!(account_of(&CHARGE.replace(meta, absent)), None, "{absent}");
        }
    }

    #[test]
    fn failures_and_other_events_are_ignored() {
        let p = paystack(SECRET);
        for event in [
            "refund.failed",
            "refund.pending",
            "refund.processing",
            "subscription.create",
            "charge.dispute.create",
        ] {
            let body = REFUND.replace("refund.processed", event);
            assert_eq!(
                p.normalise(body.as_bytes()).unwrap().kind,
                EventKind::Ignored,
                "{event}"
            );
        }
        let odd = CHARGE.replace(r#""status":"success""#, r#""status":"abandoned""#);
        assert_eq!(
            p.normalise(odd.as_bytes()).unwrap().kind,
            EventKind::Ignored
        );
    }

    #[test]
    fn bad_fields_are_named() {
        let p = paystack(SECRET);
        let cases = [
            (CHARGE.replace("500000", "5000.5"), "data.amount"),
            (CHARGE.replace("500000", "0"), "data.amount"),
            (CHARGE.replace("500000", "-5"), "data.amount"),
            (
                CHARGE.replace("500000", "99999999999999999999"),
                "data.amount",
            ),
            (CHARGE.replace(r#""NGN""#, r#""ngn""#), "data.currency"),
            (CHARGE.replace(r#""NGN""#, r#""XQQ""#), "data.currency"),
            (
                CHARGE.replace(
                    r#""metadata":{"account":"wallet_42"}"#,
                    r#""metadata":"{not json""#,
                ),
                "data.metadata",
            ),
            (
                CHARGE.replace(
                    r#""metadata":{"account":"wallet_42"}"#,
                    r#""metadata":"{\"account\":7}""#,
                ),
                "data.metadata.account",
            ),
            (REFUND.replace(r#""200000""#, r#""2000.00""#), "data.amount"),
            (REFUND.replace(r#""200000""#, r#""+5""#), "data.amount"),
            (REFUND.replace(r#""200000""#, r#""""#), "data.amount"),
            (
                REFUND.replace(r#""200000""#, r#""99999999999999999999""#),
                "data.amount",
            ),
            (
                REFUND.replace(
                    r#""refund_reference":"132013318360""#,
                    r#""refund_reference":null"#,
                ),
                "data.refund_reference",
            ),
            (
                REFUND.replace("transaction_reference", "trx"),
                "data.transaction.reference",
            ),
            (r#"{"event":"charge.success"}"#.to_owned(), "data"),
            (r#"{"data":{}}"#.to_owned(), "event"),
            ("[1]".to_owned(), "body"),
        ];
        for (body, field) in cases {
            match p.normalise(body.as_bytes()) {
                Err(PayloadError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: expected invalid {field}, got {other:?}"),
            }
        }
        assert!(matches!(p.normalise(b""), Err(PayloadError::Malformed(_))));
        assert!(matches!(
            p.normalise(br#"{"event":"a","event":"b","data":{}}"#),
            Err(PayloadError::Malformed(_))
        ));
        assert!(matches!(p.normalise(b"\xff{}"), Err(PayloadError::NotUtf8)));
    }
}
