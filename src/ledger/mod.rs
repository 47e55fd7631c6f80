//! Payments and account postings. Each step is idempotent under the operation's key on its own,
//! so a retry after a crash between any two writes finishes the work and never repeats it:
//!
//! * a payment transition records the key that moved it (`paid_key`, `refund_keys`) in the same
//!   conditional write, so "condition failed and the key is ours" means *already done by us*;
//! * a ledger entry is keyed by the idempotency key and written with `attribute_not_exists`;
//! * balances are derived from the entries, so no bare `ADD` can ever be repeated.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::domain::{
    AccountId, Currency, IdempotencyKey, Money, PaymentFacts, PaymentStatus, ProviderId,
    Reference, RefundFacts, StateFacts,
};
use crate::store::StoreError;

/// A payment as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PaymentRecord {
    pub provider: ProviderId,
    pub reference: Reference,
    pub status: PaymentStatus,
    pub account: Option<AccountId>,
    pub amount_minor: Option<i64>,
    pub currency: Option<Currency>,
    pub refunded_minor: i64,
    pub refund_keys: Vec<String>,
    pub paid_key: Option<String>,
    pub history: Vec<HistoryEntry>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

/// One transition, appended in the same write that makes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryEntry {
    pub at_ms: i64,
    pub status: PaymentStatus,
    pub note: String,
}

/// A money field that differs from what the payment already holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub field: &'static str,
    pub stored: String,
    pub received: String,
}

/// Compares what an event says with what the payment holds; absent stored fields match anything.
pub fn mismatch(
    existing: &PaymentRecord,
    account: Option<&AccountId>,
    money: Option<&Money>,
) -> Option<Mismatch> {
    let differ = |field: &'static str, stored: Option<String>, received: Option<String>| {
        match (stored, received) {
            (Some(s), Some(r)) if s != r => Some(Mismatch { field, stored: s, received: r }),
            _ => None,
        }
    };
    differ("account", existing.account.as_ref().map(|a| a.to_string()), account.map(|a| a.to_string()))
        .or_else(|| {
            differ(
                "currency",
                existing.currency.map(|c| c.to_string()),
                money.map(|m| m.currency.to_string()),
            )
        })
        .or_else(|| {
            differ(
                "amount",
                existing.amount_minor.map(|a| a.to_string()),
                money.map(|m| m.amount.get().to_string()),
            )
        })
}

/// A payment the merchant expects, registered PENDING before the customer pays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedPayment {
    pub provider: ProviderId,
    pub reference: Reference,
    pub account: AccountId,
    pub money: Money,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterOutcome {
    Created(PaymentRecord),
    /// Registered before with the same fields: registering is idempotent.
    Exists(PaymentRecord),
    /// Registered before (or already seen by a webhook) with other fields.
    Mismatch(Mismatch, PaymentRecord),
}

/// Outcome of moving a payment to PAID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaidOutcome {
    Applied(PaymentRecord),
    /// This key moved it earlier (an attempt that crashed before finalize): continue.
    AlreadyApplied(PaymentRecord),
    /// The payment holds other money: nothing moved.
    Mismatch(Mismatch, PaymentRecord),
    /// FAILED (or paid under another key): a human must look.
    NotPayable(PaymentRecord),
}

/// Decides a failed PAID transition from the item that made it fail.
pub fn judge_paid(existing: Option<PaymentRecord>, facts: &PaymentFacts, key: &IdempotencyKey) -> PaidOutcome {
    let Some(existing) = existing else {
        // The condition failed yet nothing is there: only a concurrent delete could do that, and
        // payments are never deleted. Treat as not payable so a human looks rather than credit.
        return PaidOutcome::NotPayable(placeholder(facts));
    };
    if let Some(m) = mismatch(&existing, Some(&facts.account), Some(&facts.money)) {
        return PaidOutcome::Mismatch(m, existing);
    }
    if existing.status.is_paid() && existing.paid_key.as_deref() == Some(key.as_str()) {
        return PaidOutcome::AlreadyApplied(existing);
    }
    PaidOutcome::NotPayable(existing)
}

fn placeholder(facts: &PaymentFacts) -> PaymentRecord {
    PaymentRecord {
        provider: ProviderId::Generic,
        reference: facts.reference.clone(),
        status: PaymentStatus::Pending,
        account: Some(facts.account.clone()),
        amount_minor: Some(facts.money.amount.get()),
        currency: Some(facts.money.currency),
        refunded_minor: 0,
        refund_keys: Vec::new(),
        paid_key: None,
        history: Vec::new(),
        created_at_ms: 0,
        updated_at_ms: 0,
    }
}

/// Outcome of a state-only transition (PROCESSING, FAILED).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateOutcome {
    Applied(PaymentRecord),
    /// Already at or past that state: nothing changed.
    Stale(Option<PaymentRecord>),
    Mismatch(Mismatch, PaymentRecord),
}

pub fn judge_state(existing: Option<PaymentRecord>, facts: &StateFacts) -> StateOutcome {
    match existing {
        Some(e) => match mismatch(&e, facts.account.as_ref(), facts.money.as_ref()) {
            Some(m) => StateOutcome::Mismatch(m, e),
            None => StateOutcome::Stale(Some(e)),
        },
        None => StateOutcome::Stale(None),
    }
}

/// Outcome of applying a refund to its payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    Applied(PaymentRecord),
    AlreadyApplied(PaymentRecord),
    /// The payment is not PAID yet (absent, PENDING, PROCESSING): park it, the provider retries.
    NotYetPaid(Option<PaymentRecord>),
    /// Would take the refunded total above the paid amount, or the payment FAILED.
    Refused { reason: &'static str, payment: PaymentRecord },
    Mismatch(Mismatch, PaymentRecord),
}

pub fn judge_refund(existing: Option<PaymentRecord>, facts: &RefundFacts, key: &IdempotencyKey) -> RefundOutcome {
    let Some(e) = existing else { return RefundOutcome::NotYetPaid(None) };
    if e.refund_keys.iter().any(|k| k == key.as_str()) {
        return RefundOutcome::AlreadyApplied(e);
    }
    let received = facts.money.currency;
    if let Some(m) = e.currency.filter(|c| *c != received).map(|c| Mismatch {
        field: "currency",
        stored: c.to_string(),
        received: received.to_string(),
    }) {
        return RefundOutcome::Mismatch(m, e);
    }
    match e.status {
        PaymentStatus::Pending | PaymentStatus::Processing => RefundOutcome::NotYetPaid(Some(e)),
        PaymentStatus::Failed => RefundOutcome::Refused { reason: "payment_failed", payment: e },
        // Paid, but the remainder is smaller than this refund.
        PaymentStatus::Paid | PaymentStatus::PartiallyRefunded | PaymentStatus::Refunded => {
            RefundOutcome::Refused { reason: "refund_exceeds_payment", payment: e }
        }
    }
}

/// One ledger entry: a signed amount under the operation's key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Posting {
    pub key: IdempotencyKey,
    pub account: AccountId,
    pub currency: Currency,
    /// Positive credits, negative debits.
    pub amount_minor: i64,
    pub reference: Reference,
    pub posted_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostOutcome {
    Posted,
    /// The entry exists: an earlier attempt under this key posted it.
    AlreadyPosted,
}

/// An account's balances per currency, derived from its entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Balance {
    pub account: AccountId,
    pub balances: BTreeMap<Currency, i64>,
    pub entries: u64,
}

impl Balance {
    pub fn from_postings(account: AccountId, postings: &[Posting]) -> Self {
        let mut balances = BTreeMap::new();
        for p in postings {
            *balances.entry(p.currency).or_insert(0i64) += p.amount_minor;
        }
        Balance { account, balances, entries: postings.len() as u64 }
    }
}

/// The payment capability: each method is one conditional write (refunds: at most two), plus a
/// read on the failure path to say why.
#[allow(async_fn_in_trait)]
pub trait Payments {
    async fn register(&self, expected: &ExpectedPayment) -> Result<RegisterOutcome, StoreError>;
    async fn mark_paid(
        &self,
        provider: ProviderId,
        facts: &PaymentFacts,
        key: &IdempotencyKey,
    ) -> Result<PaidOutcome, StoreError>;
    async fn move_state(
        &self,
        provider: ProviderId,
        facts: &StateFacts,
        to: PaymentStatus,
    ) -> Result<StateOutcome, StoreError>;
    async fn refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
    ) -> Result<RefundOutcome, StoreError>;
    async fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Option<PaymentRecord>, StoreError>;
}

/// The ledger capability.
#[allow(async_fn_in_trait)]
pub trait Ledger {
    async fn post(&self, posting: &Posting) -> Result<PostOutcome, StoreError>;
    async fn entries(&self, account: &AccountId) -> Result<Vec<Posting>, StoreError>;
    async fn balance(&self, account: &AccountId) -> Result<Balance, StoreError> {
        let postings = self.entries(account).await?;
        Ok(Balance::from_postings(account.clone(), &postings))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Currency, Operation};

    fn ngn() -> Currency {
        Currency::parse("NGN").unwrap_or_else(|_| unreachable!())
    }

    fn paid(key: &str) -> Result<(PaymentRecord, PaymentFacts), Box<dyn std::error::Error>> {
        let facts = PaymentFacts {
            reference: Reference::parse("pay_1")?,
            account: AccountId::parse("wallet_42")?,
            money: Money::new(125_000, ngn())?,
        };
        let mut rec = placeholder(&facts);
        rec.status = PaymentStatus::Paid;
        rec.paid_key = Some(key.to_owned());
        Ok((rec, facts))
    }

    #[test]
    fn a_paid_payment_under_our_key_is_already_applied() -> Result<(), Box<dyn std::error::Error>> {
        let key = IdempotencyKey::new(ProviderId::Generic, Operation::Payment, &Reference::parse("pay_1")?);
        let (rec, facts) = paid(key.as_str())?;
        assert!(matches!(judge_paid(Some(rec), &facts, &key), PaidOutcome::AlreadyApplied(_)));
        Ok(())
    }

    #[test]
    fn other_money_is_a_mismatch_naming_the_field() -> Result<(), Box<dyn std::error::Error>> {
        let key = IdempotencyKey::new(ProviderId::Generic, Operation::Payment, &Reference::parse("pay_1")?);
        let (mut rec, facts) = paid(key.as_str())?;
        rec.amount_minor = Some(1);
        match judge_paid(Some(rec), &facts, &key) {
            PaidOutcome::Mismatch(m, _) => assert_eq!(m.field, "amount"),
            other => panic!("expected mismatch, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn failed_payments_are_not_payable() -> Result<(), Box<dyn std::error::Error>> {
        let key = IdempotencyKey::new(ProviderId::Generic, Operation::Payment, &Reference::parse("pay_1")?);
        let (mut rec, facts) = paid(key.as_str())?;
        rec.status = PaymentStatus::Failed;
        rec.paid_key = None;
        assert!(matches!(judge_paid(Some(rec), &facts, &key), PaidOutcome::NotPayable(_)));
        Ok(())
    }

    #[test]
    fn refunds_wait_for_payment_and_never_exceed_it() -> Result<(), Box<dyn std::error::Error>> {
        let key = IdempotencyKey::from_stored("generic:refund:r1".into());
        let facts = RefundFacts {
            refund_reference: Reference::parse("r1")?,
            payment_reference: Reference::parse("pay_1")?,
            money: Money::new(10, ngn())?,
        };
        assert!(matches!(judge_refund(None, &facts, &key), RefundOutcome::NotYetPaid(None)));
        let (mut rec, _) = paid("k")?;
        rec.status = PaymentStatus::Processing;
        assert!(matches!(judge_refund(Some(rec.clone()), &facts, &key), RefundOutcome::NotYetPaid(Some(_))));
        rec.status = PaymentStatus::Refunded;
        assert!(matches!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundOutcome::Refused { reason: "refund_exceeds_payment", .. }
        ));
        rec.refund_keys.push(key.to_string());
        assert!(matches!(judge_refund(Some(rec), &facts, &key), RefundOutcome::AlreadyApplied(_)));
        Ok(())
    }

    #[test]
    fn balances_sum_signed_entries_per_currency() -> Result<(), Box<dyn std::error::Error>> {
        let acct = AccountId::parse("a")?;
        let mk = |amount: i64, cur: &str| -> Result<Posting, Box<dyn std::error::Error>> {
            Ok(Posting {
                key: IdempotencyKey::from_stored(format!("k{amount}{cur}")),
                account: acct.clone(),
                currency: Currency::parse(cur)?,
                amount_minor: amount,
                reference: Reference::parse("r")?,
                posted_at_ms: 0,
            })
        };
        let b = Balance::from_postings(acct.clone(), &[mk(100, "NGN")?, mk(-30, "NGN")?, mk(5, "USD")?]);
        assert_eq!(b.balances.get(&ngn()), Some(&70));
        assert_eq!(b.balances.get(&Currency::parse("USD")?), Some(&5));
        assert_eq!(b.entries, 3);
        Ok(())
    }
}
