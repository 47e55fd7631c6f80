//! Debits that arrive before their payment is paid (a refund, a dispute withdrawal): parked
//! (409, the provider redelivers), and *written down on the payment* in the same conditional
//! write that finds it not yet paid, so the credit that pays it can take them first.
//!
//! Why on the payment, in that write: the money order. The credit is what makes money
//! spendable, and a payout may reserve the instant it lands; if the parked refund only came
//! back with the provider's next redelivery (minutes, hours), that payout could spend what the
//! refund takes, and the refund would then leave the account below zero by something payhook
//! initiated. So the pipeline's credit applies and posts every parked debit of its payment
//! *before* it posts the credit. A refund that parks races the write that pays: the park is
//! conditioned on the payment not being paid, so either the paid write's answer holds the
//! parked debit, or the park fails and the refund is applied at once instead.
//!
//! | state of the payment item | a debit that finds it not paid | the credit |
//! |---|---|---|
//! | absent | creates it PENDING (no account, no money fields) holding the debit | pays it as any PENDING payment, then applies the debit before posting |
//! | PENDING / PROCESSING / FAILED | adds the debit (`parked_debits`, a string set: a redelivery adds nothing) | the same |
//! | paid | the park's condition fails: the debit is judged again and applies | — |
//!
//! A debit that names its payment only by a provider transaction not yet bound to a payment
//! reference (an Adyen REFUND or CHARGEBACK before its AUTHORISATION: `originalReference`, while
//! the payment is keyed by `merchantReference`) cannot know which payment item its credit will
//! read. It waits on the transaction's binding item instead (`{provider}:txn:{id}`, conditioned
//! on the transaction being unbound), and the payment event that binds the transaction (one
//! conditional write that returns the item) moves it onto the payment before that payment's
//! write. A park that finds the transaction bound meanwhile is judged again on its payment.
//!
//! A parked debit is kept after it applied (its key is then in `refund_keys` or
//! `dispute_keys`), so every retry of the credit finds the same list, and posts what a crash
//! left unposted (each step idempotent under the debit's own key).

use serde::Serialize;

use super::PaymentRecord;
use crate::domain::{Currency, IdempotencyKey, Money, Operation, Reference};

/// A provider transaction's binding to its payment reference, and the debits that waited on
/// the transaction before it was bound (moved onto the payment by the binding event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub reference: Reference,
    pub parked: Vec<ParkedDebit>,
}

/// What parking a debit on a provider transaction found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransactionPark {
    /// Written down on the unbound transaction: the payment event that binds it moves it
    /// onto the payment, whose credit takes it first.
    Parked,
    /// Bound meanwhile to this payment reference: judge the debit again there.
    Bound(Reference),
}

/// One debit waiting for its payment: its movement's key and money.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParkedDebit {
    pub key: IdempotencyKey,
    pub money: Money,
}

/// What parking a debit found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkOutcome {
    /// Written down on the not-yet-paid payment: its credit takes it first.
    Parked,
    /// The payment was paid meanwhile: judge the debit again (it applies now).
    PaidMeanwhile,
}

impl ParkedDebit {
    /// As stored in `parked_debits`: `{currency}:{amount}:{key}`.
    pub fn tag(&self) -> String {
        format!(
            "{}:{}:{}",
            self.money.currency,
            self.money.amount.get(),
            self.key
        )
    }

    /// Reads a stored tag back; `None` for one this release cannot read (skipped, so the
    /// debit waits for its own redelivery as before).
    pub fn parse(tag: &str) -> Option<ParkedDebit> {
        let mut parts = tag.splitn(3, ':');
        let currency = Currency::parse(parts.next()?).ok()?;
        let amount = parts.next()?.parse::<i64>().ok()?;
        let key = IdempotencyKey::from_stored(parts.next()?.to_owned());
        Some(ParkedDebit {
            key,
            money: Money::new(amount, currency).ok()?,
        })
    }

    /// The movement this is: a refund or a dispute withdrawal, and its own reference (the
    /// refund's or the dispute's).
    pub fn movement(&self) -> Option<(Operation, Reference)> {
        let op = self.key.operation()?;
        let reference = self.key.as_str().splitn(3, ':').nth(2)?;
        Some((op, Reference::parse(reference).ok()?))
    }
}

/// The parked debits a credit of `p` must take first: all but those the provider voided
/// (reported failed before they applied), in a stable order. One already applied is taken
/// again (its write finds it done and its ledger entry is posted if a crash left it
/// unposted), since a key in `refund_keys` says the payment write happened, not that its
/// debit was posted; and so is one applied and then reversed, whose reversal credited back
/// what this debit must still post.
pub fn to_take(p: &PaymentRecord) -> Vec<&ParkedDebit> {
    p.parked_debits
        .iter()
        .filter(|d| !voided(p, &d.key))
        .collect()
}

fn voided(p: &PaymentRecord, key: &IdempotencyKey) -> bool {
    p.reversed_refund_keys.contains(key) && !p.refund_keys.contains(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProviderId;
    use crate::payments::tests::{key, record, R};
    use crate::payments::PaymentStatus;

    #[test]
    fn a_tag_reads_back_as_the_debit_it_was() {
        let reference = Reference::parse("rf_1").unwrap_or_else(|_| unreachable!());
        let key = IdempotencyKey::new(ProviderId::GENERIC, Operation::Refund, &reference);
        let ngn = Currency::parse("NGN").unwrap_or_else(|_| unreachable!());
        let debit = ParkedDebit {
            key,
            money: Money::new(400, ngn).unwrap_or_else(|_| unreachable!()),
        };
        let back = ParkedDebit::parse(&debit.tag());
        assert_eq!(back.as_ref(), Some(&debit));
        assert_eq!(
            back.and_then(|d| d.movement()),
            Some((Operation::Refund, reference))
        );
        assert_eq!(ParkedDebit::parse("XX:1:k"), None);
    }

    /// Voided (failed before it applied): never taken. Applied, then reversed: still taken, so
    /// a credit retried after a crash posts the debit its reversal credited back.
    #[test]
    fn only_a_debit_voided_before_it_applied_is_left_out() -> R {
        let mut p = record(PaymentStatus::Pending)?;
        let (voided, reversed) = (
            key(Operation::Refund, "rf_v")?,
            key(Operation::Refund, "rf_r")?,
        );
        for k in [&voided, &reversed] {
            p.parked_debits.push(ParkedDebit {
                key: k.clone(),
                money: Money::new(100, Currency::parse("NGN")?)?,
            });
            p.reversed_refund_keys.push(k.clone());
        }
        p.refund_keys.push(reversed.clone());
        let keys: Vec<_> = to_take(&p).into_iter().map(|d| &d.key).collect();
        assert_eq!(keys, vec![&reversed]);
        Ok(())
    }
}
