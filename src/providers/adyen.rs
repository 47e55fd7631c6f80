//! Adyen standard webhooks: one request carries a **batch** of `NotificationRequestItem`s, each
//! signed on its own: `additionalData.hmacSignature` is the base64 HMAC-SHA256, keyed by the
//! hex-decoded HMAC key (several for rotation), of `pspReference:originalReference:
//! merchantAccountCode:merchantReference:value:currency:eventCode:success` (a missing field is
//! empty), as Adyen's libraries compute it. Adyen also sends HTTP basic auth when configured on
//! the webhook; payhook checks it when `PAYHOOK_ADYEN_BASIC_AUTH` is set.
//!
//! **Trust only what is signed.** The HMAC covers those eight fields and nothing else, so the
//! account comes from the payment registered under the item's `merchantReference` (signed), or
//! from `additionalData["metadata.<key>"]` only when basic auth is configured (then the request
//! as a whole is authenticated); otherwise a payment without a registered account is
//! acknowledged as `unassigned`.
//!
//! Each item is its own delivery and money movement, under its own key; the router splits the
//! batch ([`Provider::batch`]) and answers `[accepted]` only when every verified item was
//! decided (applied, replayed, refused for good), so Adyen retries a batch with an item the
//! store could not decide, and the retry applies only what is missing. A forged item in a batch
//! is refused on its own (nothing written for it) and the rest are processed; a request none of
//! whose items verifies is answered 401, so a wrong key shows as failing deliveries in Adyen.
//!
//! Payments are keyed by `merchantReference`; each item's `pspReference` (its
//! `originalReference` for a refund, chargeback or cancellation) is bound to it, so a refund
//! naming the payment's `pspReference` finds the payment.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::HeaderMap;
use serde_json::Value;

use super::json::{parse_object, Fields};
use super::signature::{ct_eq, hmac_sha256, Secret};
use super::units::Units;
use super::{boxed, ApiDef, ProviderConfigError, ProviderDef, ProviderEnv};
use super::{single_header, PayloadError, Provider, ProviderTruth, SignatureError};
use crate::domain::{
    AccountId, DisputeFacts, DisputeMovement, EventKind, Money, NormalisedEvent, PaymentFacts,
    PaymentStatus, ProviderId, Reference, RefundFacts, StateFacts,
};

pub const ID: ProviderId = ProviderId::from_static("adyen");

impl ProviderId {
    pub const ADYEN: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_ADYEN_SECRETS";
const BASIC_AUTH: &str = "PAYHOOK_ADYEN_BASIC_AUTH";
const ACCOUNT_KEY: &str = "PAYHOOK_ADYEN_ACCOUNT_KEY";
const CREDIT_ON: &str = "PAYHOOK_ADYEN_CREDIT_ON";

/// Adyen's minor units (docs.adyen.com/development-resources/currency-codes): "for CLP, CVE,
/// IDR, and ISK the standard has a different number of decimals than shown in our currency
/// codes table ... the decimals in the table on this page are leading": CLP and ISK 2, CVE and
/// IDR 0.
pub const UNITS: Units = Units {
    exponents: &[("CLP", 2), ("CVE", 0), ("IDR", 0), ("ISK", 2)],
    ..super::units::ISO
};

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (SECRETS, "Adyen HMAC keys (hex), space-separated (rotation)"),
        (
            BASIC_AUTH,
            "Adyen webhook basic auth as user:password (optional; when set, every request must carry it, and item metadata may name the account)",
        ),
        (
            ACCOUNT_KEY,
            "key of the account in additionalData metadata.<key>, read only with basic auth (default account)",
        ),
        (
            CREDIT_ON,
            "which event credits a payment: AUTHORISATION (automatic capture, the default) or CAPTURE (manual capture)",
        ),
        (
            "PAYHOOK_ADYEN_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_ADYEN_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_ADYEN_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_ADYEN_SECRETS in AWS",
        ),
        (
            "PAYHOOK_ADYEN_BASIC_AUTH_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_ADYEN_BASIC_AUTH, read at run time; set instead of PAYHOOK_ADYEN_BASIC_AUTH in AWS",
        ),
    ],
    build,
    source_ips: "PAYHOOK_ADYEN_SOURCE_IPS",
    event_source: None,
    metadata: &["additionalData.metadata"],
    signed_headers: &["authorization"],
    secret_arns: &[
        ("PAYHOOK_ADYEN_SECRETS_ARN", SECRETS, true),
        ("PAYHOOK_ADYEN_BASIC_AUTH_ARN", BASIC_AUTH, false),
    ],
    transfers: None,
    units: &UNITS,
    // No API variables: Adyen has no payment lookup by merchant reference that fits
    // reconciliation's question (it retries its webhooks for days; its reports are the team's
    // backstop), so reconciliation never asks it.
    api: ApiDef {
        url_var: "",
        default_base_url: None,
        key_var: "",
        basic_auth: false,
    },
};

fn build(env: ProviderEnv<'_>) -> super::Built {
    let account_key = match env.metadata_key(ACCOUNT_KEY) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    let capture = match env.setting(CREDIT_ON).map(str::trim) {
        None | Some("AUTHORISATION") => false,
        Some("CAPTURE") => true,
        Some(other) => {
            return Some(Err(ProviderConfigError::Setting {
                name: CREDIT_ON,
                value: other.to_owned(),
                reason: "must be AUTHORISATION or CAPTURE",
            }))
        }
    };
    let keys = env.get(SECRETS)?;
    boxed(Adyen::new(
        keys,
        env.setting(BASIC_AUTH),
        &account_key,
        capture,
    ))
}

#[derive(Debug, Clone)]
pub struct Adyen {
    keys: Vec<Secret>,
    basic_auth: Option<Secret>,
    account_key: String,
    /// Credit on CAPTURE (manual capture) rather than on a successful AUTHORISATION.
    capture: bool,
}

impl Adyen {
    pub fn new(
        keys: &str,
        basic_auth: Option<&str>,
        account_key: &str,
        capture: bool,
    ) -> Result<Self, SignatureError> {
        let keys = keys
            .split_whitespace()
            .map(|k| {
                let bytes = hex::decode(k)
                    .map_err(|_| SignatureError::BadSecret("Adyen HMAC keys are hex".into()))?;
                Secret::new(bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        let basic_auth = match basic_auth.map(str::trim).filter(|b| !b.is_empty()) {
            None => None,
            Some(b) if b.contains(':') => Some(Secret::new(
                format!("Basic {}", STANDARD.encode(b)).into_bytes(),
            )?),
            Some(_) => {
                return Err(SignatureError::BadSecret(
                    "PAYHOOK_ADYEN_BASIC_AUTH must be user:password".into(),
                ))
            }
        };
        Ok(Adyen {
            keys,
            basic_auth,
            account_key: account_key.to_owned(),
            capture,
        })
    }

    /// The signed string of one item.
    fn signed(item: &Value) -> String {
        let text = |k: &str| match item.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        let amount = item.get("amount");
        let value = match amount.and_then(|a| a.get("value")) {
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let currency = amount
            .and_then(|a| a.get("currency"))
            .and_then(Value::as_str)
            .unwrap_or("");
        [
            text("pspReference"),
            text("originalReference"),
            text("merchantAccountCode"),
            text("merchantReference"),
            value,
            currency.to_owned(),
            text("eventCode"),
            text("success"),
        ]
        .join(":")
    }

    /// The `hmacSignature` Adyen would put on `item`, with the first key (tests, samples).
    pub fn sign_item(&self, item: &Value) -> String {
        let key = self.keys.first().map(Secret::bytes).unwrap_or_default();
        STANDARD.encode(hmac_sha256(key, &[Self::signed(item).as_bytes()]))
    }

    fn check_basic_auth(&self, headers: &HeaderMap) -> Result<(), SignatureError> {
        let Some(want) = &self.basic_auth else {
            return Ok(());
        };
        let got = single_header(headers, "authorization")?;
        if ct_eq(got.trim().as_bytes(), want.bytes()) {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    fn item(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        let code = f.str("eventCode")?;
        let success = f.str("success")? == "true";
        let money = || -> Result<Money, PayloadError> {
            f.money(&UNITS, "amount.value", "amount.currency")
        };
        let merchant_ref = || f.reference("merchantReference");
        let original = || f.reference("originalReference");
        let refund = || -> Result<RefundFacts, PayloadError> {
            Ok(RefundFacts {
                refund_reference: f.reference("pspReference")?,
                payment_reference: original()?,
                money: money()?,
            })
        };
        let dispute = |movement| -> Result<EventKind, PayloadError> {
            Ok(EventKind::Dispute {
                facts: DisputeFacts {
                    dispute: f.reference("pspReference")?,
                    payment_reference: original()?,
                    money: money()?,
                },
                movement,
            })
        };
        let failed = || -> Result<EventKind, PayloadError> {
            Ok(EventKind::PaymentState {
                facts: StateFacts {
                    reference: merchant_ref()?,
                    account: None,
                    money: Some(money()?),
                },
                to: PaymentStatus::Failed,
            })
        };
        Ok(match (code, success) {
            ("AUTHORISATION", true) if !self.capture => self.credit(f)?,
            ("CAPTURE", true) if self.capture => self.credit(f)?,
            ("AUTHORISATION", false) | ("CANCELLATION", true) => failed()?,
            ("REFUND", true) => EventKind::RefundSucceeded(refund()?),
            ("REFUND_FAILED", _) => EventKind::RefundReversed(refund()?),
            ("CHARGEBACK", _) => dispute(DisputeMovement::Withdrawal)?,
            ("CHARGEBACK_REVERSED", _) => dispute(DisputeMovement::Reinstatement)?,
            // Adyen cancels or refunds, whichever the payment needs; payhook's own record says
            // whether there is a credit to take back (`pipeline::cancels`).
            ("CANCEL_OR_REFUND", true) => EventKind::CancelOrRefund(refund()?),
            // The issuer declined the defence after the chargeback was reversed: the disputed
            // amount is deducted again. Every event of a dispute shares its pspReference, so
            // this withdrawal is named apart from the first (`{pspReference}:second_chargeback`).
            ("SECOND_CHARGEBACK", _) => EventKind::Dispute {
                facts: DisputeFacts {
                    dispute: Reference::parse(&format!(
                        "{}:second_chargeback",
                        f.str("pspReference")?
                    ))
                    .map_err(|e| PayloadError::invalid("pspReference", e.to_string()))?,
                    payment_reference: original()?,
                    money: money()?,
                },
                movement: DisputeMovement::Withdrawal,
            },
            _ => EventKind::Ignored,
        })
    }

    fn credit(&self, f: &Fields<'_>) -> Result<EventKind, PayloadError> {
        let account = if self.basic_auth.is_some() {
            match f
                .get("additionalData")
                .and_then(|a| a.get(format!("metadata.{}", self.account_key)))
            {
                Some(Value::String(s)) => Some(AccountId::parse(s).map_err(|e| {
                    PayloadError::invalid("additionalData.metadata", e.to_string())
                })?),
                _ => None,
            }
        } else {
            None
        };
        Ok(EventKind::PaymentSucceeded(PaymentFacts {
            reference: f.reference("merchantReference")?,
            account,
            money: f.money(&UNITS, "amount.value", "amount.currency")?,
        }))
    }
}

impl Provider for Adyen {
    fn id(&self) -> ProviderId {
        ID
    }

    /// The request's basic auth when configured; the items carry their own signatures
    /// ([`Provider::sign_body`]).
    fn sign(&self, _body: &[u8], _event_id: &str, _now_s: i64) -> Vec<(String, String)> {
        self.basic_auth
            .iter()
            .map(|b| {
                (
                    "authorization".to_owned(),
                    String::from_utf8_lossy(b.bytes()).into_owned(),
                )
            })
            .collect()
    }

    /// The batch with every item's `hmacSignature` computed afresh with the first key.
    fn sign_body(&self, body: &[u8]) -> Option<Vec<u8>> {
        let mut root: Value = serde_json::from_slice(body).ok()?;
        for entry in root.get_mut("notificationItems")?.as_array_mut()? {
            let item = entry.get_mut("NotificationRequestItem")?;
            let sig = self.sign_item(item);
            let extra = item
                .as_object_mut()?
                .entry("additionalData")
                .or_insert_with(|| Value::Object(serde_json::Map::new()));
            extra
                .as_object_mut()?
                .insert("hmacSignature".into(), Value::String(sig));
        }
        serde_json::to_vec(&root).ok()
    }

    /// Verifies one item (as split by [`Provider::batch`]): the request's basic auth when
    /// configured, then the item's HMAC with any key.
    fn verify(&self, headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        self.check_basic_auth(headers)?;
        let item: Value = serde_json::from_slice(body)
            .map_err(|_| SignatureError::MalformedHeader("additionalData.hmacSignature"))?;
        let sig = item
            .get("additionalData")
            .and_then(|a| a.get("hmacSignature"))
            .and_then(Value::as_str)
            .ok_or(SignatureError::MissingHeader(
                "additionalData.hmacSignature",
            ))?;
        let sig = STANDARD
            .decode(sig.trim())
            .map_err(|_| SignatureError::MalformedHeader("additionalData.hmacSignature"))?;
        let signed = Self::signed(&item);
        if self
            .keys
            .iter()
            .any(|k| ct_eq(&sig, &hmac_sha256(k.bytes(), &[signed.as_bytes()])))
        {
            Ok(())
        } else {
            Err(SignatureError::Mismatch)
        }
    }

    /// Maps one `NotificationRequestItem`.
    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let code = f.str("eventCode")?.to_owned();
        let psp = f.str("pspReference")?.to_owned();
        let kind = self.item(&f)?;
        // The transaction each item is about, bound to the payment's merchantReference the first
        // time it is seen: the payment's own pspReference, or the original one it names.
        let transaction_id = match &kind {
            EventKind::PaymentSucceeded(_) if !self.capture => Some(psp.clone()),
            EventKind::Ignored => None,
            _ => f
                .opt_str("originalReference")?
                .map(str::to_owned)
                .or(Some(psp.clone())),
        };
        // Adyen names a notification by eventCode and pspReference; `success` is part of the
        // name too, so a redelivery with the other outcome shows as its own event in the log.
        let success = f.str("success")?;
        Ok(NormalisedEvent {
            provider: ID,
            event_id: format!("{code}:{psp}:{success}"),
            event_type: code,
            kind,
            transaction_id,
        })
    }

    fn batch(&self, body: &[u8]) -> Option<Result<Vec<Vec<u8>>, PayloadError>> {
        let items = || -> Result<Vec<Vec<u8>>, PayloadError> {
            let root = parse_object(body)?;
            let list = root
                .get("notificationItems")
                .and_then(Value::as_array)
                .filter(|l| !l.is_empty())
                .ok_or_else(|| {
                    PayloadError::invalid("notificationItems", "must be a non-empty list")
                })?;
            list.iter()
                .map(|i| {
                    i.get("NotificationRequestItem")
                        .filter(|v| v.is_object())
                        .map(|v| v.to_string().into_bytes())
                        .ok_or_else(|| {
                            PayloadError::invalid(
                                "notificationItems",
                                "holds an item without NotificationRequestItem",
                            )
                        })
                })
                .collect()
        };
        Some(items())
    }

    fn api_path(&self, reference: &Reference) -> String {
        format!("/unused/{reference}")
    }

    fn read_api(
        &self,
        _reference: &Reference,
        _body: &[u8],
    ) -> Result<ProviderTruth, PayloadError> {
        Ok(ProviderTruth::NotFinal {
            status: "not asked".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Adyen's own test vector (adyen-dotnet-api-library, HmacValidatorTest,
    /// TestColonAndBackslashHmacValidator): a merchant reference with `\`, `:` and `/`.
    #[test]
    fn matches_adyen_s_own_hmac_vector() {
        let item = serde_json::json!({
            "additionalData": {"hmacSignature": "CZErGCNQaSsxbaQfZaJlakqo7KPP+mIa8a+wx3yNs9A="},
            "amount": {"currency": "EUR", "value": 1000},
            "eventCode": "AUTHORISATION",
            "merchantAccountCode": "AntoniStroinski",
            "merchantReference": "\\:/\\/slashes are fun",
            "pspReference": "ZVWN7D3WSMK2WN82",
            "success": "true"
        });
        let a = Adyen::new(
            "74F490DD33F7327BAECC88B2947C011FC02D014A473AAA33A8EC93E4DC069174",
            None,
            "account",
            false,
        )
        .unwrap();
        let body = item.to_string();
        assert!(a.verify(&HeaderMap::new(), body.as_bytes(), 0).is_ok());
        let tampered = body.replace("1000", "1001");
        assert_eq!(
            a.verify(&HeaderMap::new(), tampered.as_bytes(), 0),
            Err(SignatureError::Mismatch)
        );
        // The same string the library signs.
        assert_eq!(
            Adyen::signed(&item),
            "ZVWN7D3WSMK2WN82::AntoniStroinski:\\:/\\/slashes are fun:1000:EUR:AUTHORISATION:true"
        );
    }

    #[test]
    fn amounts_are_read_by_adyens_own_currency_table() {
        let key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
        let a = Adyen::new(key, None, "account", false).unwrap();
        let read = |currency: &str, value: i64| {
            let mut item = serde_json::json!({
                "amount": {"currency": currency, "value": value}, "eventCode": "AUTHORISATION",
                "merchantAccountCode": "Acme", "merchantReference": "order-1",
                "pspReference": "PSP1", "success": "true"});
            item["additionalData"] = serde_json::json!({"hmacSignature": a.sign_item(&item)});
            match a.normalise(item.to_string().as_bytes()).map(|e| e.kind) {
                Ok(EventKind::PaymentSucceeded(p)) => Ok(p.money.amount.get()),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        // CLP and ISK carry 2 decimals at Adyen (ISO 0); CVE and IDR none (ISO 2).
        assert_eq!(read("CLP", 10_000).ok(), Some(100));
        assert!(read("CLP", 10_050).is_err(), "not a whole peso");
        assert_eq!(read("ISK", 500_000).ok(), Some(5_000));
        assert_eq!(read("IDR", 5_000).ok(), Some(500_000));
        assert_eq!(read("CVE", 70).ok(), Some(7_000));
        assert_eq!(read("EUR", 1_000).ok(), Some(1_000));
    }

    #[test]
    fn basic_auth_when_configured_and_metadata_only_then() {
        let key = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";
        let mut item = serde_json::json!({
            "additionalData": {"metadata.account": "wallet_9"},
            "amount": {"currency": "EUR", "value": 500}, "eventCode": "AUTHORISATION",
            "merchantAccountCode": "Acme", "merchantReference": "order-1",
            "pspReference": "PSP1", "success": "true"});
        let open = Adyen::new(key, None, "account", false).unwrap();
        item["additionalData"]["hmacSignature"] = Value::from(open.sign_item(&item));
        let body = item.to_string();
        // Without basic auth, metadata (unsigned) never names the account.
        let EventKind::PaymentSucceeded(p) = open.normalise(body.as_bytes()).unwrap().kind else {
            panic!()
        };
        assert_eq!((p.reference.as_str(), p.account), ("order-1", None));
        let authed = Adyen::new(key, Some("adyen:s3cret"), "account", false).unwrap();
        assert_eq!(
            authed.verify(&HeaderMap::new(), body.as_bytes(), 0),
            Err(SignatureError::MissingHeader("authorization"))
        );
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            format!("Basic {}", STANDARD.encode("adyen:s3cret"))
                .parse()
                .unwrap(),
        );
        assert!(authed.verify(&h, body.as_bytes(), 0).is_ok());
        let EventKind::PaymentSucceeded(p) = authed.normalise(body.as_bytes()).unwrap().kind else {
            panic!()
        };
        assert_eq!(p.account.as_ref().map(AccountId::as_str), Some("wallet_9"));
    }

    #[test]
    fn event_codes_map_to_movements() {
        let a = Adyen::new("00ff", None, "account", false).unwrap();
        let kind = |code: &str, success: &str, original: Option<&str>| {
            let mut item = serde_json::json!({"amount": {"currency": "EUR", "value": 500},
                "eventCode": code, "merchantAccountCode": "Acme", "merchantReference": "order-1",
                "pspReference": "PSP2", "success": success});
            if let Some(o) = original {
                item["originalReference"] = Value::from(o);
            }
            a.normalise(item.to_string().as_bytes()).unwrap()
        };
        assert!(matches!(
            kind("AUTHORISATION", "true", None).kind,
            EventKind::PaymentSucceeded(_)
        ));
        assert!(matches!(
            kind("AUTHORISATION", "false", None).kind,
            EventKind::PaymentState {
                to: PaymentStatus::Failed,
                ..
            }
        ));
        assert!(matches!(
            kind("CANCELLATION", "true", Some("PSP1")).kind,
            EventKind::PaymentState { .. }
        ));
        let refund = kind("REFUND", "true", Some("PSP1"));
        assert!(
            matches!(&refund.kind, EventKind::RefundSucceeded(r) if r.payment_reference.as_str() == "PSP1")
        );
        assert_eq!(refund.transaction_id.as_deref(), Some("PSP1"));
        assert!(matches!(
            kind("REFUND_FAILED", "true", Some("PSP1")).kind,
            EventKind::RefundReversed(_)
        ));
        assert!(matches!(
            kind("CHARGEBACK", "true", Some("PSP1")).kind,
            EventKind::Dispute {
                movement: DisputeMovement::Withdrawal,
                ..
            }
        ));
        assert!(matches!(
            kind("CHARGEBACK_REVERSED", "true", Some("PSP1")).kind,
            EventKind::Dispute {
                movement: DisputeMovement::Reinstatement,
                ..
            }
        ));
        let cancel = kind("CANCEL_OR_REFUND", "true", Some("PSP1"));
        assert!(
            matches!(&cancel.kind, EventKind::CancelOrRefund(r) if r.payment_reference.as_str() == "PSP1")
        );
        assert_eq!(cancel.key().unwrap().as_str(), "adyen:refund:PSP2");
        assert!(matches!(
            kind("CANCEL_OR_REFUND", "false", Some("PSP1")).kind,
            EventKind::Ignored
        ));
        let second = kind("SECOND_CHARGEBACK", "true", Some("PSP1"));
        assert!(matches!(
            second.kind,
            EventKind::Dispute {
                movement: DisputeMovement::Withdrawal,
                ..
            }
        ));
        assert_eq!(
            second.key().unwrap().as_str(),
            "adyen:dispute_withdrawal:PSP2:second_chargeback"
        );
        assert_eq!(
            kind("CAPTURE", "true", Some("PSP1")).kind,
            EventKind::Ignored
        );
        let manual = Adyen::new("00ff", None, "account", true).unwrap();
        let capture = serde_json::json!({"amount": {"currency": "EUR", "value": 500},
            "eventCode": "CAPTURE", "merchantAccountCode": "Acme", "merchantReference": "order-1",
            "originalReference": "PSP1", "pspReference": "PSP3", "success": "true"});
        assert!(matches!(
            manual
                .normalise(capture.to_string().as_bytes())
                .unwrap()
                .kind,
            EventKind::PaymentSucceeded(_)
        ));
    }
}
