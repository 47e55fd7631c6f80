//! Disputes (chargebacks): money the provider takes from the merchant for a disputed payment, and
//! gives back if the merchant wins. Each way is its own movement under its own key
//! (`{provider}:dispute_withdrawal:{dispute}`, `{provider}:dispute_reinstatement:{dispute}`),
//! recorded on the payment in the write that makes it (`dispute_keys`), so the judge below can
//! tell "already done by us" from "not yet possible" after a failed write.
//!
//! A withdrawal lowers what can still be refunded (`refundable_minor`, which may go below zero:
//! the provider has already taken the money), so a refund event that later reports the same money
//! (Paystack refunds an accepted dispute) cannot debit it again.

use serde::Serialize;

use super::pairs::{self, PairGuard, Side};
use super::{HistoryEntry, Mismatch, PaymentRecord};
use crate::domain::{DisputeFacts, IdempotencyKey, Operation, PaymentStatus};

/// Outcome of recording a dispute's movement on its payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DisputeOutcome {
    Applied(PaymentRecord),
    AlreadyApplied(PaymentRecord),
    /// The payment is not paid yet (absent, PENDING, PROCESSING, FAILED): no account or ledger
    /// shard to move money on. Parked: the provider retries, reconciliation re-drives it.
    NotYetPaid(Option<PaymentRecord>),
    Mismatch(Mismatch, PaymentRecord),
    /// A reinstatement whose withdrawal is not applied yet: the money that comes back is not
    /// spendable before the money that left. Parked like a dispute before its payment: the
    /// provider retries, reconciliation re-drives it.
    AwaitingWithdrawal(PaymentRecord),
    /// Other writers kept changing the payment; a retry settles it.
    Contended,
}

/// What a failed dispute write means.
#[derive(Debug, Clone, PartialEq, Eq)]
#[expect(
    clippy::large_enum_variant,
    reason = "a judgement lives for one match after a failed write; boxing would allocate for nothing"
)]
pub enum DisputeJudgement {
    Decided(DisputeOutcome),
    /// Write again as this says.
    Aim(DisputeWrite),
}

/// A dispute write's aim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DisputeWrite {
    /// The paid status the payment is expected in: the write records it in its history entry
    /// and is conditioned on it.
    pub at: PaymentStatus,
    /// On a payment whose refunds repeat its disputes ([`pairs`]), the totals read and whether
    /// this withdrawal is the second report of a refund's money.
    pub pair: Option<PairGuard>,
}

impl DisputeWrite {
    /// The first write's aim: most disputes hit a payment that is PAID with nothing refunded.
    pub fn first(key: &IdempotencyKey) -> Self {
        DisputeWrite {
            at: PaymentStatus::Paid,
            pair: pairs_withdrawal(key).then_some(PairGuard::FIRST),
        }
    }
}

/// A withdrawal on a provider whose refunds may repeat it.
fn pairs_withdrawal(key: &IdempotencyKey) -> bool {
    key.operation() == Some(Operation::DisputeWithdrawal)
        && key
            .provider()
            .is_some_and(pairs::repeats_disputes_as_refunds)
}

/// Decides a failed dispute write from the payment as it is now.
pub fn judge_dispute(
    existing: Option<PaymentRecord>,
    facts: &DisputeFacts,
    key: &IdempotencyKey,
) -> DisputeJudgement {
    use DisputeJudgement::{Aim, Decided};
    let Some(e) = existing else {
        return Decided(DisputeOutcome::NotYetPaid(None));
    };
    if e.dispute_keys.contains(key) {
        return Decided(DisputeOutcome::AlreadyApplied(e));
    }
    if let Some(m) = super::currency_mismatch(&e, facts.money.currency) {
        return Decided(DisputeOutcome::Mismatch(m, e));
    }
    if let Some(withdrawal) = withdrawal_key(facts, key) {
        if !e.dispute_keys.contains(&withdrawal) {
            return Decided(DisputeOutcome::AwaitingWithdrawal(e));
        }
    }
    if e.status.is_paid() {
        let pair = pairs_withdrawal(key).then(|| {
            let amount = facts.money.amount.get();
            pairs::guard(
                e.refunded_minor,
                e.disputed_minor,
                &e.history,
                Side::Withdrawal,
                amount,
            )
        });
        Aim(DisputeWrite { at: e.status, pair })
    } else {
        Decided(DisputeOutcome::NotYetPaid(Some(e)))
    }
}

/// For a reinstatement's key, the key of the withdrawal it gives back (the same dispute): a
/// reinstatement applies only after it, so no balance ever holds money the provider has not
/// yet let go of (Stripe may deliver `funds_reinstated` before `funds_withdrawn`).
pub fn withdrawal_key(facts: &DisputeFacts, key: &IdempotencyKey) -> Option<IdempotencyKey> {
    match (key.operation(), key.provider()) {
        (Some(Operation::DisputeReinstatement), Some(provider)) => Some(IdempotencyKey::new(
            provider,
            Operation::DisputeWithdrawal,
            &facts.dispute,
        )),
        _ => None,
    }
}

/// One dispute as a payment shows it (`payments show`, the read API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DisputeView {
    pub dispute: String,
    /// `funds_withdrawn`, `funds_reinstated` once the merchant won it back, or `declined` when
    /// the merchant won before any money was taken.
    pub status: &'static str,
    pub withdrawn_minor: i64,
    pub reinstated_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withdrawn_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reinstated_at_ms: Option<i64>,
}

/// The disputes of a payment, from its history (each dispute movement appends one entry, noted
/// with its key and amount), in the order they first moved.
pub fn disputes_of(history: &[HistoryEntry]) -> Vec<DisputeView> {
    let mut views: Vec<DisputeView> = Vec::new();
    for h in history {
        let key = IdempotencyKey::from_stored(h.note.clone());
        let Some(op) = key.operation() else { continue };
        let Some(dispute) = h.note.splitn(3, ':').nth(2) else {
            continue;
        };
        if !matches!(
            op,
            Operation::DisputeWithdrawal
                | Operation::DisputeReinstatement
                | Operation::DisputeDeclined
        ) {
            continue;
        }
        let at = views.iter().position(|v| v.dispute == dispute);
        let view = match at {
            Some(i) => &mut views[i],
            None => {
                views.push(DisputeView {
                    dispute: dispute.to_owned(),
                    status: "funds_withdrawn",
                    withdrawn_minor: 0,
                    reinstated_minor: 0,
                    withdrawn_at_ms: None,
                    reinstated_at_ms: None,
                });
                let last = views.len() - 1;
                &mut views[last]
            }
        };
        let amount = h.amount_minor.unwrap_or(0);
        if op == Operation::DisputeDeclined {
            // Declined after a withdrawal cannot happen (the money was taken); keep what moved.
            if view.withdrawn_minor == 0 {
                view.status = "declined";
            }
        } else if op == Operation::DisputeWithdrawal {
            view.withdrawn_minor = amount;
            view.withdrawn_at_ms = Some(h.at_ms);
        } else {
            view.reinstated_minor = amount;
            view.reinstated_at_ms = Some(h.at_ms);
            view.status = "funds_reinstated";
        }
    }
    views
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Money, ProviderId, Reference};
    use crate::payments::tests::{ngn, R};

    fn facts() -> R<DisputeFacts> {
        Ok(DisputeFacts {
            dispute: Reference::parse("dp_1")?,
            payment_reference: Reference::parse("pi_1")?,
            money: Money::new(400, ngn())?,
        })
    }

    fn record(status: PaymentStatus) -> R<PaymentRecord> {
        let mut p = crate::payments::tests::record(status)?;
        p.currency = Some(ngn());
        Ok(p)
    }

    #[test]
    fn a_dispute_waits_for_its_payment_and_applies_once() -> R {
        let f = facts()?;
        let key = IdempotencyKey::new(ProviderId::STRIPE, Operation::DisputeWithdrawal, &f.dispute);
        assert!(matches!(
            judge_dispute(None, &f, &key),
            DisputeJudgement::Decided(DisputeOutcome::NotYetPaid(None))
        ));
        for waiting in [
            PaymentStatus::Pending,
            PaymentStatus::Processing,
            PaymentStatus::Failed,
        ] {
            assert!(matches!(
                judge_dispute(Some(record(waiting)?), &f, &key),
                DisputeJudgement::Decided(DisputeOutcome::NotYetPaid(Some(_)))
            ));
        }
        assert_eq!(
            judge_dispute(Some(record(PaymentStatus::PartiallyRefunded)?), &f, &key),
            DisputeJudgement::Aim(DisputeWrite {
                at: PaymentStatus::PartiallyRefunded,
                pair: None
            })
        );
        let mut done = record(PaymentStatus::Paid)?;
        done.dispute_keys.push(key.clone());
        assert!(matches!(
            judge_dispute(Some(done), &f, &key),
            DisputeJudgement::Decided(DisputeOutcome::AlreadyApplied(_))
        ));
        let mut usd = record(PaymentStatus::Paid)?;
        usd.currency = Some(crate::domain::Currency::parse("USD")?);
        assert!(matches!(
            judge_dispute(Some(usd), &f, &key),
            DisputeJudgement::Decided(DisputeOutcome::Mismatch(..))
        ));
        Ok(())
    }

    #[test]
    fn a_payment_shows_each_dispute_and_how_it_ended() {
        let entry = |note: &str, at_ms: i64, amount: i64| HistoryEntry {
            at_ms,
            status: PaymentStatus::Paid,
            note: note.to_owned(),
            amount_minor: Some(amount),
            debit_minor: None,
        };
        let views = disputes_of(&[
            entry("stripe:payment:pi_1", 1, 1_000),
            entry("stripe:dispute_withdrawal:dp_1", 2, 400),
            entry("stripe:dispute_withdrawal:dp_2", 3, 100),
            entry("stripe:dispute_reinstatement:dp_1", 4, 400),
            entry("paystack:dispute_declined:7", 5, 900),
        ]);
        assert_eq!(views.len(), 3);
        assert_eq!(
            (
                views[2].dispute.as_str(),
                views[2].status,
                views[2].withdrawn_minor
            ),
            ("7", "declined", 0)
        );
        assert_eq!(
            (
                views[0].dispute.as_str(),
                views[0].status,
                views[0].withdrawn_minor,
                views[0].reinstated_minor
            ),
            ("dp_1", "funds_reinstated", 400, 400)
        );
        assert_eq!(
            (views[1].dispute.as_str(), views[1].status),
            ("dp_2", "funds_withdrawn")
        );
    }
}
