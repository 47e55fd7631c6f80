//! Razorpay: `X-Razorpay-Signature` is the hex HMAC-SHA256 of the raw body keyed by the
//! webhook secret (several for rotation), `x-razorpay-event-id` names the event, and the body
//! is `{"event","payload":{"payment":{"entity":{…}},"refund":{"entity":{…}}},…}` with amounts in
//! the currency's minor units (paise). The account comes from the payment's `notes.<key>`.
//!
//! A payment is keyed by its id (`pay_…`): `payment.captured` and `order.paid` (which carries
//! the same payment entity) credit it once between them. `payment.failed` fails it (a Razorpay
//! payment id is one attempt: a retry by the customer is a new payment id). `refund.processed`
//! debits a refund (`rfnd_…`) of its `payment_id`; `refund.failed` voids it, or credits it back
//! if it had been applied. Reconciliation asks `GET /v1/payments/{id}` with HTTP basic auth
//! (`PAYHOOK_RAZORPAY_API_KEY` = `key_id:key_secret`) and reads the entity with the same code.

use http::HeaderMap;
use serde_json::Value;

use super::json::{parse_object, Fields};
use super::signature::{ct_eq, hmac_sha256, Secret};
use super::units::Units;
use super::{boxed, ApiDef, ProviderDef, ProviderEnv};
use super::{single_header, PayloadError, Provider, ProviderTruth, SignatureError};
use crate::domain::{
    AccountId, EventKind, NormalisedEvent, PaymentFacts, PaymentStatus, ProviderId, Reference,
    RefundFacts, StateFacts,
};

pub const ID: ProviderId = ProviderId::from_static("razorpay");

impl ProviderId {
    pub const RAZORPAY: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_RAZORPAY_SECRETS";
const ACCOUNT_KEY: &str = "PAYHOOK_RAZORPAY_ACCOUNT_KEY";

/// Razorpay's amounts are "in the currency subunit" (paise); it documents no currency whose
/// subunit departs from ISO's.
const UNITS: Units = super::units::ISO;

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (SECRETS, "Razorpay webhook secrets, space-separated (rotation)"),
        (ACCOUNT_KEY, "key of the account in the payment's notes (default account)"),
        (
            "PAYHOOK_RAZORPAY_API_URL",
            "reconciliation and payouts: Razorpay API base URL (default https://api.razorpay.com)",
        ),
        (
            "PAYHOOK_RAZORPAY_API_KEY",
            "reconciliation: Razorpay key_id:key_secret (HTTP basic auth)",
        ),
        (
            "PAYHOOK_RAZORPAY_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_RAZORPAY_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_RAZORPAY_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_RAZORPAY_SECRETS in AWS",
        ),
        (
            "PAYHOOK_RAZORPAY_API_KEY_ARN",
            "reconciliation and payouts: Secrets Manager secret (name or ARN) holding PAYHOOK_RAZORPAY_API_KEY (AWSCURRENT), read at run time; set instead of PAYHOOK_RAZORPAY_API_KEY in AWS",
        ),
    ],
    build,
    source_ips: "PAYHOOK_RAZORPAY_SOURCE_IPS",
    event_source: None,
    metadata: &["payload.payment.entity.notes", "payload.refund.entity.notes", "payload.order.entity.notes"],
    signed_headers: &[HEADER, EVENT_ID],
    secret_arns: &[
        ("PAYHOOK_RAZORPAY_SECRETS_ARN", SECRETS, true),
        ("PAYHOOK_RAZORPAY_API_KEY_ARN", "PAYHOOK_RAZORPAY_API_KEY", false),
    ],
    // Razorpay payouts go through RazorpayX, a separate product: not served.
    transfers: None,
    units: &UNITS,
    api: ApiDef {
        url_var: "PAYHOOK_RAZORPAY_API_URL",
        default_base_url: Some("https://api.razorpay.com"),
        key_var: "PAYHOOK_RAZORPAY_API_KEY",
        basic_auth: true,
    },
};

fn build(env: ProviderEnv<'_>) -> super::Built {
    let account_key = match env.metadata_key(ACCOUNT_KEY) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    boxed(Razorpay::from_env_value(env.get(SECRETS)?, &account_key))
}

/// The signature header.
pub const HEADER: &str = "x-razorpay-signature";
/// The event id header.
pub const EVENT_ID: &str = "x-razorpay-event-id";

#[derive(Debug, Clone)]
pub struct Razorpay {
    secrets: Vec<Secret>,
    account_key: String,
}

impl Razorpay {
    pub fn from_env_value(value: &str, account_key: &str) -> Result<Self, SignatureError> {
        let secrets = value
            .split_whitespace()
            .map(|s| Secret::new(s.as_bytes().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        Ok(Razorpay {
            secrets,
            account_key: account_key.to_owned(),
        })
    }

    fn signature(&self, body: &[u8]) -> String {
        let key = self.secrets.first().map(Secret::bytes).unwrap_or_default();
        hex::encode(hmac_sha256(key, &[body]))
    }

    /// `payload.payment.entity` as a payment: captured credits; anything else is the state it
    /// names, or nothing.
    fn payment(&self, f: &Fields<'_>, entity: &str) -> Result<EventKind, PayloadError> {
        let path = |field: &str| format!("{entity}.{field}");
        let reference = f.reference(&path("id"))?;
        let money = f.money(&UNITS, &path("amount"), &path("currency"))?;
        let account = self.account(f, &path("notes"))?;
        Ok(match f.str(&path("status"))? {
            "captured" | "refunded" => EventKind::PaymentSucceeded(PaymentFacts {
                reference,
                account,
                money,
            }),
            "failed" => EventKind::PaymentState {
                facts: StateFacts {
                    reference,
                    account,
                    money: Some(money),
                },
                to: PaymentStatus::Failed,
            },
            _ => EventKind::Ignored,
        })
    }

    /// `notes.<key>`: Razorpay sends `notes` as an object, or `[]` when there are none.
    fn account(&self, f: &Fields<'_>, notes: &str) -> Result<Option<AccountId>, PayloadError> {
        match f.get(notes) {
            Some(Value::Object(_)) => f.opt_account(&format!("{notes}.{}", self.account_key)),
            _ => Ok(None),
        }
    }
}

fn refund(f: &Fields<'_>) -> Result<RefundFacts, PayloadError> {
    Ok(RefundFacts {
        refund_reference: f.reference("payload.refund.entity.id")?,
        payment_reference: f.reference("payload.refund.entity.payment_id")?,
        money: f.money(
            &UNITS,
            "payload.refund.entity.amount",
            "payload.refund.entity.currency",
        )?,
    })
}

impl Provider for Razorpay {
    fn id(&self) -> ProviderId {
        ID
    }

    fn sign(&self, body: &[u8], event_id: &str, _now_s: i64) -> Vec<(String, String)> {
        vec![
            (HEADER.into(), self.signature(body)),
            (EVENT_ID.into(), event_id.to_owned()),
        ]
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], _now_s: i64) -> Result<(), SignatureError> {
        let value = single_header(headers, HEADER)?;
        let sig = hex::decode(value.trim())
            .ok()
            .filter(|s| s.len() == 32)
            .ok_or(SignatureError::MalformedHeader(HEADER))?;
        if self
            .secrets
            .iter()
            .any(|s| ct_eq(&sig, &hmac_sha256(s.bytes(), &[body])))
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
        if !matches!(f.get("payload"), Some(Value::Object(_))) {
            return Err(PayloadError::invalid("payload", "must be an object"));
        }
        let kind = match event_type.as_str() {
            "payment.captured" | "order.paid" | "payment.failed" => {
                self.payment(&f, "payload.payment.entity")?
            }
            "refund.processed" => EventKind::RefundSucceeded(refund(&f)?),
            "refund.failed" => EventKind::RefundReversed(refund(&f)?),
            // Anything else is acknowledged and logged, so Razorpay stops retrying it.
            _ => EventKind::Ignored,
        };
        // The body carries no event id (it is the `x-razorpay-event-id` header, which the log
        // does not keep): the event and its entity name the delivery.
        let entity = ["payload.refund.entity.id", "payload.payment.entity.id"]
            .into_iter()
            .find_map(|p| f.get(p).and_then(Value::as_str));
        let event_id = match entity {
            Some(id) => format!("{event_type}:{id}"),
            None => event_type.clone(),
        };
        Ok(NormalisedEvent {
            provider: ID,
            event_id,
            event_type,
            kind,
            transaction_id: None,
        })
    }

    fn api_path(&self, reference: &Reference) -> String {
        format!("/v1/payments/{reference}")
    }

    /// `GET /v1/payments/{id}` answers the payment entity the webhooks carry. `captured` (and
    /// `refunded`: captured first) is paid; `failed` is final for that payment id; `created` and
    /// `authorized` are not final.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError> {
        let root = parse_object(body)?;
        let wrapped = serde_json::json!({ "entity": root });
        let f = Fields::new(&wrapped);
        match self.payment(&f, "entity")? {
            kind @ EventKind::PaymentSucceeded(_) => super::succeeded(kind, reference),
            EventKind::PaymentState { .. } => Ok(ProviderTruth::Failed {
                status: "failed".into(),
            }),
            _ => Ok(ProviderTruth::NotFinal {
                status: f.str("entity.status")?.to_owned(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Currency;

    const SECRET: &str = "razorpay_webhook_secret_for_tests";
    pub(crate) const CAPTURED: &str = r#"{"entity":"event","account_id":"acc_BFQ7uQEaa7j2z7","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_DESlfW9H8K9uqM","entity":"payment","amount":50000,"currency":"INR","status":"captured","order_id":"order_DESlLckIVRkHWj","method":"upi","notes":{"account":"wallet_42"}}}},"created_at":1567674606}"#;

    fn rp() -> Razorpay {
        Razorpay::from_env_value(&format!("old_secret {SECRET}"), "account").unwrap()
    }

    fn headers(sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HEADER, sig.parse().unwrap());
        h
    }

    #[test]
    fn verifies_the_hex_hmac_of_the_raw_body_with_any_secret() {
        let body = CAPTURED.as_bytes();
        let good = hex::encode(hmac_sha256(SECRET.as_bytes(), &[body]));
        assert!(rp().verify(&headers(&good), body, 0).is_ok());
        let tampered = CAPTURED.replace("50000", "50001");
        assert_eq!(
            rp().verify(&headers(&good), tampered.as_bytes(), 0),
            Err(SignatureError::Mismatch)
        );
        let wrong = hex::encode(hmac_sha256(b"another", &[body]));
        assert_eq!(
            rp().verify(&headers(&wrong), body, 0),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            rp().verify(&headers("zz"), body, 0),
            Err(SignatureError::MalformedHeader(HEADER))
        );
        assert_eq!(
            rp().verify(&HeaderMap::new(), body, 0),
            Err(SignatureError::MissingHeader(HEADER))
        );
    }

    #[test]
    fn captured_and_order_paid_credit_the_same_payment_failed_fails_it() {
        let captured = rp().normalise(CAPTURED.as_bytes()).unwrap();
        let EventKind::PaymentSucceeded(p) = &captured.kind else {
            panic!("{captured:?}")
        };
        assert_eq!(p.reference.as_str(), "pay_DESlfW9H8K9uqM");
        assert_eq!(p.account.as_ref().map(AccountId::as_str), Some("wallet_42"));
        assert_eq!(p.money.amount.get(), 50_000);
        assert_eq!(p.money.currency, Currency::parse("INR").unwrap());
        let order = CAPTURED.replace("payment.captured", "order.paid");
        assert_eq!(
            rp().normalise(order.as_bytes()).unwrap().key(),
            captured.key()
        );
        let failed = CAPTURED
            .replace("payment.captured", "payment.failed")
            .replace(r#""status":"captured""#, r#""status":"failed""#);
        assert!(matches!(
            rp().normalise(failed.as_bytes()).unwrap().kind,
            EventKind::PaymentState {
                to: PaymentStatus::Failed,
                ..
            }
        ));
        // No notes: `[]`, no account.
        let bare = CAPTURED.replace(r#"{"account":"wallet_42"}"#, "[]");
        let EventKind::PaymentSucceeded(p) = rp().normalise(bare.as_bytes()).unwrap().kind else {
            panic!()
        };
        assert_eq!(p.account, None);
    }

    #[test]
    fn refunds_are_debited_and_a_failed_refund_reverses() {
        let body = r#"{"entity":"event","event":"refund.processed","contains":["refund","payment"],"payload":{"refund":{"entity":{"id":"rfnd_FP8QHiV938haTz","entity":"refund","amount":20000,"currency":"INR","payment_id":"pay_DESlfW9H8K9uqM","status":"processed"}}},"created_at":1567674606}"#;
        let EventKind::RefundSucceeded(r) = rp().normalise(body.as_bytes()).unwrap().kind else {
            panic!()
        };
        assert_eq!(
            (
                r.refund_reference.as_str(),
                r.payment_reference.as_str(),
                r.money.amount.get()
            ),
            ("rfnd_FP8QHiV938haTz", "pay_DESlfW9H8K9uqM", 20_000)
        );
        let failed = body.replace("refund.processed", "refund.failed");
        assert!(matches!(
            rp().normalise(failed.as_bytes()).unwrap().kind,
            EventKind::RefundReversed(_)
        ));
    }

    #[test]
    fn the_payments_api_reads_with_the_webhook_mapping() {
        let reference = Reference::parse("pay_DESlfW9H8K9uqM").unwrap();
        let v: Value = serde_json::from_str(CAPTURED).unwrap();
        let entity = v["payload"]["payment"]["entity"].to_string();
        assert!(matches!(
            rp().read_api(&reference, entity.as_bytes()).unwrap(),
            ProviderTruth::Succeeded(_)
        ));
        let authorized = entity.replace("captured", "authorized");
        assert!(matches!(
            rp().read_api(&reference, authorized.as_bytes()).unwrap(),
            ProviderTruth::NotFinal { .. }
        ));
        let failed = entity.replace("captured", "failed");
        assert!(matches!(
            rp().read_api(&reference, failed.as_bytes()).unwrap(),
            ProviderTruth::Failed { .. }
        ));
    }
}
