//! One outflow reported twice: Paystack takes the money of a dispute resolved against the
//! merchant (`charge.dispute.resolve`, `refund_amount`) *by refunding the customer*, so the same
//! money also arrives as a `refund.processed` for that amount, in either order, possibly at the
//! same instant. Neither payload names the other (the refund webhook carries no dispute id).
//!
//! The rule: on a payment of a provider that [`repeats_disputes_as_refunds`], a refund and a
//! dispute withdrawal of the **same amount** are one outflow. Whichever comes second *pairs*
//! with the first still unpaired one on the other side: it is recorded (the refund in
//! `refund_keys` and `refunded_minor`, the withdrawal in `dispute_keys` and `disputed_minor`)
//! but debits nothing, and its delivery is answered 2xx (money already counted), never 422.
//!
//! Why amounts and not a guess from totals: a manual partial refund and a later dispute of
//! another amount are two outflows, and are both debited at once (nothing is spendable that
//! the provider is about to take). The one case the rule gets wrong for a while is a manual
//! refund of exactly an open dispute's amount: it pairs, and the dispute's own refund, when it
//! arrives, finds nothing to pair with and debits, so the ledger converges to the provider's
//! word once both refunds are in. It debits even past the payment's remainder (the manual
//! refund may have taken all of it): a refund that repeats a paired withdrawal's amount may
//! exceed the remainder by that withdrawal's amount, once per such withdrawal, conditioned on
//! the totals ([`repeats_a_paired_withdrawal`]); any other refund past the remainder is refused.
//!
//! # How the decision is kept
//!
//! | written in the movement's own conditional write | why |
//! |---|---|
//! | the history entry's `amount_minor` and `debit_minor` (0 when paired) | a retry after a crash posts exactly what the write decided, whatever the code or config is then |
//! | the condition `refunded_minor = :r AND disputed_minor = :d` (the totals the judge read) | the two sides are decided one at a time: two first arrivals racing cannot both debit, nor both pair |
//!
//! Which entry pairs with which is replayed from the history in write order ([`open_on`]), so
//! no other attribute is kept.
//!
//! Not handled, because it cannot arrive: a reversal of a paired refund. A reversal credits the
//! refund's full amount back and restores its remainder, which for a refund that debited
//! nothing would be money that never left. Paystack (the one pairing provider) reports a failed
//! refund only as `refund.failed` for one it never processed, and payhook ignores that event
//! (`providers::paystack`): a refund that paired was reported processed. A provider that pairs
//! and reverses must make the reversal read [`debit_of`] first.

use super::HistoryEntry;
use crate::domain::{IdempotencyKey, Operation, ProviderId};

/// Providers whose accepted disputes come back as refunds of the same money. Paystack alone:
/// Stripe, Adyen and Flutterwave report a chargeback only as a dispute (a refund of a disputed
/// charge is a second outflow there).
pub fn repeats_disputes_as_refunds(provider: ProviderId) -> bool {
    provider == ProviderId::PAYSTACK
}

/// The two reports of one outflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Refund,
    Withdrawal,
}

impl Side {
    fn of(key: &IdempotencyKey) -> Option<Side> {
        match key.operation()? {
            Operation::Refund => Some(Side::Refund),
            Operation::DisputeWithdrawal => Some(Side::Withdrawal),
            _ => None,
        }
    }
}

/// What the judge read, and the write it aims: the totals to condition on, and whether this
/// movement pairs (debits nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairGuard {
    pub refunded_minor: i64,
    pub disputed_minor: i64,
    pub paired: bool,
}

impl PairGuard {
    /// The first write's guess: nothing refunded or disputed yet (the common case). A wrong
    /// guess only fails the condition, and the judge aims again from what is stored.
    pub const FIRST: PairGuard = PairGuard {
        refunded_minor: 0,
        disputed_minor: 0,
        paired: false,
    };

    /// The money this movement takes from the payment.
    pub fn debit_minor(self, amount_minor: i64) -> i64 {
        if self.paired {
            0
        } else {
            amount_minor
        }
    }
}

/// The guard for a new movement on `side` of `amount_minor`, from the stored totals and history.
pub fn guard(
    refunded_minor: i64,
    disputed_minor: i64,
    history: &[HistoryEntry],
    side: Side,
    amount_minor: i64,
) -> PairGuard {
    let other = match side {
        Side::Refund => Side::Withdrawal,
        Side::Withdrawal => Side::Refund,
    };
    PairGuard {
        refunded_minor,
        disputed_minor,
        paired: open_on(history, other).contains(&amount_minor),
    }
}

/// Amounts of the movements on `side` still waiting for their other report, oldest first.
/// Replays the history in write order: an entry that debited opens; an entry that debited
/// nothing closes the oldest open one of its amount on the other side.
pub fn open_on(history: &[HistoryEntry], side: Side) -> Vec<i64> {
    let mut refunds: Vec<i64> = Vec::new();
    let mut withdrawals: Vec<i64> = Vec::new();
    for h in history {
        let key = IdempotencyKey::from_stored(h.note.clone());
        let (Some(s), Some(amount)) = (Side::of(&key), h.amount_minor) else {
            continue;
        };
        let (mine, theirs) = match s {
            Side::Refund => (&mut refunds, &mut withdrawals),
            Side::Withdrawal => (&mut withdrawals, &mut refunds),
        };
        if h.debit_minor == Some(0) {
            if let Some(i) = theirs.iter().position(|a| *a == amount) {
                theirs.remove(i);
            }
        } else {
            mine.push(amount);
        }
    }
    match side {
        Side::Refund => refunds,
        Side::Withdrawal => withdrawals,
    }
}

/// The money counted twice in `refunded_minor + disputed_minor`: the amounts of the movements
/// that paired. What may still be refunded is paid − refunded − disputed + this.
pub fn overlap_minor(history: &[HistoryEntry]) -> i64 {
    history
        .iter()
        .filter(|h| h.debit_minor == Some(0))
        .filter_map(|h| h.amount_minor)
        .fold(0_i64, i64::saturating_add)
}

/// Whether a refund of `amount_minor` that pairs with nothing, and would take `excess_minor`
/// more than the payment's remainder, is the dispute's own refund of a withdrawal that paired
/// with an earlier refund of the same amount (a manual refund of exactly the dispute's amount).
/// Then the earlier pairing was wrong: both refunds left, and this one debits in full. Bounded:
/// the excess may not pass what such withdrawals account for (`amount × their count`), so a
/// refund of other money is still refused.
pub fn repeats_a_paired_withdrawal(
    history: &[HistoryEntry],
    amount_minor: i64,
    excess_minor: i64,
) -> bool {
    let paired = history
        .iter()
        .filter(|h| h.debit_minor == Some(0) && h.amount_minor == Some(amount_minor))
        .filter(|h| {
            Side::of(&IdempotencyKey::from_stored(h.note.clone())) == Some(Side::Withdrawal)
        })
        .count();
    let covered = i64::try_from(paired)
        .ok()
        .and_then(|n| n.checked_mul(amount_minor));
    excess_minor > 0 && covered.is_some_and(|c| excess_minor <= c)
}

/// What the movement under `key` debited, as its own write recorded it; `None` when the write
/// recorded no decision (every provider but a pairing one, and entries written before pairing),
/// which means its full amount.
pub fn debit_of(history: &[HistoryEntry], key: &IdempotencyKey) -> Option<i64> {
    history
        .iter()
        .find(|h| h.note == key.as_str())
        .and_then(|h| h.debit_minor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{PaymentStatus, Reference};

    fn entry(op: Operation, id: &str, amount: i64, debit: i64) -> HistoryEntry {
        let reference = Reference::parse(id).unwrap_or_else(|_| unreachable!());
        HistoryEntry {
            at_ms: 0,
            status: PaymentStatus::Paid,
            note: IdempotencyKey::new(ProviderId::PAYSTACK, op, &reference).to_string(),
            amount_minor: Some(amount),
            debit_minor: Some(debit),
        }
    }

    #[test]
    fn the_second_report_of_an_amount_pairs_with_the_first_and_only_once() {
        let dispute = entry(Operation::DisputeWithdrawal, "9", 180_000, 180_000);
        let history = vec![dispute];
        let g = guard(0, 180_000, &history, Side::Refund, 180_000);
        assert!(g.paired);
        assert_eq!(g.debit_minor(180_000), 0);
        // Another amount is another outflow.
        assert!(!guard(0, 180_000, &history, Side::Refund, 100_000).paired);
        // Nor does a second withdrawal pair with a withdrawal.
        assert!(!guard(0, 180_000, &history, Side::Withdrawal, 180_000).paired);

        // Once the refund paired, a second refund of that amount is a second outflow.
        let mut history = history;
        history.push(entry(Operation::Refund, "r1", 180_000, 0));
        assert!(open_on(&history, Side::Withdrawal).is_empty());
        assert!(!guard(180_000, 180_000, &history, Side::Refund, 180_000).paired);
        assert_eq!(overlap_minor(&history), 180_000);
        let key = IdempotencyKey::from_stored(history[1].note.clone());
        assert_eq!(debit_of(&history, &key), Some(0));
    }

    /// M3 of the #30 red team: a manual refund of 100, a chargeback of 100 that paired with
    /// it, then the dispute's own refund of 100: it repeats the paired withdrawal and debits;
    /// a third refund of 100, or one of another amount, does not.
    #[test]
    fn the_disputes_own_refund_after_a_wrong_pairing_debits_once() {
        let history = vec![
            entry(Operation::Refund, "manual", 100, 100),
            entry(Operation::DisputeWithdrawal, "d1", 100, 0),
        ];
        assert!(repeats_a_paired_withdrawal(&history, 100, 100));
        assert!(!repeats_a_paired_withdrawal(&history, 100, 200));
        assert!(!repeats_a_paired_withdrawal(&history, 60, 60));
        // A refund that paired (debit 0) is not a paired withdrawal.
        let refunds_only = vec![entry(Operation::Refund, "r", 100, 0)];
        assert!(!repeats_a_paired_withdrawal(&refunds_only, 100, 100));
        assert!(!repeats_a_paired_withdrawal(&history, 100, 0));
    }

    #[test]
    fn entries_without_a_recorded_amount_never_pair() {
        let mut old = entry(Operation::Refund, "r0", 5_000, 5_000);
        old.amount_minor = None;
        old.debit_minor = None;
        assert!(!guard(0, 0, &[old], Side::Withdrawal, 5_000).paired);
    }
}
