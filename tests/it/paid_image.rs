//! A credit's first write no longer reads the payment back (`ALL_NEW`): the record it answers is
//! the item it replaced (`ALL_OLD`) with the write's own parts applied (#44). These tests hold
//! that record to the payment as stored, read afterwards, in every shape of the PAID write: a
//! payment heard of first, one registered before, one with debits parked on it, one recovering
//! from FAILED, with and without the event's account, with and without the credit's claim. On
//! dynalite here; `moto.rs` runs the same check on moto, which answers `ALL_OLD` its own way.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use payhook::domain::{
    AccountId, Currency, Fingerprint, IdempotencyKey, Money, PaymentFacts, PaymentStatus,
    ProviderId, Reference, StateFacts,
};
use payhook::dynamodb::DynamoStore;
use payhook::idempotency::OwnerToken;
use payhook::payments::parked::ParkedDebit;
use payhook::payments::{
    ExpectedPayment, NewCredit, NewHostClaim, PaidOutcome, PaymentRecord, Payments,
};

const GENERIC: ProviderId = ProviderId::GENERIC;

fn money(amount: i64) -> Money {
    Money::new(amount, Currency::parse("NGN").unwrap()).unwrap()
}

fn facts(reference: &str, account: Option<&str>, amount: i64) -> PaymentFacts {
    PaymentFacts {
        reference: Reference::parse(reference).unwrap(),
        account: account.map(|a| AccountId::parse(a).unwrap()),
        money: money(amount),
    }
}

/// The whole payment as [`View::Credit`] keeps it: without the history (and the disputes read
/// from it), the dispute keys and the refunds' claims; the refund key sets only when debits
/// are parked.
fn as_credit_reads_it(mut whole: PaymentRecord) -> PaymentRecord {
    whole.history.clear();
    whole.disputes.clear();
    whole.dispute_keys.clear();
    whole.held_claims.clear();
    if whole.parked_debits.is_empty() {
        whole.refund_keys.clear();
        whole.reversed_refund_keys.clear();
    }
    whole
}

/// Pays `facts` and holds the record the write answered to the payment read afterwards.
async fn paid_is_as_stored(
    store: &DynamoStore,
    facts: &PaymentFacts,
    default_account: Option<&AccountId>,
    claimed: bool,
) -> PaymentRecord {
    let key = IdempotencyKey::from_stored(format!("generic:payment:{}", facts.reference));
    let token = OwnerToken::generate();
    let fp = Fingerprint::from_stored(format!(
        r#"{{"op":"payment","reference":"{}"}}"#,
        facts.reference
    ));
    let new = NewCredit {
        shard: 3,
        default_account,
        claim: claimed.then_some(NewHostClaim {
            token: &token,
            lease_ms: 60_000,
            fingerprint: &fp,
        }),
    };
    let outcome = store.mark_paid(GENERIC, facts, &key, new).await.unwrap();
    let PaidOutcome::Applied(answered) = outcome else {
        panic!("{}: not applied: {outcome:?}", facts.reference)
    };
    let stored = store
        .payment(GENERIC, &facts.reference)
        .await
        .unwrap()
        .expect("the payment is stored");
    assert_eq!(answered, as_credit_reads_it(stored), "{}", facts.reference);
    answered
}

/// Every shape of the PAID write on `store`.
pub async fn every_paid_write_answers_the_payment_as_stored(store: &DynamoStore) {
    // GIVEN a payment heard of first, with its account: a new item, nothing returned
    let fresh = paid_is_as_stored(store, &facts("img_fresh", Some("w_a"), 1_000), None, true).await;
    // THEN the record is the claim's: APPLYING, listed as posting, the shard it was given
    assert_eq!(fresh.status, PaymentStatus::Paid);
    assert!(fresh.posting && fresh.claim.is_some());
    assert_eq!(fresh.ledger_shard, Some(3));
    assert_eq!(fresh.account.as_ref().map(AccountId::as_str), Some("w_a"));

    // GIVEN one registered (PENDING with account and money) paid by an event without its
    // account, no claim: the registered account and creation time stay
    let registered = ExpectedPayment {
        provider: GENERIC,
        reference: Reference::parse("img_registered").unwrap(),
        account: AccountId::parse("w_reg").unwrap(),
        money: money(2_000),
    };
    store.register(&registered).await.unwrap();
    let before = store
        .payment(GENERIC, &registered.reference)
        .await
        .unwrap()
        .unwrap();
    let paid = paid_is_as_stored(store, &facts("img_registered", None, 2_000), None, false).await;
    assert_eq!(paid.account.as_ref().map(AccountId::as_str), Some("w_reg"));
    assert_eq!(paid.created_at_ms, before.created_at_ms);
    assert!(!paid.posting && paid.claim.is_none());

    // GIVEN one with a debit parked before it was paid: the credit's record carries it
    let debit = ParkedDebit::parse("NGN:300:generic:refund:img_parked_r").unwrap();
    store
        .park_debit(GENERIC, &Reference::parse("img_parked").unwrap(), &debit)
        .await
        .unwrap();
    let parked =
        paid_is_as_stored(store, &facts("img_parked", Some("w_p"), 3_000), None, true).await;
    assert_eq!(parked.parked_debits, vec![debit]);

    // GIVEN one without an account anywhere but the default offered
    let default = AccountId::parse("w_default").unwrap();
    let defaulted = paid_is_as_stored(
        store,
        &facts("img_default", None, 4_000),
        Some(&default),
        true,
    )
    .await;
    assert_eq!(defaulted.account, Some(default));

    // GIVEN one FAILED before the credit arrives: recovered, its earlier fields kept
    let failed = StateFacts {
        reference: Reference::parse("img_failed").unwrap(),
        account: Some(AccountId::parse("w_f").unwrap()),
        money: Some(money(5_000)),
    };
    store
        .move_state(GENERIC, &failed, PaymentStatus::Failed)
        .await
        .unwrap();
    let recovered =
        paid_is_as_stored(store, &facts("img_failed", Some("w_f"), 5_000), None, true).await;
    assert_eq!(recovered.status, PaymentStatus::Paid);
}

#[tokio::test]
async fn a_credits_first_write_answers_the_payment_as_stored_on_dynalite() {
    let store = common::store("paidimage").await;
    every_paid_write_answers_the_payment_as_stored(&store).await;
}
