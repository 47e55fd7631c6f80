//! The payment state machine. Every transition is one conditional write whose condition is
//! "status is one of [`PaymentStatus::sources_of`]", so it is monotonic: a terminal state never
//! regresses and zero items changed means someone already moved it.

use std::fmt;

use serde::Serialize;

/// Where a payment is. PENDING exists only for registered (expected) payments. FAILED is final
/// for statuses but not for money: a provider's later success still moves it to PAID.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PaymentStatus {
    Pending,
    Processing,
    Paid,
    PartiallyRefunded,
    Refunded,
    Failed,
}

impl PaymentStatus {
    pub const ALL: [PaymentStatus; 6] = [
        PaymentStatus::Pending,
        PaymentStatus::Processing,
        PaymentStatus::Paid,
        PaymentStatus::PartiallyRefunded,
        PaymentStatus::Refunded,
        PaymentStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PaymentStatus::Pending => "PENDING",
            PaymentStatus::Processing => "PROCESSING",
            PaymentStatus::Paid => "PAID",
            PaymentStatus::PartiallyRefunded => "PARTIALLY_REFUNDED",
            PaymentStatus::Refunded => "REFUNDED",
            PaymentStatus::Failed => "FAILED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        PaymentStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// The states a transition *to* `self` may start from. An absent payment counts as a source
    /// for PROCESSING, PAID and FAILED (webhooks may arrive for payments never registered); the
    /// store adds that to the condition.
    pub fn sources_of(self) -> &'static [PaymentStatus] {
        use PaymentStatus::*;
        match self {
            Pending => &[],
            Processing => &[Pending],
            // FAILED -> PAID is a recovery: the provider's later success is the truth (a retried
            // checkout under the same reference, a failure that was not final after all).
            Paid => &[Pending, Processing, Failed],
            Failed => &[Pending, Processing],
            // Refund transitions also check the refundable remainder in the same condition.
            PartiallyRefunded => &[Paid, PartiallyRefunded],
            Refunded => &[Paid, PartiallyRefunded],
        }
    }

    /// True once money has been received: refunds may apply.
    pub fn is_paid(self) -> bool {
        matches!(
            self,
            PaymentStatus::Paid | PaymentStatus::PartiallyRefunded | PaymentStatus::Refunded
        )
    }

    /// How far along the happy path a state is; an event whose target is not ahead is stale.
    pub fn rank(self) -> u8 {
        match self {
            PaymentStatus::Pending => 0,
            PaymentStatus::Processing => 1,
            PaymentStatus::Paid | PaymentStatus::Failed => 2,
            PaymentStatus::PartiallyRefunded => 3,
            PaymentStatus::Refunded => 4,
        }
    }
}

impl fmt::Display for PaymentStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::PaymentStatus::*;
    use super::*;

    #[test]
    fn terminal_states_never_regress() {
        for to in PaymentStatus::ALL {
            for from in to.sources_of() {
                assert!(from.rank() <= to.rank(), "{from} -> {to} would regress");
            }
        }
        assert!(!Processing.sources_of().contains(&Paid));
        // Money received is never taken back by a status: nothing moves PAID (or a refund of it)
        // to FAILED, PROCESSING or PENDING.
        for to in [Pending, Processing, Failed] {
            for paid in [Paid, PartiallyRefunded, Refunded] {
                assert!(!to.sources_of().contains(&paid), "{paid} -> {to}");
            }
        }
        assert!(
            Paid.sources_of().contains(&Failed),
            "a success after a failure credits"
        );
    }

    #[test]
    fn status_names_round_trip() {
        for s in PaymentStatus::ALL {
            assert_eq!(PaymentStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(PaymentStatus::parse("paid"), None);
    }
}
