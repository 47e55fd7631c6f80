//! Flutterwave, in both of its signing schemes:
//! - `flutterwave-signature: <base64 HMAC-SHA256 of the raw body>` keyed by the secret hash
//!   (v4, and v3 accounts that send it): the body is bound to the secret;
//! - v3 `verif-hash: <secret hash>`: the shared secret itself, compared in constant time. It
//!   proves knowledge of the secret but not that the body is Flutterwave's, so it is accepted
//!   only with v3 hashes configured, and never when a `flutterwave-signature` is present.
//!
//! Payloads: v3 `{"event":"charge.completed","data":{"id","tx_ref","amount",…},"meta_data":{…}}`
//! and v4 `{"type":"charge.completed","data":{"id","reference","amount",…,"meta":{…}}}`. Amounts
//! are decimal major units (`1250.5`) and are converted exactly from the number's text, never
//! through a float.

mod disputes;
pub mod transfers;

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderMap;
use serde_json::value::RawValue;
use serde_json::Value;

use super::json::{parse_object, Fields};
use super::signature::{ct_eq, hmac_sha256, Secret};
use super::units::Units;
use super::{boxed, ApiDef, ProviderDef, ProviderEnv};
use super::{
    single_header, PayloadError, Provider, ProviderConfigError, ProviderTruth, SignatureError,
};
use crate::domain::{
    AccountId, EventKind, Money, NormalisedEvent, PaymentFacts, PaymentStatus, ProviderId,
    Reference, StateFacts, UnpricedRefund,
};

pub const ID: ProviderId = ProviderId::from_static("flutterwave");

impl ProviderId {
    pub const FLUTTERWAVE: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_FLUTTERWAVE_SECRETS";
const V4_SECRETS: &str = "PAYHOOK_FLUTTERWAVE_V4_SECRETS";
const ACCOUNT_KEY: &str = "PAYHOOK_FLUTTERWAVE_ACCOUNT_KEY";
const REFERENCE: &str = "PAYHOOK_FLUTTERWAVE_REFERENCE";

/// Flutterwave's amounts are major-unit JSON numbers ("amount: 200, currency: NGN" for 200
/// naira), decimals at the currency's ISO exponent. A JSON number is read as an IEEE double by
/// most parsers: 15 significant digits are the most it carries exactly, so a larger payout is
/// refused rather than sent as a neighbour of itself.
pub const UNITS: Units = Units {
    max_out_units: 999_999_999_999_999,
    ..super::units::ISO
};

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (
            SECRETS,
            "Flutterwave v3 secret hashes: verif-hash and HMAC keys, space-separated",
        ),
        (
            V4_SECRETS,
            "Flutterwave v4 secret hashes: HMAC keys only, space-separated",
        ),
        (
            ACCOUNT_KEY,
            "key of the account in Flutterwave data.meta / meta_data (default account)",
        ),
        (
            REFERENCE,
            "field keying Flutterwave payments: tx_ref (default) or id",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_API_URL",
            "reconciliation and payouts: Flutterwave API base URL (default https://api.flutterwave.com)",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_API_KEY",
            "reconciliation: Flutterwave secret key",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_FLUTTERWAVE_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_FLUTTERWAVE_SECRETS in AWS",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_V4_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_FLUTTERWAVE_V4_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_FLUTTERWAVE_V4_SECRETS in AWS",
        ),
        (
            "PAYHOOK_FLUTTERWAVE_API_KEY_ARN",
            "reconciliation and payouts: Secrets Manager secret (name or ARN) holding PAYHOOK_FLUTTERWAVE_API_KEY (AWSCURRENT), read at run time; set instead of PAYHOOK_FLUTTERWAVE_API_KEY in AWS",
        ),
    ],
    build,
    source_ips: "PAYHOOK_FLUTTERWAVE_SOURCE_IPS",
    event_source: None,
    metadata: &["data.meta", "meta_data"],
    signed_headers: &[SIGNATURE_HEADER, HASH_HEADER],
    secret_arns: &[
        ("PAYHOOK_FLUTTERWAVE_SECRETS_ARN", "PAYHOOK_FLUTTERWAVE_SECRETS", true),
        ("PAYHOOK_FLUTTERWAVE_V4_SECRETS_ARN", "PAYHOOK_FLUTTERWAVE_V4_SECRETS", true),
        ("PAYHOOK_FLUTTERWAVE_API_KEY_ARN", "PAYHOOK_FLUTTERWAVE_API_KEY", false),
    ],
    transfers: Some(transfers::TRANSFERS),
    units: &UNITS,
    api: ApiDef {
        url_var: "PAYHOOK_FLUTTERWAVE_API_URL",
        default_base_url: Some("https://api.flutterwave.com"),
        key_var: "PAYHOOK_FLUTTERWAVE_API_KEY",
        basic_auth: false,
    },
};

/// Configured when either its v3 hashes or its v4 secrets are set.
fn build(env: ProviderEnv<'_>) -> super::Built {
    let settings = env.metadata_key(ACCOUNT_KEY).and_then(|key| {
        let reference = match env.setting(REFERENCE) {
            None => ReferenceField::TxRef,
            Some(v) => ReferenceField::parse(v.trim()).ok_or(ProviderConfigError::Setting {
                name: REFERENCE,
                value: v.to_owned(),
                reason: "must be tx_ref or id",
            })?,
        };
        Ok((key, reference))
    });
    let (account_key, reference) = match settings {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let (v3, v4) = (env.get(SECRETS), env.get(V4_SECRETS));
    if v3.is_none() && v4.is_none() {
        return None;
    }
    boxed(Flutterwave::from_env_values(
        v3,
        v4,
        reference,
        &account_key,
    ))
}

/// The HMAC signature header.
pub const SIGNATURE_HEADER: &str = "flutterwave-signature";
/// The v3 shared-secret header.
pub const HASH_HEADER: &str = "verif-hash";

/// Which payload field keys a payment: the merchant's `tx_ref` (v4: `reference`), or
/// Flutterwave's transaction `id` (one per attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceField {
    TxRef,
    Id,
}

impl ReferenceField {
    /// Parses the `PAYHOOK_FLUTTERWAVE_REFERENCE` value.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "tx_ref" => Some(ReferenceField::TxRef),
            "id" => Some(ReferenceField::Id),
            _ => None,
        }
    }
}

/// The Flutterwave adapter.
#[derive(Debug, Clone)]
pub struct Flutterwave {
    /// v3 secret hashes, accepted verbatim in `verif-hash`.
    hashes: Vec<Secret>,
    /// HMAC keys for `flutterwave-signature`: the v4 secrets, then the v3 hashes.
    keys: Vec<Secret>,
    reference: ReferenceField,
    account_key: String,
}

/// Space-separated secrets; a blank value is no secret. Public keys (`FLWPUBK…`) are refused.
fn secrets(value: Option<&str>) -> Result<Vec<Secret>, SignatureError> {
    value
        .unwrap_or_default()
        .split_whitespace()
        .map(|s| {
            if s.starts_with("FLWPUBK") {
                return Err(SignatureError::BadSecret(
                    "a Flutterwave public key is not a secret".into(),
                ));
            }
            Secret::new(s.as_bytes().to_vec())
        })
        .collect()
}

impl Flutterwave {
    /// `v3` and `v4` are the env values of the v3 secret hashes and the v4 secrets; at least one
    /// secret is needed.
    pub fn from_env_values(
        v3: Option<&str>,
        v4: Option<&str>,
        reference: ReferenceField,
        account_key: &str,
    ) -> Result<Self, SignatureError> {
        let hashes = secrets(v3)?;
        let mut keys = secrets(v4)?;
        keys.extend(hashes.iter().cloned());
        if keys.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        Ok(Flutterwave {
            hashes,
            keys,
            reference,
            account_key: account_key.to_owned(),
        })
    }

    /// The `flutterwave-signature` value for `body`, with the first key (v4 first).
    pub fn sign(&self, body: &[u8]) -> String {
        let key = self.keys.first().map(Secret::bytes).unwrap_or_default();
        STANDARD.encode(hmac_sha256(key, &[body]))
    }

    /// The `verif-hash` value a v3 delivery carries (the first v3 hash), for signing tooling.
    pub fn verif_hash(&self) -> Option<String> {
        self.hashes
            .first()
            .map(|h| String::from_utf8_lossy(h.bytes()).into_owned())
    }

    fn verify_hmac(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), SignatureError> {
        let value = single_header(headers, SIGNATURE_HEADER)?;
        let sig = STANDARD
            .decode(value.trim())
            .ok()
            .filter(|s| s.len() == 32)
            .ok_or(SignatureError::MalformedHeader(SIGNATURE_HEADER))?;
        if self
            .keys
            .iter()
            .any(|k| ct_eq(&sig, &hmac_sha256(k.bytes(), &[body])))
        {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    /// Compares digests of the header and each hash, so neither the content nor the length of a
    /// hash leaks through timing.
    fn verify_hash(&self, headers: &HeaderMap) -> Result<(), SignatureError> {
        let value = single_header(headers, HASH_HEADER)?;
        let digest = |b: &[u8]| hmac_sha256(b"payhook verif-hash", &[b]);
        let sent = digest(value.as_bytes());
        if self.hashes.iter().any(|h| ct_eq(&sent, &digest(h.bytes()))) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }
}

impl Provider for Flutterwave {
    fn id(&self) -> ProviderId {
        ID
    }

    fn sign(&self, body: &[u8], _event_id: &str, _now_s: i64) -> Vec<(String, String)> {
        let mut headers = vec![(SIGNATURE_HEADER.to_owned(), Flutterwave::sign(self, body))];
        headers.extend(self.verif_hash().map(|h| (HASH_HEADER.to_owned(), h)));
        headers
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        if headers.contains_key(SIGNATURE_HEADER) {
            self.verify_hmac(headers, body)
        } else if !self.hashes.is_empty() && headers.contains_key(HASH_HEADER) {
            self.verify_hash(headers)
        } else {
            Err(SignatureError::MissingHeader(SIGNATURE_HEADER))
        }
    }

    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError> {
        let root = parse_object(body)?;
        // parse_object accepted it, so it is UTF-8.
        let text = std::str::from_utf8(body).map_err(|_| PayloadError::NotUtf8)?;
        let f = Fields::new(&root);
        let event_type = match f.opt_str("event")? {
            Some(e) => e.to_owned(),
            None => f
                .str("type")
                .map_err(|_| PayloadError::invalid("event", "is required"))?
                .to_owned(),
        };
        if !matches!(f.get("data"), Some(Value::Object(_))) {
            return Err(PayloadError::invalid("data", "must be an object"));
        }
        let kind = match event_type.as_str() {
            "charge.completed" => self.charge_completed(&f, text)?,
            "refund.completed" => refund_completed(&f, text)?,
            "transfer.completed" => transfers::transfer_completed(&f, text)?,
            // Anything else is acknowledged and logged, so Flutterwave stops retrying it.
            _ => EventKind::Ignored,
        };
        let event_id = match f.opt_str("id")? {
            Some(id) => id.to_owned(),
            None if f.get("data.id").is_some() => {
                format!("{event_type}:{}", id_text(&f, "data.id")?)
            }
            None => event_type.clone(),
        };
        let transaction_id = transaction_of(&f, &kind)?;
        Ok(NormalisedEvent {
            provider: ProviderId::FLUTTERWAVE,
            event_id,
            event_type,
            kind,
            transaction_id,
        })
    }

    fn api_path(&self, reference: &Reference) -> String {
        match self.reference {
            ReferenceField::TxRef => {
                format!("/v3/transactions/verify_by_reference?tx_ref={reference}")
            }
            ReferenceField::Id => format!("/v3/transactions/{reference}/verify"),
        }
    }

    fn disputes_path(&self, since_s: i64, cursor: Option<&str>) -> Option<String> {
        Some(disputes::list_path(since_s, cursor))
    }

    fn read_disputes(&self, body: &[u8]) -> Result<super::DisputePage, PayloadError> {
        self.read_chargebacks(body)
    }

    /// The verify endpoints answer `{"status":"success","data":{…}}` whose `data` is the charge
    /// as `charge.completed` carries it: same fields, same exact decimal conversion (from the
    /// answer's text). `failed` is not final: a checkout may be retried under the same `tx_ref`.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError> {
        let root = parse_object(body)?;
        let text = std::str::from_utf8(body).map_err(|_| PayloadError::NotUtf8)?;
        let f = Fields::new(&root);
        match f.str("data.status")? {
            "successful" | "succeeded" => {
                super::succeeded(self.charge_completed(&f, text)?, reference)
            }
            other => Ok(ProviderTruth::NotFinal {
                status: other.to_owned(),
            }),
        }
    }
}

impl Flutterwave {
    /// `charge.completed` says how the charge ended in `data.status`.
    fn charge_completed(&self, f: &Fields<'_>, text: &str) -> Result<EventKind, PayloadError> {
        let to = match f.str("data.status")? {
            "successful" | "succeeded" => {
                return Ok(EventKind::PaymentSucceeded(PaymentFacts {
                    reference: self.reference(f)?,
                    // None: the payment's registered account (or the default) is credited.
                    account: self.opt_account(f)?,
                    money: flutterwave_money(f, text)?,
                }));
            }
            "failed" => PaymentStatus::Failed,
            "pending" => PaymentStatus::Processing,
            _ => return Ok(EventKind::Ignored),
        };
        let money = if f.get("data.amount").is_some() {
            Some(flutterwave_money(f, text)?)
        } else {
            None
        };
        Ok(EventKind::PaymentState {
            facts: StateFacts {
                reference: self.reference(f)?,
                account: self.opt_account(f)?,
                money,
            },
            to,
        })
    }

    fn reference(&self, f: &Fields<'_>) -> Result<Reference, PayloadError> {
        let path = match self.reference {
            ReferenceField::Id => "data.id",
            ReferenceField::TxRef
                if f.get("data.tx_ref").is_none() && f.get("data.reference").is_some() =>
            {
                "data.reference"
            }
            ReferenceField::TxRef => "data.tx_ref",
        };
        Reference::parse(&id_text(f, path)?).map_err(|e| PayloadError::invalid(path, e.to_string()))
    }

    /// The account from the charge's `data.meta` (v4) or the delivery's `meta_data` (v3).
    fn opt_account(&self, f: &Fields<'_>) -> Result<Option<AccountId>, PayloadError> {
        for parent in ["data.meta", "meta_data"] {
            let path = format!("{parent}.{}", self.account_key);
            if let Some(a) = f.opt_account(&path)? {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

/// The Flutterwave transaction an event is about: a charge's `data.id`, a refund's charge
/// (`data.charge_id` in v4, `data.TransactionId` in v3). The pipeline binds it to the reference
/// of its first sighting, so `PAYHOOK_FLUTTERWAVE_REFERENCE` can change without re-keying a payment.
fn transaction_of(f: &Fields<'_>, kind: &EventKind) -> Result<Option<String>, PayloadError> {
    match kind {
        EventKind::PaymentSucceeded(_) | EventKind::PaymentState { .. } => {
            f.get("data.id").map(|_| id_text(f, "data.id")).transpose()
        }
        // Named by its charge's transaction id until the binding gives the payment's reference.
        EventKind::RefundUnpriced(u) => Ok(Some(u.payment_reference.to_string())),
        _ => Ok(None),
    }
}

/// `refund.completed`: v4 `{"data":{"id","amount_refunded","status","charge_id"}}`, v3
/// `{"data":{"id","AmountRefunded","status","TransactionId"}}`. Neither names a currency, so the
/// refund is priced in its payment's currency by the pipeline. The payment is named by its
/// transaction id, which the pipeline resolves through the transaction's binding.
fn refund_completed(f: &Fields<'_>, text: &str) -> Result<EventKind, PayloadError> {
    let status = f.opt_str("data.status")?.unwrap_or("completed");
    if !matches!(status, "completed" | "succeeded" | "successful") {
        return Ok(EventKind::Ignored);
    }
    let (charge, amount) = if f.get("data.charge_id").is_some() {
        ("data.charge_id", ["data", "amount_refunded"])
    } else {
        ("data.TransactionId", ["data", "AmountRefunded"])
    };
    let amount_path = amount.join(".");
    if !matches!(f.get(&amount_path), Some(Value::Number(_))) {
        return Err(PayloadError::invalid(&amount_path, "must be a number"));
    }
    let amount_major =
        raw_at(text, &amount).ok_or_else(|| PayloadError::invalid(&amount_path, "is required"))?;
    let refund_reference = Reference::parse(&id_text(f, "data.id")?)
        .map_err(|e| PayloadError::invalid("data.id", e.to_string()))?;
    let payment_reference = Reference::parse(&id_text(f, charge)?)
        .map_err(|e| PayloadError::invalid(charge, e.to_string()))?;
    Ok(EventKind::RefundUnpriced(UnpricedRefund {
        refund_reference,
        payment_reference,
        amount_major: amount_major.trim().to_owned(),
    }))
}

/// An identifier sent as a string or an integer.
fn id_text(f: &Fields<'_>, path: &str) -> Result<String, PayloadError> {
    match f.get(path) {
        Some(Value::Number(_)) => Ok(f.int(path)?.to_string()),
        Some(Value::String(s)) => Ok(s.clone()),
        None => Err(PayloadError::invalid(path, "is required")),
        Some(_) => Err(PayloadError::invalid(
            path,
            "must be a string or an integer",
        )),
    }
}

/// `data.amount` in major units, converted exactly by the currency's exponent from the number
/// as written in the body: `1250.5` NGN is 125050 kobo; `10.005` NGN, `1e3`, `-5` and `0` are
/// refused.
pub(super) fn flutterwave_money(f: &Fields<'_>, text: &str) -> Result<Money, PayloadError> {
    const AMOUNT: &str = "data.amount";
    if !matches!(f.get(AMOUNT), Some(Value::Number(_))) {
        return Err(PayloadError::invalid(AMOUNT, "must be a number"));
    }
    let currency = f.currency("data.currency")?;
    let raw = raw_at(text, &["data", "amount"])
        .ok_or_else(|| PayloadError::invalid(AMOUNT, "is required"))?;
    UNITS
        .from_api_decimal(raw.trim(), currency)
        .map_err(|e| PayloadError::invalid(AMOUNT, e.to_string()))
}

/// The JSON text of the value at `path`, as written in `text`. serde_json (without
/// `arbitrary_precision`) would turn `1250.5` into a float; [`RawValue`] keeps the digits.
/// The body has passed [`parse_strict`], so no object here has a duplicate key and this text is
/// the value the parsed tree holds.
pub fn raw_at<'a>(text: &'a str, path: &[&str]) -> Option<&'a str> {
    let mut current = text;
    for key in path {
        let map: BTreeMap<String, &'a RawValue> = serde_json::from_str(current).ok()?;
        let value: &'a RawValue = map.get(*key).copied()?;
        current = value.get();
    }
    Some(current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const V3: &str = "fw-v3-secret-hash-2b7e151628aed2a6";
    const V4: &str = "fw-v4-secret-hash-abf7158809cf4f3c";
    const SUCCESS: &str = r#"{"event":"charge.completed","data":{"id":285959875,"tx_ref":"fw-order-1001","flw_ref":"FLW-MOCK-1","amount":1250.5,"currency":"NGN","charged_amount":1250.5,"status":"successful","customer":{"id":215604089,"email":"ada@example.com"}},"meta_data":{"account":"wallet_42"},"event.type":"CARD_TRANSACTION"}"#;

    fn fw(v3: Option<&str>, v4: Option<&str>) -> Flutterwave {
        Flutterwave::from_env_values(v3, v4, ReferenceField::TxRef, "account").unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn hmac_signature_valid_tampered_wrong_secret_rotation() {
        let v4 = fw(None, Some(V4));
        let body = SUCCESS.as_bytes();
        let sig = v4.sign(body);
        assert_eq!(sig, STANDARD.encode(hmac_sha256(V4.as_bytes(), &[body])));
        assert_eq!(
            v4.verify(&headers(&[(SIGNATURE_HEADER, &sig)]), body, 0),
            Ok(())
        );
        let tampered = SUCCESS.replace("1250.5", "9250.5");
        assert_eq!(
            v4.verify(
                &headers(&[(SIGNATURE_HEADER, &sig)]),
                tampered.as_bytes(),
                0
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            fw(None, Some("other")).verify(&headers(&[(SIGNATURE_HEADER, &sig)]), body, 0),
            Err(SignatureError::Mismatch)
        );
        let rotated = fw(None, Some(&format!("old-secret {V4}")));
        assert_eq!(
            rotated.verify(&headers(&[(SIGNATURE_HEADER, &sig)]), body, 0),
            Ok(())
        );
        // v3 hashes also key the HMAC (v3 accounts that sign).
        let v3 = fw(Some(V3), None);
        assert_eq!(
            v3.verify(&headers(&[(SIGNATURE_HEADER, &v3.sign(body))]), body, 0),
            Ok(())
        );
    }

    #[test]
    fn verif_hash_only_with_v3_hashes_and_never_over_a_signature() {
        let both = fw(Some(V3), Some(V4));
        let body = SUCCESS.as_bytes();
        assert_eq!(both.verify(&headers(&[(HASH_HEADER, V3)]), body, 0), Ok(()));
        assert_eq!(
            both.verify(&headers(&[(HASH_HEADER, V4)]), body, 0),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            both.verify(&headers(&[(HASH_HEADER, "fw-v3-secret-hash")]), body, 0),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            both.verify(&headers(&[(HASH_HEADER, V3), (HASH_HEADER, V3)]), body, 0),
            Err(SignatureError::RepeatedHeader(HASH_HEADER))
        );
        // A present signature must verify, whatever verif-hash says.
        let forged = headers(&[
            (HASH_HEADER, V3),
            (SIGNATURE_HEADER, &STANDARD.encode([0u8; 32])),
        ]);
        assert_eq!(both.verify(&forged, body, 0), Err(SignatureError::Mismatch));
        let v4_only = fw(None, Some(V4));
        assert_eq!(
            v4_only.verify(&headers(&[(HASH_HEADER, V4)]), body, 0),
            Err(SignatureError::MissingHeader(SIGNATURE_HEADER))
        );
        assert_eq!(
            both.verify(&HeaderMap::new(), body, 0),
            Err(SignatureError::MissingHeader(SIGNATURE_HEADER))
        );
    }

    #[test]
    fn malformed_and_repeated_signatures() {
        let v4 = fw(None, Some(V4));
        let body = SUCCESS.as_bytes();
        let sig = v4.sign(body);
        assert_eq!(
            v4.verify(
                &headers(&[(SIGNATURE_HEADER, &sig), (SIGNATURE_HEADER, &sig)]),
                body,
                0
            ),
            Err(SignatureError::RepeatedHeader(SIGNATURE_HEADER))
        );
        let short = STANDARD.encode([1u8; 31]);
        let hexed = hex::encode(hmac_sha256(V4.as_bytes(), &[body]));
        for bad in ["", "%%%", "not base64!", short.as_str(), hexed.as_str()] {
            assert_eq!(
                v4.verify(&headers(&[(SIGNATURE_HEADER, bad)]), body, 0),
                Err(SignatureError::MalformedHeader(SIGNATURE_HEADER)),
                "{bad}"
            );
        }
    }

    #[test]
    fn secrets_are_required_and_public_keys_refused() {
        let bad = |v3: Option<&str>, v4: Option<&str>| {
            matches!(
                Flutterwave::from_env_values(v3, v4, ReferenceField::TxRef, "account"),
                Err(SignatureError::BadSecret(_))
            )
        };
        assert!(bad(None, None));
        assert!(bad(Some(" "), Some("")));
        assert!(bad(Some("FLWPUBK_TEST-abc-X"), None));
        assert!(!bad(Some(""), Some(V4)));
    }

    fn money_of(amount: &str, currency: &str) -> Result<i64, PayloadError> {
        let body = SUCCESS
            .replace(r#""amount":1250.5"#, &format!(r#""amount":{amount}"#))
            .replace(
                r#""currency":"NGN""#,
                &format!(r#""currency":"{currency}""#),
            );
        match fw(Some(V3), None).normalise(body.as_bytes())?.kind {
            EventKind::PaymentSucceeded(p) => Ok(p.money.amount.get()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decimals_convert_exactly_per_currency_exponent() {
        assert_eq!(money_of("1250.5", "NGN").unwrap(), 125_050);
        assert_eq!(money_of("1250.50", "NGN").unwrap(), 125_050);
        assert_eq!(money_of("1250", "NGN").unwrap(), 125_000);
        assert_eq!(money_of("0.01", "NGN").unwrap(), 1);
        assert_eq!(
            money_of("0.1", "USD").unwrap(),
            10,
            "0.1 is exact here, unlike in a float"
        );
        assert_eq!(money_of("500", "UGX").unwrap(), 500);
        assert_eq!(money_of("500.000", "XAF").unwrap(), 500);
        assert_eq!(money_of("1.005", "KWD").unwrap(), 1005);
        assert_eq!(
            money_of("10000000000000", "NGN").unwrap(),
            1_000_000_000_000_000,
            "the maximum amount"
        );
        assert!(
            money_of("10000000000000.01", "NGN").is_err(),
            "above the maximum amount"
        );
        assert!(
            money_of("92233720368547758.07", "NGN").is_err(),
            "i64::MAX minor units is above the maximum"
        );
        for (amount, currency, field) in [
            ("10.005", "NGN", "data.amount"),
            ("1.5", "UGX", "data.amount"),
            ("1e3", "NGN", "data.amount"),
            ("1.5E2", "NGN", "data.amount"),
            ("-5", "NGN", "data.amount"),
            ("0", "NGN", "data.amount"),
            ("0.00", "NGN", "data.amount"),
            ("92233720368547758.08", "NGN", "data.amount"),
            ("99999999999999999999", "NGN", "data.amount"),
            ("\"1250.5\"", "NGN", "data.amount"),
            ("null", "NGN", "data.amount"),
            ("1250.5", "ngn", "data.currency"),
            ("1250.5", "XQQ", "data.currency"),
        ] {
            match money_of(amount, currency) {
                Err(PayloadError::Invalid { field: f, .. }) => {
                    assert_eq!(f, field, "{amount} {currency}")
                }
                other => panic!("{amount} {currency}: {other:?}"),
            }
        }
    }

    #[test]
    fn maps_statuses_references_and_accounts() {
        let f3 = fw(Some(V3), None);
        let ev = f3.normalise(SUCCESS.as_bytes()).unwrap();
        assert_eq!(
            ev.key().unwrap().as_str(),
            "flutterwave:payment:fw-order-1001"
        );
        assert_eq!(ev.event_id, "charge.completed:285959875");
        let failed = f3
            .normalise(SUCCESS.replace("successful", "failed").as_bytes())
            .unwrap();
        match failed.kind {
            EventKind::PaymentState {
                to: PaymentStatus::Failed,
                facts,
            } => {
                assert_eq!(facts.reference.as_str(), "fw-order-1001");
                assert_eq!(facts.money.map(|m| m.amount.get()), Some(125_050));
                assert_eq!(
                    facts.account.map(|a| a.as_str().to_owned()).as_deref(),
                    Some("wallet_42")
                );
            }
            other => panic!("{other:?}"),
        }
        let pending = f3
            .normalise(SUCCESS.replace("successful", "pending").as_bytes())
            .unwrap();
        assert!(matches!(
            pending.kind,
            EventKind::PaymentState {
                to: PaymentStatus::Processing,
                ..
            }
        ));
        let odd = f3
            .normalise(SUCCESS.replace("successful", "reversed").as_bytes())
            .unwrap();
        assert_eq!(odd.kind, EventKind::Ignored);
        let other = f3
            .normalise(
                SUCCESS
                    .replace("charge.completed", "subscription.cancelled")
                    .as_bytes(),
            )
            .unwrap();
        assert_eq!(other.kind, EventKind::Ignored);

        let by_id =
            Flutterwave::from_env_values(Some(V3), None, ReferenceField::Id, "wallet").unwrap();
        let body = SUCCESS.replace(r#""meta_data":{"account""#, r#""meta_data":{"wallet""#);
        assert_eq!(
            by_id
                .normalise(body.as_bytes())
                .unwrap()
                .key()
                .unwrap()
                .as_str(),
            "flutterwave:payment:285959875"
        );
        // No account under the configured key: no account (credited to the registered or
        // default account, else acknowledged as unassigned), not a 400.
        match f3.normalise(body.as_bytes()).unwrap().kind {
            EventKind::PaymentSucceeded(p) => assert_eq!(p.account, None),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn charges_carry_their_transaction_and_refunds_name_their_charge() {
        let f3 = fw(Some(V3), None);
        assert_eq!(
            f3.normalise(SUCCESS.as_bytes())
                .unwrap()
                .transaction_id
                .as_deref(),
            Some("285959875")
        );
        let v4 = r#"{"type":"refund.completed","data":{"id":"rf_1","amount_refunded":10.5,"status":"succeeded","charge_id":"chg_9","meta":{}}}"#;
        let ev = fw(None, Some(V4)).normalise(v4.as_bytes()).unwrap();
        assert_eq!(ev.transaction_id.as_deref(), Some("chg_9"));
        match ev.kind {
            EventKind::RefundUnpriced(u) => {
                assert_eq!(
                    (
                        u.refund_reference.as_str(),
                        u.payment_reference.as_str(),
                        u.amount_major.as_str()
                    ),
                    ("rf_1", "chg_9", "10.5")
                );
            }
            other => panic!("{other:?}"),
        }
        let v3 = r#"{"event":"refund.completed","data":{"id":7001,"AmountRefunded":500,"status":"completed","TransactionId":285959875}}"#;
        match f3.normalise(v3.as_bytes()).unwrap().kind {
            EventKind::RefundUnpriced(u) => assert_eq!(
                (u.payment_reference.as_str(), u.amount_major.as_str()),
                ("285959875", "500")
            ),
            other => panic!("{other:?}"),
        }
        let pending = v4.replace(r#""status":"succeeded""#, r#""status":"pending""#);
        assert_eq!(
            fw(None, Some(V4))
                .normalise(pending.as_bytes())
                .unwrap()
                .kind,
            EventKind::Ignored
        );
    }

    #[test]
    fn reads_the_verify_api_as_it_reads_webhooks() {
        let f3 = fw(Some(V3), None);
        let r = Reference::parse("fw-order-1001").unwrap();
        let verify = r#"{"status":"success","message":"Transaction fetched successfully","data":{"id":285959875,"tx_ref":"fw-order-1001","amount":1250.5,"currency":"NGN","status":"successful","meta":{"account":"wallet_42"}}}"#;
        match f3.read_api(&r, verify.as_bytes()).unwrap() {
            ProviderTruth::Succeeded(p) => {
                assert_eq!(
                    (p.money.amount.get(), p.reference.as_str()),
                    (125_050, "fw-order-1001"),
                    "exact decimal, as webhooks"
                );
                assert_eq!(p.account.as_ref().map(|a| a.as_str()), Some("wallet_42"));
            }
            other => panic!("{other:?}"),
        }
        // A failed attempt is not final: the checkout may be retried under the same tx_ref.
        let failed = verify.replace(r#""status":"successful""#, r#""status":"failed""#);
        assert_eq!(
            f3.read_api(&r, failed.as_bytes()).unwrap(),
            ProviderTruth::NotFinal {
                status: "failed".into()
            }
        );
        assert_eq!(
            f3.api_path(&r),
            "/v3/transactions/verify_by_reference?tx_ref=fw-order-1001"
        );
    }

    #[test]
    fn maps_the_v4_shape() {
        let v4 = r#"{"type":"charge.completed","data":{"id":"chg_e1f3a2b1","amount":20.75,"currency":"USD","status":"succeeded","reference":"order_2026_001","meta":{"account":"wallet_42"}}}"#;
        let ev = fw(None, Some(V4)).normalise(v4.as_bytes()).unwrap();
        assert_eq!(
            ev.key().unwrap().as_str(),
            "flutterwave:payment:order_2026_001"
        );
        assert_eq!(ev.event_id, "charge.completed:chg_e1f3a2b1");
        match ev.kind {
            EventKind::PaymentSucceeded(p) => assert_eq!(
                (p.money.amount.get(), p.money.currency.as_str()),
                (2075, "USD")
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn raw_text_is_taken_from_the_body() {
        let text = r#"{"data":{"amount" : 1250.50 ,"x":[1,2]},"amount":3}"#;
        assert_eq!(raw_at(text, &["data", "amount"]), Some("1250.50"));
        assert_eq!(raw_at(text, &["amount"]), Some("3"));
        assert_eq!(raw_at(text, &["data", "x", "0"]), None);
        assert_eq!(
            raw_at(r#"{"d\u0061ta":{"amount":7}}"#, &["data", "amount"]),
            Some("7")
        );
    }
}
