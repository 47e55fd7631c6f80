//! Payments: the state machine of one payment (PENDING, PROCESSING, PAID, PARTIALLY_REFUNDED,
//! REFUNDED, FAILED) and how a failed conditional transition is judged. Each transition is one
//! conditional write that records the key that moved it (`paid_key`, `refund_keys`) in the same
//! write, so "condition failed and the key is ours" means *already done by us*. The judges here
//! are pure: they read the payment as it is after a failed write and say what it means or
//! where to aim the next write ([`judge_paid`], [`judge_refund`], [`judge_reversal`]).

pub mod disputes;
pub mod pairs;
pub mod parked;

use std::future::Future;

use serde::Serialize;

pub use disputes::{judge_dispute, DisputeJudgement, DisputeOutcome, DisputeView, DisputeWrite};
use pairs::{PairGuard, Side};

use crate::domain::{
    AccountId, Currency, DisputeFacts, DisputeMovement, IdempotencyKey, Money, PaymentFacts,
    PaymentStatus, ProviderId, Reference, RefundFacts, StateFacts,
};
use crate::idempotency::{ClaimRecord, FinalizeOutcome, OwnerToken, StoredResponse};
pub use crate::idempotency::{HostClaim, NewHostClaim};
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
    pub refund_keys: Vec<IdempotencyKey>,
    /// Refunds the provider reported failed: credited back if they had been applied, void if not.
    pub reversed_refund_keys: Vec<IdempotencyKey>,
    pub paid_key: Option<IdempotencyKey>,
    /// Keys of the dispute movements applied (withdrawals and reinstatements), recorded in the
    /// same write that applies each.
    pub dispute_keys: Vec<IdempotencyKey>,
    /// Withdrawn by disputes less reinstated: money the provider took back.
    pub disputed_minor: i64,
    /// Debits that arrived before the payment was paid ([`parked`]): its credit takes them
    /// first. Kept after they apply.
    pub parked_debits: Vec<parked::ParkedDebit>,
    /// Each dispute and how it ended, read from the history (not stored on its own).
    pub disputes: Vec<DisputeView>,
    /// The ledger shard of this payment's entries (its credit, refunds and reversals), decided
    /// once, in the write that made it PAID. `None` only for payments paid before it was stored.
    pub ledger_shard: Option<u32>,
    /// When the credit was made (the write that made it PAID): its ledger entry's time.
    pub credit_at_ms: Option<i64>,
    /// The credit's claim, when the write that paid it took one (payments paid before #32, or
    /// through the claims table, have none).
    #[serde(skip)]
    pub claim: Option<HostClaim>,
    /// Refunds' claims held on the payment (#44), by the refund's key: each taken by the write
    /// that applied its refund. Refunds applied before #44, or through the claims table (the
    /// payment was busy with another claim), have none here.
    #[serde(skip)]
    pub held_claims: std::collections::BTreeMap<String, HostClaim>,
    /// A claim held on the payment is APPLYING (the credit's or one refund's): the payment is
    /// listed under `POSTING#{shard}` and no other refund takes its claim here meanwhile.
    #[serde(skip)]
    pub posting: bool,
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
    /// The money a dispute movement moved, or a refund on a payment whose refunds may repeat
    /// a dispute (absent on other entries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_minor: Option<i64>,
    /// What the movement debited when its write decided it could be the second report of one
    /// outflow ([`pairs`]): 0 when it paired, its amount when not; absent elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debit_minor: Option<i64>,
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
    let differ = |field: &'static str, stored: Option<String>, received: Option<String>| match (
        stored, received,
    ) {
        (Some(s), Some(r)) if s != r => Some(Mismatch {
            field,
            stored: s,
            received: r,
        }),
        _ => None,
    };
    differ(
        "account",
        existing.account.as_ref().map(|a| a.to_string()),
        account.map(|a| a.to_string()),
    )
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
    /// A webhook made the payment first, naming no account (`payment.processing`, a failure):
    /// this registration gave it its account, and money fields it lacked, in one conditional
    /// write. Its unassigned success can now be replayed onto the account.
    Assigned(PaymentRecord),
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
    /// Paid under another key: a human must look.
    NotPayable(PaymentRecord),
    /// The event names no account and the payment has none (not registered with one, no default
    /// configured): nothing moved, the delivery can be applied later.
    Unassigned(Option<PaymentRecord>),
    /// Other writers kept changing the payment under us; a retry settles it.
    Contended,
}

/// What a failed PAID write means, judged from the item that made it fail.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a judgement lives for one match after a failed write; boxing would allocate for nothing"
)]
pub enum PaidJudgement {
    Decided(PaidOutcome),
    /// FAILED: the provider's success is the truth, so write PAID from FAILED (a recovery).
    Recover,
    /// The item changed between our write and our read: write again.
    Retry,
}

/// Decides a failed PAID transition. `has_default` says a default account was offered for an
/// event without one.
pub fn judge_paid(
    existing: Option<PaymentRecord>,
    facts: &PaymentFacts,
    key: &IdempotencyKey,
    has_default: bool,
) -> PaidJudgement {
    let unassignable = facts.account.is_none() && !has_default;
    let Some(existing) = existing else {
        // Absent, yet the condition failed: only an account-less event fails on an absent item.
        return if unassignable {
            PaidJudgement::Decided(PaidOutcome::Unassigned(None))
        } else {
            PaidJudgement::Retry
        };
    };
    if let Some(m) = mismatch(&existing, facts.account.as_ref(), Some(&facts.money)) {
        return PaidJudgement::Decided(PaidOutcome::Mismatch(m, existing));
    }
    if existing.status.is_paid() {
        return PaidJudgement::Decided(if existing.paid_key.as_ref() == Some(key) {
            PaidOutcome::AlreadyApplied(existing)
        } else {
            PaidOutcome::NotPayable(existing)
        });
    }
    // Not paid and no account to credit, whatever the state (PENDING, PROCESSING or FAILED):
    // unassigned, before any recovery, since every write that pays needs an account.
    if unassignable && existing.account.is_none() {
        return PaidJudgement::Decided(PaidOutcome::Unassigned(Some(existing)));
    }
    match existing.status {
        PaymentStatus::Failed => PaidJudgement::Recover,
        _ => PaidJudgement::Retry,
    }
}

#[cfg(test)]
fn placeholder(facts: &PaymentFacts) -> PaymentRecord {
    PaymentRecord {
        account: facts.account.clone(),
        amount_minor: Some(facts.money.amount.get()),
        currency: Some(facts.money.currency),
        ..PaymentRecord::blank(
            ProviderId::GENERIC,
            &facts.reference,
            PaymentStatus::Pending,
        )
    }
}

impl PaymentRecord {
    /// A payment item as a first write makes it: no account, no money, nothing moved.
    pub fn blank(provider: ProviderId, reference: &Reference, status: PaymentStatus) -> Self {
        PaymentRecord {
            provider,
            reference: reference.clone(),
            status,
            account: None,
            amount_minor: None,
            currency: None,
            refunded_minor: 0,
            refund_keys: Vec::new(),
            reversed_refund_keys: Vec::new(),
            paid_key: None,
            dispute_keys: Vec::new(),
            disputed_minor: 0,
            parked_debits: Vec::new(),
            disputes: Vec::new(),
            ledger_shard: None,
            credit_at_ms: None,
            claim: None,
            held_claims: Default::default(),
            posting: false,
            history: Vec::new(),
            created_at_ms: 0,
            updated_at_ms: 0,
        }
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
    /// The payment is not PAID yet (absent, PENDING, PROCESSING, FAILED): park it, the provider
    /// retries.
    NotYetPaid(Option<PaymentRecord>),
    /// Would take the refunded total above the paid amount.
    Refused {
        reason: &'static str,
        payment: PaymentRecord,
    },
    /// The provider already reported this refund failed: it never applies.
    Voided(PaymentRecord),
    Mismatch(Mismatch, PaymentRecord),
    /// Concurrent refunds kept moving the remainder; a retry settles it.
    Contended,
}

/// A movement whose claim is held on its payment item (#44), taken by the write that applies
/// it: each writes the payment anyway, once per key.
#[derive(Debug, Clone, Copy)]
pub enum HeldMove<'a> {
    /// A refund's debit.
    Refund(&'a RefundFacts),
    /// A dispute's withdrawal, reinstatement or declined record.
    Dispute(&'a DisputeFacts, DisputeMovement),
    /// A refund the provider reports failed: its debit credited back, or the refund voided.
    Reversal(&'a RefundFacts),
}

impl HeldMove<'_> {
    /// The payment the movement writes, which holds its claim.
    pub fn payment(&self) -> &Reference {
        match self {
            HeldMove::Refund(r) | HeldMove::Reversal(r) => &r.payment_reference,
            HeldMove::Dispute(d, _) => &d.payment_reference,
        }
    }
}

/// A movement's write with its claim on the payment (#44), as the store found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hosted {
    /// This write applied the movement and took its claim (APPLYING, ours).
    Taken(PaymentRecord),
    /// The movement's claim is on the payment already: the claim crate's judge decides.
    Claimed(PaymentRecord, HostClaim),
    /// Not for the payment to decide: the movement was applied without a claim here (before
    /// #44, or through the claims table), another claim holds the payment, or the movement does
    /// not apply now (not paid yet, refused, voided, awaiting its withdrawal, another amount,
    /// contended). The claims table's path decides it, exactly as before #44.
    Elsewhere,
}

/// What a refund write should aim at next, or how the refund ends.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a judgement lives for one match after a failed write; boxing would allocate for nothing"
)]
pub enum RefundJudgement {
    Decided(RefundOutcome),
    /// Write again as this says.
    Aim(RefundWrite),
}

/// A refund write's aim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundWrite {
    /// REFUNDED when the refund takes the whole remainder, PARTIALLY_REFUNDED when it takes less
    /// (or, paired, when something remains).
    pub target: PaymentStatus,
    /// On a payment whose refunds repeat its disputes ([`pairs`]), the totals read and whether
    /// this refund is the second report of a withdrawal's money (then it debits nothing and the
    /// remainder stays).
    pub pair: Option<PairGuard>,
    /// The dispute's own refund after its withdrawal paired with an earlier refund of the same
    /// amount ([`pairs::repeats_a_paired_withdrawal`]): it debits in full and takes whatever
    /// remains, conditioned on the totals only (the remainder is short by what it repeats).
    pub repeats_withdrawal: bool,
}

impl RefundWrite {
    /// The first write's aim: a full refund of a payment with nothing refunded or disputed.
    pub fn first(key: &IdempotencyKey) -> Self {
        RefundWrite {
            target: PaymentStatus::Refunded,
            pair: pairs_refund(key).then_some(PairGuard::FIRST),
            repeats_withdrawal: false,
        }
    }

    fn plain(target: PaymentStatus, pair: Option<PairGuard>) -> Self {
        RefundWrite {
            target,
            pair,
            repeats_withdrawal: false,
        }
    }
}

/// A refund on a provider whose refunds may repeat a dispute's withdrawal.
fn pairs_refund(key: &IdempotencyKey) -> bool {
    key.provider()
        .is_some_and(pairs::repeats_disputes_as_refunds)
}

/// The one refund decision, from the payment as it is now. DynamoDB conditions cannot add, so
/// the write compares the stored remainder with the refund and this judge picks the target.
pub fn judge_refund(
    existing: Option<PaymentRecord>,
    facts: &RefundFacts,
    key: &IdempotencyKey,
) -> RefundJudgement {
    use RefundJudgement::Decided;
    let Some(e) = existing else {
        return Decided(RefundOutcome::NotYetPaid(None));
    };
    if e.refund_keys.contains(key) {
        return Decided(RefundOutcome::AlreadyApplied(e));
    }
    if e.reversed_refund_keys.contains(key) {
        return Decided(RefundOutcome::Voided(e));
    }
    if let Some(m) = currency_mismatch(&e, facts.money.currency) {
        return Decided(RefundOutcome::Mismatch(m, e));
    }
    match e.status {
        // FAILED is not final for money (a later success still pays it): wait like PENDING.
        PaymentStatus::Pending | PaymentStatus::Processing | PaymentStatus::Failed => {
            Decided(RefundOutcome::NotYetPaid(Some(e)))
        }
        PaymentStatus::Paid | PaymentStatus::PartiallyRefunded | PaymentStatus::Refunded => {
            refund_aim(e, facts, key)
        }
    }
}

/// Where a refund of a paid payment aims, from what can still be refunded: paid, less
/// refunded, less what disputes took, plus what was counted in both ([`pairs::overlap_minor`]).
fn refund_aim(e: PaymentRecord, facts: &RefundFacts, key: &IdempotencyKey) -> RefundJudgement {
    let amount = facts.money.amount.get();
    let pair = pairs_refund(key).then(|| {
        pairs::guard(
            e.refunded_minor,
            e.disputed_minor,
            &e.history,
            Side::Refund,
            amount,
        )
    });
    let overlap = if pair.is_some() {
        pairs::overlap_minor(&e.history)
    } else {
        0
    };
    let remainder = e
        .amount_minor
        .unwrap_or(0)
        .checked_sub(e.refunded_minor)
        .and_then(|r| r.checked_sub(e.disputed_minor))
        .and_then(|r| r.checked_add(overlap));
    if let (Some(g), Some(r)) = (pair, remainder) {
        if g.paired {
            // The money left with the withdrawal: nothing more is taken, whatever remains.
            let target = if r > 0 {
                PaymentStatus::PartiallyRefunded
            } else {
                PaymentStatus::Refunded
            };
            return RefundJudgement::Aim(RefundWrite::plain(target, pair));
        }
    }
    if let (Some(g), Some(r)) = (pair, remainder) {
        let excess = amount.checked_sub(r).unwrap_or(0);
        if pairs::repeats_a_paired_withdrawal(&e.history, amount, excess) {
            return RefundJudgement::Aim(RefundWrite {
                target: PaymentStatus::Refunded,
                pair: Some(g),
                repeats_withdrawal: true,
            });
        }
    }
    match remainder {
        Some(r) if r == amount => {
            RefundJudgement::Aim(RefundWrite::plain(PaymentStatus::Refunded, pair))
        }
        Some(r) if r > amount => {
            RefundJudgement::Aim(RefundWrite::plain(PaymentStatus::PartiallyRefunded, pair))
        }
        _ => RefundJudgement::Decided(RefundOutcome::Refused {
            reason: "refund_exceeds_payment",
            payment: e,
        }),
    }
}

pub(crate) fn currency_mismatch(e: &PaymentRecord, received: Currency) -> Option<Mismatch> {
    e.currency.filter(|c| *c != received).map(|c| Mismatch {
        field: "currency",
        stored: c.to_string(),
        received: received.to_string(),
    })
}

/// Outcome of a refund reversal (the provider says a refund failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReversalOutcome {
    /// The refund had been applied: its amount is back in the remainder (credit it back).
    Applied(PaymentRecord),
    AlreadyApplied(PaymentRecord),
    /// The refund was never applied: it is recorded as void, so its late success moves nothing.
    Voided(PaymentRecord),
    /// No payment yet: park, the provider retries.
    NotYetPaid,
    Mismatch(Mismatch, PaymentRecord),
    Contended,
}

/// The write a reversal needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReversalWrite {
    /// Give the refund back: refunded total down, remainder up, status to PAID (nothing refunded
    /// any more) or PARTIALLY_REFUNDED.
    Restore(PaymentStatus),
    /// Record the refund as void.
    Void,
}

#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a judgement lives for one match after a failed write; boxing would allocate for nothing"
)]
pub enum ReversalJudgement {
    Decided(ReversalOutcome),
    Write(ReversalWrite),
}

/// Decides a reversal of the refund keyed `refund_key` from the payment as it is now.
pub fn judge_reversal(
    existing: Option<PaymentRecord>,
    facts: &RefundFacts,
    refund_key: &IdempotencyKey,
) -> ReversalJudgement {
    use ReversalJudgement::{Decided, Write};
    let Some(e) = existing else {
        return Decided(ReversalOutcome::NotYetPaid);
    };
    let applied = e.refund_keys.contains(refund_key);
    if e.reversed_refund_keys.contains(refund_key) {
        return Decided(if applied {
            ReversalOutcome::AlreadyApplied(e)
        } else {
            ReversalOutcome::Voided(e)
        });
    }
    if let Some(m) = currency_mismatch(&e, facts.money.currency) {
        return Decided(ReversalOutcome::Mismatch(m, e));
    }
    if !applied {
        return Write(ReversalWrite::Void);
    }
    let amount = facts.money.amount.get();
    match e.refunded_minor {
        r if r == amount => Write(ReversalWrite::Restore(PaymentStatus::Paid)),
        r if r > amount => Write(ReversalWrite::Restore(PaymentStatus::PartiallyRefunded)),
        // Less refunded than this refund's amount, yet the refund is applied: the reversal says
        // another amount than the refund did.
        r => Decided(ReversalOutcome::Mismatch(
            Mismatch {
                field: "amount",
                stored: r.to_string(),
                received: amount.to_string(),
            },
            e,
        )),
    }
}

/// What a first PAID write needs besides the event: where the payment's entries will live, and
/// the account to credit when neither the event nor the payment names one.
#[derive(Debug, Clone, Copy)]
pub struct NewCredit<'a> {
    pub shard: u32,
    pub default_account: Option<&'a AccountId>,
    /// The credit's claim, taken in the same write (`None`: the claims table holds it).
    pub claim: Option<NewHostClaim<'a>>,
}

/// The payment capability: each method is one conditional write (a recovery, refund or reversal
/// that races others: a few, each judged from the item that failed it), plus a read on the
/// failure path where the server does not return that item.
pub trait Payments: Sync {
    /// PENDING or PROCESSING payments (`status`) not updated since `before_ms`, oldest first, at
    /// most `limit`: the ones reconciliation asks the provider about.
    fn open_payments(
        &self,
        status: PaymentStatus,
        before_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<PaymentRecord>, StoreError>> + Send;
    fn register(
        &self,
        expected: &ExpectedPayment,
    ) -> impl Future<Output = Result<RegisterOutcome, StoreError>> + Send;
    fn mark_paid(
        &self,
        provider: ProviderId,
        facts: &PaymentFacts,
        key: &IdempotencyKey,
        new: NewCredit<'_>,
    ) -> impl Future<Output = Result<PaidOutcome, StoreError>> + Send;
    fn move_state(
        &self,
        provider: ProviderId,
        facts: &StateFacts,
        to: PaymentStatus,
    ) -> impl Future<Output = Result<StateOutcome, StoreError>> + Send;
    /// Takes over a credit's claim on its payment from `previous`, whose lease ran out: one
    /// `UpdateItem` conditioned on that owner, APPLYING, and the lease expired by the store's
    /// clock. `true` also when the SDK resent our takeover after losing its reply.
    fn take_over_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Marks a credit's claim DONE with `answer`, only if `token` still owns it (APPLYING).
    fn finalize_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;
    /// Claims held on payments (a credit's, keyed by the payment's `paid_key`, or a refund's,
    /// #44) that are APPLYING with their lease run out before `now_ms`, as claim records, at
    /// most `limit`: reconciliation resumes them (each is re-judged under a condition when it
    /// acts).
    fn stuck_credits(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ClaimRecord>, StoreError>> + Send;
    /// Gives a credit's lease up (the claim stays APPLYING; the next attempt takes over at
    /// once), only if `token` owns it: an attempt that moved nothing after the paid write.
    fn give_up_credit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        token: &OwnerToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// A movement with its claim taken on its payment in the same write (#44): the movement's
    /// own conditions, and the payment holds no claim APPLYING (`open` absent) and none for
    /// this key. Aimed and re-aimed as the movement's own write ([`Payments::refund`],
    /// [`Payments::dispute`], [`Payments::reverse_refund`]); every outcome but "applied by this
    /// write" or "claimed here already" is [`Hosted::Elsewhere`].
    fn hold(
        &self,
        provider: ProviderId,
        movement: HeldMove<'_>,
        key: &IdempotencyKey,
        claim: NewHostClaim<'_>,
    ) -> impl Future<Output = Result<Hosted, StoreError>> + Send;
    /// Takes over a claim held on `payment` under `key` from `previous`, whose lease ran out
    /// (as [`Payments::take_over_credit`]).
    fn take_over_held(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Marks the claim held on `payment` under `key` DONE with `answer` and frees the payment
    /// for the next claim, only if `token` still owns it (APPLYING).
    fn finalize_held(
        &self,
        provider: ProviderId,
        payment: &Reference,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;
    fn refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<RefundOutcome, StoreError>> + Send;
    /// Records a dispute movement (`key`: its withdrawal's or reinstatement's) on its payment.
    fn dispute(
        &self,
        provider: ProviderId,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<DisputeOutcome, StoreError>> + Send;
    /// Writes `debit` down on its payment `reference` if that payment is not paid (creating it
    /// PENDING, without account or money, when absent), in one conditional write; says
    /// [`parked::ParkOutcome::PaidMeanwhile`] when it is paid by now.
    fn park_debit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        debit: &parked::ParkedDebit,
    ) -> impl Future<Output = Result<parked::ParkOutcome, StoreError>> + Send;
    /// Reverses the refund keyed `refund_key` (its own key, not the reversal's).
    fn reverse_refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        refund_key: &IdempotencyKey,
    ) -> impl Future<Output = Result<ReversalOutcome, StoreError>> + Send;
    /// The payment reference a provider transaction id is bound to, if it is bound (a consistent
    /// read): how a refund or dispute naming the transaction finds its payment without binding
    /// the transaction itself.
    fn bound_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
    ) -> impl Future<Output = Result<Option<Reference>, StoreError>> + Send;
    /// Binds a provider transaction id to the payment reference first chosen for it, and returns
    /// that reference with the debits parked on the transaction before it was bound: one
    /// conditional write, so the first choice stands forever.
    fn bind_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        reference: &Reference,
    ) -> impl Future<Output = Result<parked::Binding, StoreError>> + Send;
    /// Writes `debit` down on a provider transaction that is not bound yet, in one conditional
    /// write; says [`parked::TransactionPark::Bound`] with its reference when it is bound.
    fn park_on_transaction(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        debit: &parked::ParkedDebit,
    ) -> impl Future<Output = Result<parked::TransactionPark, StoreError>> + Send;
    /// Takes an open payment (still `status`) out of reconciliation's open index, with `note` in
    /// its history: the provider had no final word past the give-up horizon. Its status does not
    /// change, so a webhook can still pay it. False if it was no longer open as judged.
    fn stop_asking(
        &self,
        provider: ProviderId,
        reference: &Reference,
        status: PaymentStatus,
        note: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> impl Future<Output = Result<Option<PaymentRecord>, StoreError>> + Send;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::{Currency, Operation};

    pub(crate) type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

    pub(crate) fn ngn() -> Currency {
        Currency::parse("NGN").unwrap_or_else(|_| unreachable!())
    }

    pub(crate) fn key(op: Operation, r: &str) -> R<IdempotencyKey> {
        Ok(IdempotencyKey::new(
            ProviderId::GENERIC,
            op,
            &Reference::parse(r)?,
        ))
    }

    /// A payment in `status` with the test's money and account.
    pub(crate) fn record(status: PaymentStatus) -> R<PaymentRecord> {
        let (mut rec, _) = paid("generic:payment:pay_1")?;
        rec.status = status;
        Ok(rec)
    }

    fn paid(key: &str) -> R<(PaymentRecord, PaymentFacts)> {
        let facts = PaymentFacts {
            reference: Reference::parse("pay_1")?,
            account: Some(AccountId::parse("wallet_42")?),
            money: Money::new(125_000, ngn())?,
        };
        let mut rec = placeholder(&facts);
        rec.status = PaymentStatus::Paid;
        rec.paid_key = Some(IdempotencyKey::from_stored(key.to_owned()));
        Ok((rec, facts))
    }

    #[test]
    fn a_paid_payment_under_our_key_is_already_applied() -> R {
        let key = key(Operation::Payment, "pay_1")?;
        let (rec, facts) = paid(key.as_str())?;
        let j = judge_paid(Some(rec), &facts, &key, false);
        assert!(
            matches!(j, PaidJudgement::Decided(PaidOutcome::AlreadyApplied(_))),
            "{j:?}"
        );
        Ok(())
    }

    #[test]
    fn other_money_is_a_mismatch_naming_the_field() -> R {
        let key = key(Operation::Payment, "pay_1")?;
        let (mut rec, facts) = paid(key.as_str())?;
        rec.amount_minor = Some(1);
        match judge_paid(Some(rec), &facts, &key, false) {
            PaidJudgement::Decided(PaidOutcome::Mismatch(m, _)) => assert_eq!(m.field, "amount"),
            other => panic!("expected mismatch, got {other:?}"),
        }
        Ok(())
    }

    #[test]
    fn a_failed_payment_recovers_and_another_keys_payment_is_not_payable() -> R {
        let key = key(Operation::Payment, "pay_1")?;
        let (mut rec, facts) = paid(key.as_str())?;
        rec.status = PaymentStatus::Failed;
        rec.paid_key = None;
        assert_eq!(
            judge_paid(Some(rec.clone()), &facts, &key, false),
            PaidJudgement::Recover
        );
        rec.status = PaymentStatus::Paid;
        rec.paid_key = Some(IdempotencyKey::from_stored("generic:payment:other".into()));
        assert!(matches!(
            judge_paid(Some(rec), &facts, &key, false),
            PaidJudgement::Decided(PaidOutcome::NotPayable(_))
        ));
        Ok(())
    }

    #[test]
    fn no_account_anywhere_is_unassigned_unless_a_default_is_offered() -> R {
        let key = key(Operation::Payment, "pay_1")?;
        let (mut rec, mut facts) = paid(key.as_str())?;
        facts.account = None;
        rec.account = None;
        rec.status = PaymentStatus::Pending;
        assert!(matches!(
            judge_paid(None, &facts, &key, false),
            PaidJudgement::Decided(PaidOutcome::Unassigned(None))
        ));
        assert!(matches!(
            judge_paid(Some(rec.clone()), &facts, &key, false),
            PaidJudgement::Decided(PaidOutcome::Unassigned(Some(_)))
        ));
        // With a default, the write could not have failed for the account: the item moved, retry.
        assert_eq!(
            judge_paid(Some(rec.clone()), &facts, &key, true),
            PaidJudgement::Retry
        );
        // FAILED without an account: unassigned too, not a recovery that can never be written.
        rec.status = PaymentStatus::Failed;
        assert!(matches!(
            judge_paid(Some(rec.clone()), &facts, &key, false),
            PaidJudgement::Decided(PaidOutcome::Unassigned(Some(_)))
        ));
        assert_eq!(
            judge_paid(Some(rec), &facts, &key, true),
            PaidJudgement::Recover
        );
        Ok(())
    }

    fn refund_facts(amount: i64) -> R<RefundFacts> {
        Ok(RefundFacts {
            refund_reference: Reference::parse("r1")?,
            payment_reference: Reference::parse("pay_1")?,
            money: Money::new(amount, ngn())?,
        })
    }

    #[test]
    fn refunds_wait_for_payment_aim_at_the_remainder_and_never_exceed_it() -> R {
        let key = key(Operation::Refund, "r1")?;
        let facts = refund_facts(10)?;
        assert!(matches!(
            judge_refund(None, &facts, &key),
            RefundJudgement::Decided(RefundOutcome::NotYetPaid(None))
        ));
        let (mut rec, _) = paid("k")?;
        rec.amount_minor = Some(30);
        rec.status = PaymentStatus::Processing;
        assert!(matches!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundJudgement::Decided(RefundOutcome::NotYetPaid(Some(_)))
        ));
        // PAID with 30 left: a 10 refund is partial; with 10 left it is the whole remainder.
        rec.status = PaymentStatus::Paid;
        assert_eq!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundJudgement::Aim(RefundWrite::plain(PaymentStatus::PartiallyRefunded, None))
        );
        rec.refunded_minor = 20;
        assert_eq!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundJudgement::Aim(RefundWrite::plain(PaymentStatus::Refunded, None))
        );
        rec.refunded_minor = 25;
        assert!(matches!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundJudgement::Decided(RefundOutcome::Refused {
                reason: "refund_exceeds_payment",
                ..
            })
        ));
        rec.reversed_refund_keys.push(key.clone());
        assert!(matches!(
            judge_refund(Some(rec.clone()), &facts, &key),
            RefundJudgement::Decided(RefundOutcome::Voided(_))
        ));
        rec.refund_keys.push(key.clone());
        assert!(matches!(
            judge_refund(Some(rec), &facts, &key),
            RefundJudgement::Decided(RefundOutcome::AlreadyApplied(_))
        ));
        Ok(())
    }

    #[test]
    fn reversals_restore_applied_refunds_and_void_the_others() -> R {
        let refund_key = key(Operation::Refund, "r1")?;
        let facts = refund_facts(10)?;
        let (mut rec, _) = paid("k")?;
        rec.amount_minor = Some(30);
        assert_eq!(
            judge_reversal(Some(rec.clone()), &facts, &refund_key),
            ReversalJudgement::Write(ReversalWrite::Void)
        );
        rec.refund_keys.push(refund_key.clone());
        rec.refunded_minor = 10;
        rec.status = PaymentStatus::PartiallyRefunded;
        assert_eq!(
            judge_reversal(Some(rec.clone()), &facts, &refund_key),
            ReversalJudgement::Write(ReversalWrite::Restore(PaymentStatus::Paid))
        );
        rec.refunded_minor = 25;
        assert_eq!(
            judge_reversal(Some(rec.clone()), &facts, &refund_key),
            ReversalJudgement::Write(ReversalWrite::Restore(PaymentStatus::PartiallyRefunded))
        );
        rec.reversed_refund_keys.push(refund_key.clone());
        assert!(matches!(
            judge_reversal(Some(rec), &facts, &refund_key),
            ReversalJudgement::Decided(ReversalOutcome::AlreadyApplied(_))
        ));
        assert_eq!(
            judge_reversal(None, &facts, &refund_key),
            ReversalJudgement::Decided(ReversalOutcome::NotYetPaid)
        );
        Ok(())
    }
}
