//! A dry run: the pipeline's own code over a store that reads and never writes, so what an
//! operator is shown before a replay is what the replay would do (#33: the old prediction said
//! "apply" whenever no claim existed, and a parked refund or an account-less payment then did
//! something else).
//!
//! Every write of the money path is answered from a fresh consistent read and the same pure
//! judge the store's conditional write uses when its condition fails: the write's answer, had it
//! been made now. The claim is judged by [`judge_existing`] (a live lease is in flight, an
//! expired one is taken over, other money is a conflict), the payment by `judge_paid`,
//! `judge_refund`, `judge_dispute`, `judge_reversal`, a payout by `judge_settle`. Ledger entries
//! the run would post are kept, so the caller can show the balance effect; anything else that
//! writes (registering, payouts' own steps, layouts) is refused with [`StoreError::ReadOnly`].
//!
//! # What a prediction cannot know
//!
//! | case | prediction | the run |
//! |---|---|---|
//! | another writer changes the item between the prediction and the run | judged on what was read | judged on what is there then |
//! | a debit parked on an unbound transaction (`payments::parked`) | the credit without it | the credit takes it first |

use std::collections::HashMap;
use std::sync::Mutex;

use crate::domain::{
    DisputeFacts, DisputeMovement, Fingerprint, IdempotencyKey, PaymentFacts, PaymentStatus,
    ProviderId, Reference, RefundFacts, StateFacts, TransferState,
};
use crate::eventlog::{
    Delivery, EventLog, LogFilter, LogPage, MinuteCounts, Outcome, RollupKind, Rollups,
};
use crate::idempotency::{
    judge_existing, ClaimOutcome, ClaimRecord, Claims, Existing, FinalizeOutcome, OwnerToken,
    StoredResponse,
};
use crate::ledger::{Layout, Ledger, PostOutcome, Posting};
use crate::payments::pairs::PairGuard;
use crate::payments::parked::{Binding, ParkOutcome, ParkedDebit, TransactionPark};
use crate::payments::{
    judge_dispute, judge_paid, judge_refund, judge_reversal, judge_state, DisputeJudgement,
    DisputeOutcome, ExpectedPayment, HeldMove, HistoryEntry, Hosted, NewCredit, NewHostClaim,
    PaidJudgement, PaidOutcome, PaymentRecord, Payments, RefundJudgement, RefundOutcome,
    RegisterOutcome, ReversalJudgement, ReversalOutcome, ReversalWrite, StateOutcome,
};
use crate::payouts::{
    calls, judge_settle, HeldWord, HeldWordCall, NewPayout, PayoutId, PayoutRecord, Payouts,
    SettleJudgement, SettleOutcome, WordOrigin,
};
use crate::store::StoreError;

/// A store that reads through `inner` and answers its writes by judgement alone.
///
/// What its answers would have written is kept in an overlay that later reads see first, so a
/// run of several deliveries is judged in order as the real run would be: a refund parked by
/// the first is taken by the credit of the second; a second delivery of one key replays the
/// first one's answer; two refunds that each fit but not together are not both applied.
pub struct DryRun<S> {
    inner: S,
    /// Payment items as the run's writes would have left them (`{provider}#{reference}`).
    payments: Mutex<HashMap<String, PaymentRecord>>,
    /// Answers the run's claims would have stored, by key.
    answers: Mutex<HashMap<String, StoredResponse>>,
    /// Ledger entries the run would have posted, in order, and how many were taken.
    postings: Mutex<(Vec<Posting>, usize)>,
}

/// Locks, and goes on with the data if a panicking holder poisoned it (each holder only
/// inserts or reads, so what is there is whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn item_key(provider: ProviderId, reference: &Reference) -> String {
    format!("{provider}#{reference}")
}

impl<S> DryRun<S> {
    pub fn new(inner: S) -> Self {
        DryRun {
            inner,
            payments: Mutex::new(HashMap::new()),
            answers: Mutex::new(HashMap::new()),
            postings: Mutex::new((Vec::new(), 0)),
        }
    }

    /// The entries posted since the last call: what the delivery just predicted moves.
    pub fn take_postings(&self) -> Vec<Posting> {
        let mut guard = lock(&self.postings);
        let (all, taken) = &mut *guard;
        let new = all
            .get(*taken..)
            .map(<[Posting]>::to_vec)
            .unwrap_or_default();
        *taken = all.len();
        new
    }

    /// Remembers what a write would have left, for the run's later reads.
    fn keep(&self, p: &PaymentRecord) {
        lock(&self.payments).insert(item_key(p.provider, &p.reference), p.clone());
    }
}

fn read_only(operation: &'static str) -> StoreError {
    StoreError::ReadOnly { operation }
}

/// The dry run's own owner token: never written, so never anyone's.
fn dry_token() -> OwnerToken {
    OwnerToken::from_stored("dry-run".to_owned())
}

impl<S: Claims + Send + Sync> Claims for DryRun<S> {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        _lease_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        let token = dry_token();
        if let Some(stored) = lock(&self.answers).get(key.as_str()) {
            return Ok(ClaimOutcome::Replay(stored.clone()));
        }
        let Some(existing) = self.inner.get_claim(key).await? else {
            return Ok(ClaimOutcome::Claimed {
                token,
                took_over: false,
            });
        };
        Ok(
            match judge_existing(&existing, fingerprint, self.inner.now_ms(), &token) {
                Existing::Decided(outcome) => outcome,
                Existing::TakeOver { .. } => ClaimOutcome::Claimed {
                    token,
                    took_over: true,
                },
            },
        )
    }

    async fn finalize(
        &self,
        key: &IdempotencyKey,
        _token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        lock(&self.answers).insert(key.to_string(), response.clone());
        Ok(FinalizeOutcome::Done)
    }

    async fn release(
        &self,
        _key: &IdempotencyKey,
        _token: &OwnerToken,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn stuck_claims(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        self.inner.stuck_claims(now_ms, limit).await
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    async fn get_claim(&self, key: &IdempotencyKey) -> Result<Option<ClaimRecord>, StoreError> {
        self.inner.get_claim(key).await
    }

    async fn done_among(
        &self,
        keys: &[(IdempotencyKey, Option<Reference>)],
    ) -> Result<std::collections::HashSet<IdempotencyKey>, StoreError> {
        self.inner.done_among(keys).await
    }
}

/// The history entry a pairing-aware write records (amount and decision), or a plain one.
fn entry(
    key: &IdempotencyKey,
    status: PaymentStatus,
    amount: i64,
    debit: Option<i64>,
) -> HistoryEntry {
    HistoryEntry {
        at_ms: 0,
        status,
        note: key.to_string(),
        amount_minor: debit.map(|_| amount),
        debit_minor: debit,
    }
}

fn paired_debit(pair: Option<PairGuard>, amount: i64) -> Option<i64> {
    pair.map(|g| g.debit_minor(amount))
}

impl<S: Payments + Send + Sync> DryRun<S> {
    /// The payment as the run has left it so far, else as stored.
    async fn current(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        if let Some(p) = lock(&self.payments).get(&item_key(provider, reference)) {
            return Ok(Some(p.clone()));
        }
        self.inner.payment(provider, reference).await
    }
}

impl<S: Payments + Send + Sync> Payments for DryRun<S> {
    async fn open_payments(
        &self,
        status: PaymentStatus,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<PaymentRecord>, StoreError> {
        self.inner.open_payments(status, before_ms, limit).await
    }

    async fn register(&self, _expected: &ExpectedPayment) -> Result<RegisterOutcome, StoreError> {
        Err(read_only("register"))
    }

    async fn mark_paid(
        &self,
        provider: ProviderId,
        facts: &PaymentFacts,
        key: &IdempotencyKey,
        new: NewCredit<'_>,
    ) -> Result<PaidOutcome, StoreError> {
        let existing = self.current(provider, &facts.reference).await?;
        let has_default = new.default_account.is_some();
        Ok(
            match judge_paid(existing.clone(), facts, key, has_default) {
                PaidJudgement::Decided(outcome) => outcome,
                PaidJudgement::Recover | PaidJudgement::Retry => {
                    let mut p = existing.unwrap_or_else(|| {
                        PaymentRecord::blank(provider, &facts.reference, PaymentStatus::Pending)
                    });
                    p.account = p
                        .account
                        .or_else(|| facts.account.clone())
                        .or_else(|| new.default_account.cloned());
                    p.status = PaymentStatus::Paid;
                    p.amount_minor = Some(facts.money.amount.get());
                    p.currency = Some(facts.money.currency);
                    p.paid_key = Some(key.clone());
                    p.ledger_shard = p.ledger_shard.or(Some(new.shard));
                    self.keep(&p);
                    PaidOutcome::Applied(p)
                }
            },
        )
    }

    /// A dry run judges as if it took the claim: the takeover, the finalize and the giving up
    /// of a credit's claim on its payment write nothing.
    async fn take_over_credit(
        &self,
        _provider: ProviderId,
        _reference: &Reference,
        _previous: &OwnerToken,
        _token: &OwnerToken,
        _lease_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn finalize_credit(
        &self,
        _provider: ProviderId,
        _reference: &Reference,
        _token: &OwnerToken,
        _answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        Ok(FinalizeOutcome::Done)
    }

    async fn stuck_credits(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> Result<Vec<ClaimRecord>, StoreError> {
        self.inner.stuck_credits(now_ms, limit).await
    }

    async fn give_up_credit(
        &self,
        _provider: ProviderId,
        _reference: &Reference,
        _token: &OwnerToken,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn move_state(
        &self,
        provider: ProviderId,
        facts: &StateFacts,
        to: PaymentStatus,
    ) -> Result<StateOutcome, StoreError> {
        let Some(e) = self.current(provider, &facts.reference).await? else {
            let p = PaymentRecord::blank(provider, &facts.reference, to);
            self.keep(&p);
            return Ok(StateOutcome::Applied(p));
        };
        let movable = to.sources_of().contains(&e.status);
        Ok(match judge_state(Some(e), facts) {
            StateOutcome::Stale(Some(mut e)) if movable => {
                e.status = to;
                self.keep(&e);
                StateOutcome::Applied(e)
            }
            other => other,
        })
    }

    /// A movement's claim already on its payment is judged as the real run would; one not
    /// claimed there goes the claims table's way (simulated, writing nothing).
    async fn hold(
        &self,
        provider: ProviderId,
        movement: HeldMove<'_>,
        key: &IdempotencyKey,
        _claim: NewHostClaim<'_>,
    ) -> Result<Hosted, StoreError> {
        let existing = self.current(provider, movement.payment()).await?;
        Ok(match existing {
            Some(p) => match p.held_claims.get(key.as_str()).cloned() {
                Some(claim) => Hosted::Claimed(p, claim),
                None => Hosted::Elsewhere,
            },
            None => Hosted::Elsewhere,
        })
    }

    async fn take_over_held(
        &self,
        _provider: ProviderId,
        _payment: &Reference,
        _key: &IdempotencyKey,
        _previous: &OwnerToken,
        _token: &OwnerToken,
        _lease_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn finalize_held(
        &self,
        _provider: ProviderId,
        _payment: &Reference,
        _key: &IdempotencyKey,
        _token: &OwnerToken,
        _answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        Ok(FinalizeOutcome::Done)
    }

    async fn refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        key: &IdempotencyKey,
    ) -> Result<RefundOutcome, StoreError> {
        let existing = self.current(provider, &facts.payment_reference).await?;
        Ok(match judge_refund(existing.clone(), facts, key) {
            RefundJudgement::Decided(outcome) => outcome,
            RefundJudgement::Aim(w) => {
                let Some(mut p) = existing else {
                    return Ok(RefundOutcome::NotYetPaid(None));
                };
                let amount = facts.money.amount.get();
                let debit = if w.repeats_withdrawal {
                    Some(amount)
                } else {
                    paired_debit(w.pair, amount)
                };
                p.status = w.target;
                p.refunded_minor = p.refunded_minor.saturating_add(amount);
                p.refund_keys.push(key.clone());
                p.history.push(entry(key, w.target, amount, debit));
                self.keep(&p);
                RefundOutcome::Applied(p)
            }
        })
    }

    async fn dispute(
        &self,
        provider: ProviderId,
        facts: &DisputeFacts,
        movement: DisputeMovement,
        key: &IdempotencyKey,
    ) -> Result<DisputeOutcome, StoreError> {
        let existing = self.current(provider, &facts.payment_reference).await?;
        Ok(match judge_dispute(existing.clone(), facts, key) {
            DisputeJudgement::Decided(outcome) => outcome,
            DisputeJudgement::Aim(w) => {
                let Some(mut p) = existing else {
                    return Ok(DisputeOutcome::NotYetPaid(None));
                };
                let amount = facts.money.amount.get();
                let debit = match movement {
                    DisputeMovement::Withdrawal => paired_debit(w.pair, amount),
                    _ => None,
                };
                p.dispute_keys.push(key.clone());
                p.history.push(entry(key, w.at, amount, debit));
                self.keep(&p);
                DisputeOutcome::Applied(p)
            }
        })
    }

    async fn park_debit(
        &self,
        provider: ProviderId,
        reference: &Reference,
        debit: &ParkedDebit,
    ) -> Result<ParkOutcome, StoreError> {
        let existing = self.current(provider, reference).await?;
        if existing.as_ref().is_some_and(|p| p.status.is_paid()) {
            return Ok(ParkOutcome::PaidMeanwhile);
        }
        let mut p = existing
            .unwrap_or_else(|| PaymentRecord::blank(provider, reference, PaymentStatus::Pending));
        if !p.parked_debits.contains(debit) {
            p.parked_debits.push(debit.clone());
        }
        self.keep(&p);
        Ok(ParkOutcome::Parked)
    }

    async fn reverse_refund(
        &self,
        provider: ProviderId,
        facts: &RefundFacts,
        refund_key: &IdempotencyKey,
    ) -> Result<ReversalOutcome, StoreError> {
        let existing = self.current(provider, &facts.payment_reference).await?;
        Ok(match judge_reversal(existing.clone(), facts, refund_key) {
            ReversalJudgement::Decided(outcome) => outcome,
            ReversalJudgement::Write(w) => {
                let Some(mut p) = existing else {
                    return Ok(ReversalOutcome::NotYetPaid);
                };
                p.reversed_refund_keys.push(refund_key.clone());
                if let ReversalWrite::Restore(status) = w {
                    p.status = status;
                }
                self.keep(&p);
                match w {
                    ReversalWrite::Restore(_) => ReversalOutcome::Applied(p),
                    ReversalWrite::Void => ReversalOutcome::Voided(p),
                }
            }
        })
    }

    async fn bound_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
    ) -> Result<Option<Reference>, StoreError> {
        self.inner.bound_reference(provider, transaction_id).await
    }

    async fn bind_reference(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        reference: &Reference,
    ) -> Result<Binding, StoreError> {
        let bound = self.inner.bound_reference(provider, transaction_id).await?;
        Ok(Binding {
            reference: bound.unwrap_or_else(|| reference.clone()),
            parked: Vec::new(),
        })
    }

    async fn park_on_transaction(
        &self,
        provider: ProviderId,
        transaction_id: &str,
        _debit: &ParkedDebit,
    ) -> Result<TransactionPark, StoreError> {
        Ok(
            match self.inner.bound_reference(provider, transaction_id).await? {
                Some(reference) => TransactionPark::Bound(reference),
                None => TransactionPark::Parked,
            },
        )
    }

    async fn stop_asking(
        &self,
        _provider: ProviderId,
        _reference: &Reference,
        _status: PaymentStatus,
        _note: &str,
    ) -> Result<bool, StoreError> {
        Err(read_only("stop_asking"))
    }

    async fn payment(
        &self,
        provider: ProviderId,
        reference: &Reference,
    ) -> Result<Option<PaymentRecord>, StoreError> {
        self.current(provider, reference).await
    }
}

impl<S: Ledger + Send + Sync> Ledger for DryRun<S> {
    async fn post(&self, posting: &Posting) -> Result<PostOutcome, StoreError> {
        let in_run = |p: &Posting| p.key == posting.key && p.account == posting.account;
        if lock(&self.postings).0.iter().any(in_run) || self.inner.posted(posting).await? {
            return Ok(PostOutcome::AlreadyPosted);
        }
        lock(&self.postings).0.push(posting.clone());
        Ok(PostOutcome::Posted)
    }

    async fn layout(&self) -> Result<Layout, StoreError> {
        self.inner.layout().await
    }

    async fn placement_layout(&self) -> Result<Layout, StoreError> {
        self.inner.placement_layout().await
    }

    async fn grow_layout(&self, _want: Layout) -> Result<Layout, StoreError> {
        Err(read_only("grow_layout"))
    }

    async fn posted(&self, posting: &Posting) -> Result<bool, StoreError> {
        self.inner.posted(posting).await
    }

    async fn entries(
        &self,
        account: &crate::domain::AccountId,
    ) -> Result<Vec<Posting>, StoreError> {
        self.inner.entries(account).await
    }
}

impl<S: EventLog + Send + Sync> EventLog for DryRun<S> {
    /// Nothing is logged: a dry run leaves no delivery behind.
    async fn append(&self, _delivery: &Delivery) -> Result<(), StoreError> {
        Ok(())
    }

    async fn query(
        &self,
        filter: &LogFilter,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<LogPage, StoreError> {
        self.inner.query(filter, limit, cursor).await
    }

    async fn query_oldest_first(
        &self,
        filter: &LogFilter,
        limit: usize,
        after: &str,
    ) -> Result<Vec<Delivery>, StoreError> {
        self.inner.query_oldest_first(filter, limit, after).await
    }

    async fn mark_redriven(
        &self,
        _delivery: &Delivery,
        _outcome: Outcome,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn cursor(&self, name: &str) -> Result<Option<String>, StoreError> {
        self.inner.cursor(name).await
    }

    async fn save_cursor(&self, _name: &str, _to: &str) -> Result<(), StoreError> {
        Err(read_only("save_cursor"))
    }

    async fn with_body(&self, delivery: &Delivery) -> Result<Delivery, StoreError> {
        self.inner.with_body(delivery).await
    }

    async fn fill_details(&self, deliveries: &mut [Delivery]) -> Result<(), StoreError> {
        self.inner.fill_details(deliveries).await
    }

    async fn rollups(
        &self,
        kind: RollupKind,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Rollups, StoreError> {
        self.inner.rollups(kind, from_ms, to_ms).await
    }

    /// Not stored: a dry run writes nothing, not even a cache.
    async fn put_rollup(
        &self,
        _kind: RollupKind,
        _minute_ms: i64,
        _counts: &MinuteCounts,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn day_rollups(&self, kind: RollupKind, days: &[i64]) -> Result<Rollups, StoreError> {
        self.inner.day_rollups(kind, days).await
    }

    /// Not stored, as [`EventLog::put_rollup`].
    async fn put_day_rollup(
        &self,
        _kind: RollupKind,
        _day_ms: i64,
        _counts: &MinuteCounts,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

impl<S: Payouts + Send + Sync> Payouts for DryRun<S> {
    async fn payout(&self, id: &PayoutId) -> Result<Option<PayoutRecord>, StoreError> {
        self.inner.payout(id).await
    }

    async fn open_payout(&self, _new: NewPayout<'_>) -> Result<PayoutRecord, StoreError> {
        Err(read_only("open_payout"))
    }

    async fn reserve(&self, _payout: &PayoutRecord) -> Result<PayoutRecord, StoreError> {
        Err(read_only("reserve"))
    }

    async fn take_call(
        &self,
        _id: &PayoutId,
        _ticket: calls::CallTicket<'_>,
    ) -> Result<Option<PayoutRecord>, StoreError> {
        Err(read_only("take_call"))
    }

    async fn note_provider(
        &self,
        _id: &PayoutId,
        _note: calls::ProviderNote<'_>,
    ) -> Result<(), StoreError> {
        Err(read_only("note_provider"))
    }

    /// A word whose claim is on its payout is judged from it; any other goes the claims
    /// table's way, which this store already answers by judgement.
    async fn settle_held(
        &self,
        id: &PayoutId,
        word: HeldWordCall<'_>,
        _claim: NewHostClaim<'_>,
    ) -> Result<HeldWord, StoreError> {
        Ok(match self.inner.payout(id).await? {
            Some(p) => match p.held_claims.get(word.key.as_str()).cloned() {
                Some(claim) => HeldWord::Claimed(p, claim),
                None => HeldWord::Elsewhere,
            },
            None => HeldWord::Elsewhere,
        })
    }

    async fn take_over_word(
        &self,
        _id: &PayoutId,
        _key: &IdempotencyKey,
        _previous: &OwnerToken,
        _token: &OwnerToken,
        _lease_ms: i64,
    ) -> Result<bool, StoreError> {
        Ok(true)
    }

    async fn finalize_word(
        &self,
        _id: &PayoutId,
        _key: &IdempotencyKey,
        _token: &OwnerToken,
        _answer: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        Ok(FinalizeOutcome::Done)
    }

    /// A dry run flags nothing: its answer already says the word is a conflict.
    async fn note_conflict(&self, _id: &PayoutId, _reason: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn settle_payout(
        &self,
        id: &PayoutId,
        origin: WordOrigin,
        word: TransferState,
        _provider_status: &str,
    ) -> Result<SettleOutcome, StoreError> {
        let current = self.inner.payout(id).await?;
        Ok(match judge_settle(current, &origin, word) {
            SettleJudgement::Decided(outcome) => outcome,
            SettleJudgement::Move {
                mut current,
                to,
                movement,
                ..
            } => {
                current.status = to;
                current.words.push(word.as_str().to_owned());
                SettleOutcome::Applied {
                    record: current,
                    movement,
                }
            }
        })
    }

    async fn open_payouts(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> Result<Vec<PayoutRecord>, StoreError> {
        self.inner.open_payouts(before_ms, limit).await
    }
}
