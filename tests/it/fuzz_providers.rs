//! Property tests of the provider adapters (a bounded pass that runs in seconds):
//! - arbitrary bytes and headers never make `verify` or `normalise` panic;
//! - whatever verifies was signed with a configured secret: a signed random body verifies, and
//!   the same body with any one byte changed does not;
//! - an Adyen item verifies with the signature its key gives it, and not once any one signed
//!   field changes; splitting arbitrary bytes into a batch never panics;
//! - Flutterwave's decimal amounts convert to exactly the minor units their digits say.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use http::{HeaderMap, HeaderName, HeaderValue};
use payhook::domain::EventKind;
use payhook::providers::adyen::Adyen;
use payhook::providers::flutterwave::{Flutterwave, ReferenceField};
use payhook::providers::generic::{Generic, StandardWebhooks};
use payhook::providers::paystack::Paystack;
use payhook::providers::razorpay::Razorpay;
use payhook::providers::stripe::Stripe;
use payhook::providers::Provider;
use proptest::prelude::*;

const NOW: i64 = 1_764_670_000;
const CASES: u32 = 256;

fn stripe() -> Stripe {
    Stripe::from_env_value("whsec_fuzz_current whsec_fuzz_previous", 300, "account").unwrap()
}

fn paystack() -> Paystack {
    Paystack::from_env_value("sk_test_fuzz_current sk_test_fuzz_previous", "account").unwrap()
}

fn flutterwave() -> Flutterwave {
    Flutterwave::from_env_values(
        Some("fuzz-v3-hash"),
        Some("fuzz-v4-secret"),
        ReferenceField::TxRef,
        "account",
    )
    .unwrap()
}

fn generic() -> Generic {
    Generic {
        scheme: StandardWebhooks::from_env_value("whsec_ZnV6ei1nZW5lcmlj", 300).unwrap(),
    }
}

fn adyen() -> Adyen {
    Adyen::new(
        "0F1E2D3C4B5A69788796A5B4C3D2E1F00F1E2D3C4B5A69788796A5B4C3D2E1F0 A1B2",
        None,
        "account",
        false,
    )
    .unwrap()
}

fn adapters() -> Vec<Box<dyn Provider>> {
    vec![
        Box::new(stripe()),
        Box::new(paystack()),
        Box::new(flutterwave()),
        Box::new(generic()),
        Box::new(Razorpay::from_env_value("fuzz-razorpay-secret", "account").unwrap()),
        Box::new(adyen()),
    ]
}

/// Header names the adapters read, plus noise.
const NAMES: &[&str] = &[
    "stripe-signature",
    "x-paystack-signature",
    "flutterwave-signature",
    "verif-hash",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-other",
];

fn headers_from(pairs: &[(usize, Vec<u8>)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (i, value) in pairs {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            h.append(HeaderName::from_static(NAMES[i % NAMES.len()]), v);
        }
    }
    h
}

/// Header values that look like signatures more often than random bytes would.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        "t=[0-9]{0,12},v1=[0-9a-f]{0,70}(,v1=[0-9a-f]{64})?".prop_map(String::into_bytes),
        "[0-9a-fA-F]{0,130}".prop_map(String::into_bytes),
        "[A-Za-z0-9+/=]{0,60}".prop_map(String::into_bytes),
        "v1,[A-Za-z0-9+/=]{0,50}( v1,[A-Za-z0-9+/=]{44})?".prop_map(String::into_bytes),
    ]
}

/// Bodies: random bytes, or JSON shaped like the providers' payloads with random leaves.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        "-?[0-9]{1,25}(\\.[0-9]{0,8})?([eE][-+]?[0-9]{1,3})?",
        "\"[ -~]{0,12}\"",
        Just("{}".to_owned()),
        Just("[]".to_owned()),
    ];
    let kinds = prop_oneof![
        Just("charge.success"),
        Just("refund.processed"),
        Just("charge.completed"),
        Just("payment_intent.succeeded"),
        Just("charge.refunded"),
        Just("refund.created"),
        Just("payment.succeeded"),
    ];
    let shaped = (kinds, proptest::collection::vec(leaf, 8)).prop_map(|(kind, l)| {
        format!(
            r#"{{"id":"evt_1","event":"{kind}","type":"{kind}","data":{{"id":{},"status":{},"reference":{},"tx_ref":{},"amount":{},"currency":{},"metadata":{{"account":{}}},"meta":{{"account":"wallet_1"}},"transaction_reference":"t1","refund_reference":"r1","object":{{"id":"pi_1","object":"payment_intent","amount_received":{},"currency":"usd","metadata":{{"account":"a"}}}}}}}}"#,
            l[0], l[1], l[2], l[3], l[4], l[5], l[6], l[7]
        )
        .into_bytes()
    });
    prop_oneof![proptest::collection::vec(any::<u8>(), 0..400), shaped]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_never_panics(
        pairs in proptest::collection::vec((any::<usize>(), header_value()), 0..6),
        body in body(),
        now in any::<i64>(),
    ) {
        let headers = headers_from(&pairs);
        for a in adapters() {
            let _ = a.verify(&headers, &body, now);
            let _ = a.normalise(&body);
            let _ = a.batch(&body);
        }
    }

    #[test]
    fn adyen_items_verify_and_any_changed_signed_field_does_not(
        psp in "[A-Z0-9]{16}",
        merchant in "\\PC{0,40}",
        value in 0i64..1_000_000_000_000,
        code in prop_oneof![Just("AUTHORISATION"), Just("REFUND"), Just("CHARGEBACK")],
        success in any::<bool>(),
        field in 0usize..6,
    ) {
        let a = adyen();
        let mut item = serde_json::json!({"amount": {"currency": "EUR", "value": value},
            "eventCode": code, "merchantAccountCode": "FuzzECOM", "merchantReference": merchant,
            "pspReference": psp, "success": success.to_string(), "additionalData": {}});
        item["additionalData"]["hmacSignature"] = serde_json::Value::from(a.sign_item(&item));
        prop_assert_eq!(a.verify(&HeaderMap::new(), item.to_string().as_bytes(), NOW), Ok(()));
        let mut changed = item.clone();
        match field {
            0 => changed["pspReference"] = format!("{psp}X").into(),
            1 => changed["merchantReference"] = format!("{merchant}x").into(),
            2 => changed["amount"]["value"] = (value + 1).into(),
            3 => changed["amount"]["currency"] = "USD".into(),
            4 => changed["success"] = (!success).to_string().into(),
            _ => changed["originalReference"] = "ORIGINAL".into(),
        }
        prop_assert!(a.verify(&HeaderMap::new(), changed.to_string().as_bytes(), NOW).is_err());
    }

    #[test]
    fn random_headers_never_verify(pairs in proptest::collection::vec((any::<usize>(), header_value()), 0..6), body in body()) {
        let headers = headers_from(&pairs);
        for a in adapters() {
            prop_assert!(a.verify(&headers, &body, NOW).is_err(), "{:?} accepted unsigned input", a.id());
        }
    }

    #[test]
    fn signed_bodies_verify_and_any_changed_byte_does_not(
        body in proptest::collection::vec(any::<u8>(), 1..300),
        at in any::<usize>(),
        flip in 1u8..=255,
    ) {
        let mut changed = body.clone();
        let i = at % changed.len();
        changed[i] ^= flip;

        let s = stripe();
        let h = one("stripe-signature", &s.sign(NOW, &body));
        prop_assert_eq!(s.verify(&h, &body, NOW), Ok(()));
        prop_assert!(s.verify(&h, &changed, NOW).is_err());

        let p = paystack();
        let h = one("x-paystack-signature", &p.sign(&body));
        prop_assert_eq!(p.verify(&h, &body, NOW), Ok(()));
        prop_assert!(p.verify(&h, &changed, NOW).is_err());

        let f = flutterwave();
        let h = one("flutterwave-signature", &f.sign(&body));
        prop_assert_eq!(f.verify(&h, &body, NOW), Ok(()));
        prop_assert!(f.verify(&h, &changed, NOW).is_err());
    }

    #[test]
    fn a_changed_signature_byte_does_not_verify(body in proptest::collection::vec(any::<u8>(), 0..200), at in any::<usize>()) {
        let p = paystack();
        let mut sig = p.sign(&body).into_bytes();
        let i = at % sig.len();
        sig[i] = if sig[i] == b'0' { b'1' } else { b'0' };
        let h = one("x-paystack-signature", std::str::from_utf8(&sig).unwrap());
        prop_assert!(p.verify(&h, &body, NOW).is_err());
    }

    #[test]
    fn flutterwave_decimals_are_exact(int in 0u64..100_000_000_000, frac in "[0-9]{0,4}", currency in prop_oneof![Just("NGN"), Just("JPY"), Just("KWD")]) {
        let text = if frac.is_empty() { int.to_string() } else { format!("{int}.{frac}") };
        let body = format!(
            r#"{{"event":"charge.completed","data":{{"id":1,"tx_ref":"r1","amount":{text},"currency":"{currency}","status":"successful","meta":{{"account":"wallet_1"}}}}}}"#
        );
        let exp: usize = match currency { "JPY" => 0, "KWD" => 3, _ => 2 };
        let significant = frac.trim_end_matches('0');
        // The expected minor units, by string arithmetic alone.
        let expected = if significant.len() > exp {
            None
        } else {
            let padded = format!("{int}{significant:0<exp$}");
            padded.parse::<i64>().ok().filter(|v| *v > 0)
        };
        match (flutterwave().normalise(body.as_bytes()).map(|e| e.kind), expected) {
            (Ok(EventKind::PaymentSucceeded(p)), Some(v)) => prop_assert_eq!(p.money.amount.get(), v),
            (Err(_), None) => {}
            (got, want) => prop_assert!(false, "{text} {currency}: got {got:?}, want {want:?}"),
        }
    }
}

fn one(name: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        HeaderName::from_static(name),
        HeaderValue::from_str(value).unwrap(),
    );
    h
}
