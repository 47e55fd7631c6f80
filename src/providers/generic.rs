//! The generic provider: Standard Webhooks signing (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`), with the payload
//! `{"id","type","created","data":{…}}` in integer minor units.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use http::HeaderMap;

use super::json::{parse_object, Fields};
use super::signature::{check_timestamp, ct_eq, hmac_sha256, Secret};
use super::transfers::{api_amount, error_text, ApiCall, TransferDef};
use super::units::Units;
use super::{boxed, ApiDef, ProviderDef, ProviderEnv};
use super::{single_header, PayloadError, Provider, ProviderTruth, SignatureError};
use crate::domain::{
    DisputeFacts, DisputeMovement, EventKind, NormalisedEvent, PaymentFacts, PaymentStatus,
    ProviderId, Reference, RefundFacts, StateFacts, TransferFacts, TransferState,
};
use crate::payouts::{TransferAnswer, TransferWord};

pub const ID: ProviderId = ProviderId::from_static("generic");

impl ProviderId {
    pub const GENERIC: ProviderId = ID;
}

const SECRETS: &str = "PAYHOOK_GENERIC_SECRETS";

/// payhook's own protocol: ISO 4217 minor units.
const UNITS: Units = super::units::ISO;

pub const DEF: ProviderDef = ProviderDef {
    id: ID,
    env: &[
        (
            SECRETS,
            "Standard Webhooks secrets, space-separated (rotation)",
        ),
        (
            "PAYHOOK_GENERIC_API_URL",
            "reconciliation and payouts: base URL of the generic provider's payment API",
        ),
        (
            "PAYHOOK_GENERIC_API_KEY",
            "reconciliation and payouts: bearer key of the generic provider's API",
        ),
        (
            "PAYHOOK_GENERIC_SOURCE_IPS",
            "addresses or CIDR blocks its webhooks may come from (the source IP API Gateway saw); blank: any",
        ),
        (
            "PAYHOOK_GENERIC_SECRETS_ARN",
            "Secrets Manager secret (name or ARN) holding PAYHOOK_GENERIC_SECRETS, read at run time in every rotation stage (AWSCURRENT, AWSPENDING, AWSPREVIOUS); set instead of PAYHOOK_GENERIC_SECRETS in AWS",
        ),
        (
            "PAYHOOK_GENERIC_API_KEY_ARN",
            "reconciliation and payouts: Secrets Manager secret (name or ARN) holding PAYHOOK_GENERIC_API_KEY (AWSCURRENT), read at run time; set instead of PAYHOOK_GENERIC_API_KEY in AWS",
        ),
    ],
    build,
    source_ips: "PAYHOOK_GENERIC_SOURCE_IPS",
    event_source: None,
    metadata: &["data.metadata", "data"],
    signed_headers: &["webhook-id", "webhook-timestamp", "webhook-signature"],
    secret_arns: &[
        ("PAYHOOK_GENERIC_SECRETS_ARN", "PAYHOOK_GENERIC_SECRETS", true),
        ("PAYHOOK_GENERIC_API_KEY_ARN", "PAYHOOK_GENERIC_API_KEY", false),
    ],
    transfers: Some(TRANSFERS),
    units: &UNITS,
    api: ApiDef {
        url_var: "PAYHOOK_GENERIC_API_URL",
        default_base_url: None,
        key_var: "PAYHOOK_GENERIC_API_KEY",
        basic_auth: false,
    },
};

/// The generic provider's documented transfer API: `POST /transfers`
/// `{"reference","amount","currency","destination","narration"?}` and
/// `GET /transfers/{reference}`, each answering `{"reference","status","amount"?,"currency"?}`
/// with `pending|success|failed|reversed` (404 when it never arrived; the money, when
/// answered, is judged as a webhook's). A POST under a reference the sender already holds is
/// refused with a 4xx `{"error":"duplicate_reference"}`.
pub const TRANSFERS: TransferDef = TransferDef {
    send: |call| {
        let body = serde_json::json!({
            "reference": call.payout.as_str(),
            "amount": api_amount(&UNITS, call.money)?.units,
            "currency": call.money.currency.as_str(),
            "destination": call.destination,
            "narration": call.narration,
        });
        Ok(ApiCall {
            path: "/transfers".into(),
            content_type: "application/json",
            body: body.to_string().into_bytes(),
            idempotency_key: Some(call.payout.to_string()),
        })
    },
    // The generic contract promises a transfer is visible to `GET /transfers/{reference}` within
    // a minute of its POST ending (`PAYHOOK_GENERIC_TRANSFER_VISIBILITY_MS` sets a sender's own).
    visibility_ms: 60_000,
    ask_path: |payout| format!("/transfers/{payout}"),
    read: |body, payout, _| {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        if f.str("reference")? != payout.as_str() {
            return Err(PayloadError::invalid("reference", "is not the payout's"));
        }
        let status = f.str("status")?;
        let state = TransferState::parse(status).ok_or_else(|| {
            PayloadError::invalid("status", "is not pending, success, failed or reversed")
        })?;
        Ok(TransferAnswer::Known(
            TransferWord::new(state, status).with_money(f.opt_money(&UNITS, "amount", "currency")?),
        ))
    },
    held: |_, body| error_text(body, &["error", "code"]).contains("duplicate_reference"),
};

fn build(env: ProviderEnv<'_>) -> super::Built {
    let value = env.get(SECRETS)?;
    boxed(StandardWebhooks::from_env_value(value, env.tolerance_s).map(|scheme| Generic { scheme }))
}

/// Verifies Standard Webhooks signatures with any of several secrets (rotation).
#[derive(Debug, Clone)]
pub struct StandardWebhooks {
    secrets: Vec<Secret>,
    tolerance_s: i64,
}

impl StandardWebhooks {
    /// `secrets` is the space-separated env value: each `whsec_<base64>` (the prefix is optional,
    /// and so is the base64 padding, as the spec's reference libraries accept).
    pub fn from_env_value(value: &str, tolerance_s: i64) -> Result<Self, SignatureError> {
        let secrets = value
            .split_whitespace()
            .map(|s| {
                let b64 = s.strip_prefix("whsec_").unwrap_or(s);
                let unpadded = b64.trim_end_matches('=');
                let bytes = STANDARD_NO_PAD
                    .decode(unpadded)
                    .map_err(|_| SignatureError::BadSecret("not base64".into()))?;
                Secret::new(bytes)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(SignatureError::BadSecret("no secret configured".into()));
        }
        Ok(StandardWebhooks {
            secrets,
            tolerance_s,
        })
    }

    pub fn verify(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now_s: i64,
    ) -> Result<(), SignatureError> {
        let id = single_header(headers, "webhook-id")?;
        let ts_text = single_header(headers, "webhook-timestamp")?;
        let sigs = single_header(headers, "webhook-signature")?;
        let ts: i64 = ts_text
            .parse()
            .map_err(|_| SignatureError::MalformedHeader("webhook-timestamp"))?;
        check_timestamp(ts, now_s, self.tolerance_s)?;
        let candidates: Vec<Vec<u8>> = sigs
            .split(' ')
            .filter_map(|s| s.strip_prefix("v1,"))
            .filter_map(|b64| STANDARD.decode(b64).ok())
            .collect();
        if candidates.is_empty() {
            return Err(SignatureError::MalformedHeader("webhook-signature"));
        }
        for secret in &self.secrets {
            let expected = hmac_sha256(
                secret.bytes(),
                &[id.as_bytes(), b".", ts_text.as_bytes(), b".", body],
            );
            if candidates.iter().any(|c| ct_eq(c, &expected)) {
                return Ok(());
            }
        }
        Err(SignatureError::Mismatch)
    }

    /// Signs like a Standard Webhooks sender: the `webhook-signature` value for the first secret.
    /// Used by `payhook sign`, the demo and tests.
    pub fn sign(&self, id: &str, ts_s: i64, body: &[u8]) -> String {
        let key = self.secrets.first().map(Secret::bytes).unwrap_or_default();
        let mac = hmac_sha256(
            key,
            &[id.as_bytes(), b".", ts_s.to_string().as_bytes(), b".", body],
        );
        format!("v1,{}", STANDARD.encode(mac))
    }
}

/// The generic adapter.
#[derive(Debug, Clone)]
pub struct Generic {
    pub scheme: StandardWebhooks,
}

impl Provider for Generic {
    fn id(&self) -> ProviderId {
        ID
    }

    fn sign(&self, body: &[u8], event_id: &str, now_s: i64) -> Vec<(String, String)> {
        vec![
            ("webhook-id".into(), event_id.to_owned()),
            ("webhook-timestamp".into(), now_s.to_string()),
            (
                "webhook-signature".into(),
                self.scheme.sign(event_id, now_s, body),
            ),
        ]
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now_s: i64) -> Result<(), SignatureError> {
        self.scheme.verify(headers, body, now_s)
    }

    fn normalise(&self, body: &[u8]) -> Result<NormalisedEvent, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        let event_id = f.str("id")?.to_owned();
        let event_type = f.str("type")?.to_owned();
        f.opt_int("created")?;
        let kind = match event_type.as_str() {
            "payment.succeeded" => EventKind::PaymentSucceeded(PaymentFacts {
                reference: f.reference("data.reference")?,
                // Absent: the payment's registered account (or the default) is credited.
                account: f.opt_account("data.account")?,
                money: f.money(&UNITS, "data.amount", "data.currency")?,
            }),
            "payment.processing" => state(&f, PaymentStatus::Processing)?,
            "payment.failed" => state(&f, PaymentStatus::Failed)?,
            "refund.succeeded" => EventKind::RefundSucceeded(refund(&f)?),
            // The refund failed after it succeeded (or before it ever did): credit it back / void it.
            "refund.failed" => EventKind::RefundReversed(refund(&f)?),
            "dispute.funds_withdrawn" => dispute(&f, DisputeMovement::Withdrawal)?,
            "dispute.funds_reinstated" => dispute(&f, DisputeMovement::Reinstatement)?,
            // A payout's transfer (`data.reference` is the reference payhook sent).
            "transfer.succeeded" => transfer(&f, TransferState::Success, "succeeded")?,
            "transfer.failed" => transfer(&f, TransferState::Failed, "failed")?,
            "transfer.reversed" => transfer(&f, TransferState::Reversed, "reversed")?,
            // Anything else is acknowledged and logged, so the provider stops retrying it.
            _ => EventKind::Ignored,
        };
        Ok(NormalisedEvent {
            provider: ProviderId::GENERIC,
            event_id,
            event_type,
            kind,
            transaction_id: None,
        })
    }

    fn api_path(&self, reference: &Reference) -> String {
        format!("/payments/{reference}")
    }

    /// `GET /payments/{reference}` answers `{"status","amount","currency","account"?}` with the
    /// webhook's field rules. `canceled` is final; `failed` (an attempt) is not.
    fn read_api(&self, reference: &Reference, body: &[u8]) -> Result<ProviderTruth, PayloadError> {
        let root = parse_object(body)?;
        let f = Fields::new(&root);
        match f.str("status")? {
            "succeeded" => Ok(ProviderTruth::Succeeded(PaymentFacts {
                reference: reference.clone(),
                account: f.opt_account("account")?,
                money: f.money(&UNITS, "amount", "currency")?,
            })),
            "canceled" => Ok(ProviderTruth::Failed {
                status: "canceled".into(),
            }),
            other => Ok(ProviderTruth::NotFinal {
                status: other.to_owned(),
            }),
        }
    }
}

fn transfer(f: &Fields<'_>, state: TransferState, status: &str) -> Result<EventKind, PayloadError> {
    Ok(EventKind::Transfer(TransferFacts {
        reference: f.reference("data.reference")?,
        state,
        provider_status: status.to_owned(),
        // Compared with the payout's own before the word moves it.
        money: f.opt_money(&UNITS, "data.amount", "data.currency")?,
        // The generic destination is the sender's own shape: nothing to compare.
        recipient: None,
    }))
}

fn refund(f: &Fields<'_>) -> Result<RefundFacts, PayloadError> {
    Ok(RefundFacts {
        refund_reference: f.reference("data.reference")?,
        payment_reference: f.reference("data.payment_reference")?,
        money: f.money(&UNITS, "data.amount", "data.currency")?,
    })
}

/// `data.dispute` (its id), `data.reference` (the disputed payment), `data.amount` and
/// `data.currency`: the money the sender moved for it, fees excluded.
fn dispute(f: &Fields<'_>, movement: DisputeMovement) -> Result<EventKind, PayloadError> {
    Ok(EventKind::Dispute {
        facts: DisputeFacts {
            dispute: f.reference("data.dispute")?,
            payment_reference: f.reference("data.reference")?,
            money: f.money(&UNITS, "data.amount", "data.currency")?,
        },
        movement,
    })
}

fn state(f: &Fields<'_>, to: PaymentStatus) -> Result<EventKind, PayloadError> {
    Ok(EventKind::PaymentState {
        facts: StateFacts {
            reference: f.reference("data.reference")?,
            account: f.opt_account("data.account")?,
            money: f.opt_money(&UNITS, "data.amount", "data.currency")?,
        },
        to,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment.succeeded","created":1764670000,"data":{"reference":"pay_1","account":"wallet_42","amount":125000,"currency":"NGN"}}"#;

    fn headers(id: &str, ts: i64, sig: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("webhook-id", id.to_owned()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", sig.to_owned()),
        ] {
            if let Ok(v) = HeaderValue::from_str(&v) {
                h.insert(k, v);
            }
        }
        h
    }

    #[test]
    fn matches_the_standard_webhooks_reference_vector() -> Result<(), SignatureError> {
        // The example from the Standard Webhooks specification's reference libraries.
        let s = StandardWebhooks::from_env_value(SECRET, 300)?;
        let body = br#"{"test": 2432232314}"#;
        let sig = s.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        Ok(())
    }

    #[test]
    fn verifies_valid_and_rejects_tampered_wrong_secret_stale_and_future(
    ) -> Result<(), SignatureError> {
        let s = StandardWebhooks::from_env_value(SECRET, 300)?;
        let now = 1_764_670_000;
        let sig = s.sign("evt_1", now, BODY);
        assert_eq!(s.verify(&headers("evt_1", now, &sig), BODY, now), Ok(()));
        let tampered = String::from_utf8_lossy(BODY).replace("125000", "925000");
        assert_eq!(
            s.verify(&headers("evt_1", now, &sig), tampered.as_bytes(), now),
            Err(SignatureError::Mismatch)
        );
        let other = StandardWebhooks::from_env_value("whsec_c2Vjb25k", 300)?;
        // Padding is optional: the same key with and without it verifies the same signature.
        let padded = StandardWebhooks::from_env_value("whsec_c2Vjb25kMQ==", 300)?;
        let unpadded = StandardWebhooks::from_env_value("whsec_c2Vjb25kMQ", 300)?;
        assert_eq!(padded.sign("m", 5, b"x"), unpadded.sign("m", 5, b"x"));
        assert!(StandardWebhooks::from_env_value("whsec_c2Vj!!", 300).is_err());
        assert_eq!(
            other.verify(&headers("evt_1", now, &sig), BODY, now),
            Err(SignatureError::Mismatch)
        );
        let old = s.sign("evt_1", now - 301, BODY);
        assert_eq!(
            s.verify(&headers("evt_1", now - 301, &old), BODY, now),
            Err(SignatureError::Stale)
        );
        let future = s.sign("evt_1", now + 301, BODY);
        assert_eq!(
            s.verify(&headers("evt_1", now + 301, &future), BODY, now),
            Err(SignatureError::Future)
        );
        Ok(())
    }

    #[test]
    fn any_of_several_secrets_and_signatures_may_match() -> Result<(), SignatureError> {
        let old = StandardWebhooks::from_env_value("whsec_b2xkb2xk", 300)?;
        let both = StandardWebhooks::from_env_value(&format!("whsec_b2xkb2xk {SECRET}"), 300)?;
        let new = StandardWebhooks::from_env_value(SECRET, 300)?;
        let now = 1_764_670_000;
        let sig = new.sign("evt_1", now, BODY);
        assert_eq!(both.verify(&headers("evt_1", now, &sig), BODY, now), Ok(()));
        let list = format!("v1,AAAA {} v1a,ignored", sig);
        assert_eq!(
            both.verify(&headers("evt_1", now, &list), BODY, now),
            Ok(())
        );
        assert_eq!(
            old.verify(&headers("evt_1", now, &sig), BODY, now),
            Err(SignatureError::Mismatch)
        );
        Ok(())
    }

    #[test]
    fn maps_the_contract_payload() -> Result<(), PayloadError> {
        let ev = Generic {
            scheme: StandardWebhooks {
                secrets: Vec::new(),
                tolerance_s: 300,
            },
        }
        .normalise(BODY)?;
        assert_eq!(
            ev.key().map(|k| k.to_string()).as_deref(),
            Some("generic:payment:pay_1")
        );
        match ev.kind {
            EventKind::PaymentSucceeded(p) => {
                assert_eq!(p.money.amount.get(), 125_000);
                assert_eq!(p.money.currency.as_str(), "NGN");
                assert_eq!(p.account.as_ref().map(|a| a.as_str()), Some("wallet_42"));
            }
            other => return Err(PayloadError::invalid("kind", format!("{other:?}"))),
        }
        Ok(())
    }

    #[test]
    fn bad_fields_are_named() {
        let g = Generic {
            scheme: StandardWebhooks {
                secrets: Vec::new(),
                tolerance_s: 300,
            },
        };
        let cases = [
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"reference":"p","account":"a","amount":1.5,"currency":"NGN"}}"#,
                "data.amount",
            ),
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"reference":"p","account":"a","amount":0,"currency":"NGN"}}"#,
                "data.amount",
            ),
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"reference":"p","account":"a","amount":-4,"currency":"NGN"}}"#,
                "data.amount",
            ),
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"reference":"p","account":"a","amount":"5","currency":"NGN"}}"#,
                "data.amount",
            ),
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"reference":"p","account":"a","amount":5,"currency":"XXQ"}}"#,
                "data.currency",
            ),
            (
                r#"{"id":"e","type":"payment.succeeded","data":{"account":"a","amount":5,"currency":"NGN"}}"#,
                "data.reference",
            ),
            (r#"{"type":"payment.succeeded","data":{}}"#, "id"),
        ];
        for (body, field) in cases {
            match g.normalise(body.as_bytes()) {
                Err(PayloadError::Invalid { field: f, .. }) => assert_eq!(f, field, "{body}"),
                other => panic!("{body}: expected invalid {field}, got {other:?}"),
            }
        }
    }
}
