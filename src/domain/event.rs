//! Normalised events: what a provider's webhook means, whatever its shape on the wire.

use std::fmt;

use serde::Serialize;

use super::{Money, PaymentStatus};

/// Why an identifier was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {0} characters")]
    TooLong(usize),
    #[error("must not contain control characters")]
    BadCharacter,
}

/// Identifiers become parts of DynamoDB keys. `#` (and `:`) are allowed, as providers use them in
/// references: every composite key holds exactly one free-text part, after fixed parts that
/// contain no separator (`{provider}#{reference}`, `{provider}:{operation}:{reference}`) or before
/// a trailing number (`{account}#{shard}`), so no two identifiers can ever share a key, and no
/// encoding is needed (an encoding would move the keys of values stored before it).
fn checked(text: &str, max: usize) -> Result<String, TextError> {
    if text.is_empty() {
        return Err(TextError::Empty);
    }
    if text.chars().count() > max {
        return Err(TextError::TooLong(max));
    }
    if text.chars().any(char::is_control) {
        return Err(TextError::BadCharacter);
    }
    Ok(text.to_owned())
}

macro_rules! text_newtype {
    ($(#[$doc:meta])* $name:ident, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(text: &str) -> Result<Self, TextError> {
                checked(text, $max).map($name)
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_newtype!(
    /// A provider's reference for one money movement (Paystack `reference`, Stripe `pi_…`).
    Reference, 200
);
impl Reference {
    /// A reference payhook makes itself (a payout id: `po_` and hex digits), which always
    /// passes [`Reference::parse`].
    pub fn generated(text: String) -> Self {
        Reference(text)
    }
}

text_newtype!(
    /// The account (wallet, merchant) a movement credits or debits.
    AccountId, 200
);

/// The provider adapter a delivery came through (`generic`, `stripe`, …); part of every key, so
/// two providers' references can never collide. A short lowercase name, held inline so it stays
/// `Copy`. Which names are served is the provider registry's business
/// ([`crate::providers::REGISTRY`]), not the vocabulary's: an item stored under any provider
/// still reads.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProviderId {
    len: u8,
    bytes: [u8; ProviderId::MAX_LEN],
}

impl ProviderId {
    pub const MAX_LEN: usize = 15;

    /// A name of 1 to 15 characters of `a-z`, `0-9`, `_`: it is a key prefix, a URL path
    /// segment and part of env var names (`PAYHOOK_{NAME}_SECRETS`).
    pub const fn new(name: &str) -> Option<Self> {
        let b = name.as_bytes();
        if b.is_empty() || b.len() > Self::MAX_LEN {
            return None;
        }
        let mut bytes = [0u8; Self::MAX_LEN];
        let mut i = 0;
        while i < b.len() {
            if !(b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_') {
                return None;
            }
            bytes[i] = b[i];
            i += 1;
        }
        Some(ProviderId {
            len: b.len() as u8,
            bytes,
        })
    }

    /// A provider's own constant (`providers::stripe::ID`): a bad name fails the build.
    #[expect(
        clippy::panic,
        reason = "const evaluation only: a bad constant is a compile error, never a runtime panic"
    )]
    pub const fn from_static(name: &'static str) -> Self {
        match Self::new(name) {
            Some(id) => id,
            None => panic!("a provider name is 1-15 characters of a-z, 0-9, _"),
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::new(name)
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (checked in `new`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

impl fmt::Display for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Debug for ProviderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ProviderId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What a claim's operation moves, as stored on the claim: the canonical JSON of its
/// [`ClaimedFacts`] (kind, reference, account, amount, currency; never event ids or times). The
/// same key with another fingerprint is other money under one reference: a conflict, never a
/// duplicate. Compared whole, never parsed except to resume a stuck claim. The claim crate's type.
pub use dynamo_claim::Fingerprint;

/// The money movements the claim protocol guards. State-only events are not operations: a
/// single conditional transition is idempotent by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Operation {
    /// Credit the account for a successful payment.
    Payment,
    /// Debit the account for one refund of a paid payment.
    Refund,
    /// Credit back a refund the provider reports failed after it succeeded.
    RefundReversal,
    /// Debit what the provider withdrew for a dispute (chargeback), once per dispute.
    DisputeWithdrawal,
    /// Credit what the provider gave back when the merchant won a dispute, once per dispute.
    DisputeReinstatement,
    /// Record, moving nothing, that the merchant won a dispute the provider had not taken
    /// money for (Paystack's `declined` resolution), so the payment lists it.
    DisputeDeclined,
    /// Debit a payout's amount when it is reserved, before the transfer is sent
    /// (`{provider}:payout:{payout id}`).
    Payout,
    /// Credit a payout's reservation back when the provider says its transfer failed.
    PayoutFailed,
    /// Debit a payout again when the provider says it paid after it said it failed.
    PayoutPaid,
    /// Credit a payout back when the provider reverses its transfer (after paying, or before).
    PayoutReversed,
}

impl Operation {
    pub const ALL: [Operation; 10] = [
        Operation::Payment,
        Operation::Refund,
        Operation::RefundReversal,
        Operation::DisputeWithdrawal,
        Operation::DisputeReinstatement,
        Operation::DisputeDeclined,
        Operation::Payout,
        Operation::PayoutFailed,
        Operation::PayoutPaid,
        Operation::PayoutReversed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Payment => "payment",
            Operation::Refund => "refund",
            Operation::RefundReversal => "refund_reversal",
            Operation::DisputeWithdrawal => "dispute_withdrawal",
            Operation::DisputeReinstatement => "dispute_reinstatement",
            Operation::DisputeDeclined => "dispute_declined",
            Operation::Payout => "payout",
            Operation::PayoutFailed => "payout_failed",
            Operation::PayoutPaid => "payout_paid",
            Operation::PayoutReversed => "payout_reversed",
        }
    }
}

/// `{provider}:{operation}:{reference}`: stable across retries and unique per money movement.
/// Never the event id: two events about one movement (Stripe's `charge.succeeded` and
/// `payment_intent.succeeded`) must share a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn new(provider: ProviderId, op: Operation, reference: &Reference) -> Self {
        IdempotencyKey(format!("{}:{}:{}", provider, op.as_str(), reference))
    }

    /// Rebuilds a key read back from the store; it was written by [`IdempotencyKey::new`].
    pub fn from_stored(text: String) -> Self {
        IdempotencyKey(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The provider named in the key (`{provider}:{operation}:{reference}`), if it names one.
    pub fn provider(&self) -> Option<ProviderId> {
        self.0
            .split_once(':')
            .and_then(|(p, _)| ProviderId::parse(p))
    }

    /// The operation named in the key (`{provider}:{operation}:{reference}`), if it names one.
    pub fn operation(&self) -> Option<Operation> {
        let (_, rest) = self.0.split_once(':')?;
        let (op, _) = rest.split_once(':')?;
        Operation::ALL.into_iter().find(|o| o.as_str() == op)
    }

    /// For a refund reversal's key, the key of the refund it reverses.
    pub fn refund_of_reversal(&self) -> Option<IdempotencyKey> {
        let (provider, rest) = self.0.split_once(':')?;
        let reference = rest.strip_prefix("refund_reversal:")?;
        Some(IdempotencyKey(format!("{provider}:refund:{reference}")))
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A successful payment: credit `account` with `money`. `account` is `None` when the payload
/// names none (a Stripe Checkout intent without the metadata key, Paystack `metadata: 0`): the
/// payment's registered account (or the configured default) is credited, and with neither the
/// delivery is acknowledged as `unassigned` and nothing moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentFacts {
    pub reference: Reference,
    pub account: Option<AccountId>,
    pub money: Money,
}

/// A successful refund: debit the paid payment's account by `money`, at most what was paid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundFacts {
    pub refund_reference: Reference,
    pub payment_reference: Reference,
    pub money: Money,
}

/// Money a provider moved for a dispute (chargeback) of a paid payment: what it withdrew from
/// the merchant, or what it reinstated when the merchant won. `money` is the customer's money the
/// provider moved, never its fees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisputeFacts {
    /// The provider's dispute id (Stripe `dp_…`/`du_…`, Paystack's numeric id).
    pub dispute: Reference,
    pub payment_reference: Reference,
    pub money: Money,
}

/// Which way a dispute moved money.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DisputeMovement {
    /// Taken from the merchant (debit).
    Withdrawal,
    /// Given back to the merchant (credit).
    Reinstatement,
    /// Ended in the merchant's favour before any money was taken: recorded on the payment,
    /// nothing moves.
    Declined,
}

impl DisputeMovement {
    pub fn operation(self) -> Operation {
        match self {
            DisputeMovement::Withdrawal => Operation::DisputeWithdrawal,
            DisputeMovement::Reinstatement => Operation::DisputeReinstatement,
            DisputeMovement::Declined => Operation::DisputeDeclined,
        }
    }
}

/// A state-only event (processing, failed): the money fields are checked when present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFacts {
    pub reference: Reference,
    pub account: Option<AccountId>,
    pub money: Option<Money>,
}

/// What a delivery asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    PaymentSucceeded(PaymentFacts),
    /// Move the payment to a state that is not money: PROCESSING or FAILED.
    PaymentState {
        facts: StateFacts,
        to: PaymentStatus,
    },
    RefundSucceeded(RefundFacts),
    /// The customer's money returned whatever the payment's state (Adyen `CANCEL_OR_REFUND`:
    /// a cancel of an uncaptured payment, a refund of a captured one). payhook's own record
    /// says which: a refund, keyed as one, when payhook credited the payment; nothing (200) when
    /// it never did. The provider's unsigned hints are not needed.
    CancelOrRefund(RefundFacts),
    /// A refund that failed after it succeeded (Stripe `refund.failed`): credit its debit back,
    /// once. A reversal of a refund never applied moves nothing and voids it.
    RefundReversed(RefundFacts),
    /// A refund whose payload gives the amount in major units but no currency (Flutterwave's
    /// `refund.completed`): the pipeline prices it in the payment's currency, which never changes
    /// once stored, and then applies it as a [`EventKind::RefundSucceeded`].
    RefundUnpriced(UnpricedRefund),
    /// Money the provider moved for a dispute: each way once, under its own key, whatever the
    /// order (a reinstatement first waits, parked, until its withdrawal has applied).
    Dispute {
        facts: DisputeFacts,
        movement: DisputeMovement,
    },
    /// A dispute movement whose amount is in major units and names no currency (a Flutterwave
    /// chargeback as its API lists it): priced in its payment's currency by the pipeline, as
    /// [`EventKind::RefundUnpriced`] is, then applied as an [`EventKind::Dispute`].
    DisputeUnpriced(UnpricedDispute),
    /// What the provider says about a transfer payhook sent for a payout (a settlement
    /// webhook), by the reference payhook gave it.
    Transfer(TransferFacts),
    /// A type we log but do not act on.
    Ignored,
}

/// The provider's word about a transfer. Only `Success`, `Failed` and `Reversed` are final;
/// `Pending` changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferState {
    Pending,
    Success,
    Failed,
    Reversed,
}

impl TransferState {
    pub fn as_str(self) -> &'static str {
        match self {
            TransferState::Pending => "pending",
            TransferState::Success => "success",
            TransferState::Failed => "failed",
            TransferState::Reversed => "reversed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            TransferState::Pending,
            TransferState::Success,
            TransferState::Failed,
            TransferState::Reversed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// The key a final word is applied under (`{provider}:{operation}:{payout id}`): one per
    /// word, so each is applied once whatever the order and however often it is delivered.
    pub fn operation(self) -> Option<Operation> {
        match self {
            TransferState::Pending => None,
            TransferState::Success => Some(Operation::PayoutPaid),
            TransferState::Failed => Some(Operation::PayoutFailed),
            TransferState::Reversed => Some(Operation::PayoutReversed),
        }
    }
}

/// A settlement webhook: `reference` is the payout id payhook sent as the provider reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferFacts {
    pub reference: Reference,
    pub state: TransferState,
    /// The provider's own status word (`success`, `SUCCESSFUL`, `reversed`), for the record.
    pub provider_status: String,
    /// The money the word names, when it names any: a word moves a payout only if it names the
    /// payout's own amount and currency. Not part of the claim's fingerprint (the word is).
    pub money: Option<Money>,
    /// The recipient the word names, when it names one: a word moves a payout only if it names
    /// the payout's own recipient. Not part of the claim's fingerprint either.
    pub recipient: Option<Recipient>,
}

/// Who a transfer word says the money went to, in the terms of the payout's destination: the
/// destination field it is compared with (`recipient` for Paystack, `account` for Stripe,
/// `account_number` for Flutterwave) and the value the provider reported. Shared by the
/// providers (which read it) and payouts (which judge it), so it lives below both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub field: &'static str,
    pub value: String,
}

impl Recipient {
    pub fn new(field: &'static str, value: impl Into<String>) -> Self {
        Recipient {
            field,
            value: value.into(),
        }
    }
}

/// See [`EventKind::DisputeUnpriced`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpricedDispute {
    pub dispute: Reference,
    pub payment_reference: Reference,
    pub movement: DisputeMovement,
    /// The amount as written, in major units (`10.5`).
    pub amount_major: String,
}

/// See [`EventKind::RefundUnpriced`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnpricedRefund {
    pub refund_reference: Reference,
    pub payment_reference: Reference,
    /// The amount as written in the payload, in major units (`10.5`).
    pub amount_major: String,
}

/// One delivery, verified and mapped by its provider adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormalisedEvent {
    pub provider: ProviderId,
    pub event_id: String,
    pub event_type: String,
    pub kind: EventKind,
    /// The provider's own id of the transaction, when the adapter keys payments by a field a
    /// setting chooses (Flutterwave `tx_ref` or `id`). The pipeline binds the transaction to the
    /// reference chosen the first time it was seen, so changing the setting never re-keys (and
    /// re-credits) a payment.
    pub transaction_id: Option<String>,
}

impl EventKind {
    /// The payment and the major-unit amount of a movement still to be priced.
    pub fn unpriced(&self) -> Option<(&Reference, &str)> {
        match self {
            EventKind::RefundUnpriced(u) => Some((&u.payment_reference, &u.amount_major)),
            EventKind::DisputeUnpriced(u) => Some((&u.payment_reference, &u.amount_major)),
            _ => None,
        }
    }

    /// The movement priced in `money` (its payment's currency), if it was unpriced.
    pub fn priced(&self, money: Money) -> Option<EventKind> {
        match self {
            EventKind::RefundUnpriced(u) => Some(EventKind::RefundSucceeded(RefundFacts {
                refund_reference: u.refund_reference.clone(),
                payment_reference: u.payment_reference.clone(),
                money,
            })),
            EventKind::DisputeUnpriced(u) => Some(EventKind::Dispute {
                facts: DisputeFacts {
                    dispute: u.dispute.clone(),
                    payment_reference: u.payment_reference.clone(),
                    money,
                },
                movement: u.movement,
            }),
            _ => None,
        }
    }
}

impl NormalisedEvent {
    /// The key of the money movement, if this event moves money.
    pub fn key(&self) -> Option<IdempotencyKey> {
        match &self.kind {
            EventKind::PaymentSucceeded(p) => Some(IdempotencyKey::new(
                self.provider,
                Operation::Payment,
                &p.reference,
            )),
            EventKind::RefundSucceeded(r) | EventKind::CancelOrRefund(r) => Some(
                IdempotencyKey::new(self.provider, Operation::Refund, &r.refund_reference),
            ),
            EventKind::RefundReversed(r) => Some(IdempotencyKey::new(
                self.provider,
                Operation::RefundReversal,
                &r.refund_reference,
            )),
            EventKind::RefundUnpriced(u) => Some(IdempotencyKey::new(
                self.provider,
                Operation::Refund,
                &u.refund_reference,
            )),
            EventKind::Dispute { facts, movement } => Some(IdempotencyKey::new(
                self.provider,
                movement.operation(),
                &facts.dispute,
            )),
            EventKind::DisputeUnpriced(u) => Some(IdempotencyKey::new(
                self.provider,
                u.movement.operation(),
                &u.dispute,
            )),
            EventKind::Transfer(t) => t
                .state
                .operation()
                .map(|op| IdempotencyKey::new(self.provider, op, &t.reference)),
            EventKind::PaymentState { .. } | EventKind::Ignored => None,
        }
    }

    /// The money the event names, for the log (an unpriced movement and a transfer's
    /// settlement without an amount name none).
    pub fn money(&self) -> Option<Money> {
        match &self.kind {
            EventKind::PaymentSucceeded(p) => Some(p.money),
            EventKind::RefundSucceeded(r)
            | EventKind::RefundReversed(r)
            | EventKind::CancelOrRefund(r) => Some(r.money),
            EventKind::Dispute { facts, .. } => Some(facts.money),
            EventKind::Transfer(t) => t.money,
            EventKind::PaymentState { facts, .. } => facts.money,
            EventKind::RefundUnpriced(_) | EventKind::DisputeUnpriced(_) | EventKind::Ignored => {
                None
            }
        }
    }

    /// The account the event names, if it names one.
    pub fn account(&self) -> Option<&AccountId> {
        match &self.kind {
            EventKind::PaymentSucceeded(p) => p.account.as_ref(),
            EventKind::PaymentState { facts, .. } => facts.account.as_ref(),
            _ => None,
        }
    }

    /// The payment reference the event is about, for the log.
    pub fn reference(&self) -> Option<&Reference> {
        match &self.kind {
            EventKind::PaymentSucceeded(p) => Some(&p.reference),
            EventKind::PaymentState { facts, .. } => Some(&facts.reference),
            EventKind::RefundSucceeded(r)
            | EventKind::RefundReversed(r)
            | EventKind::CancelOrRefund(r) => Some(&r.payment_reference),
            EventKind::RefundUnpriced(u) => Some(&u.payment_reference),
            EventKind::Dispute { facts, .. } => Some(&facts.payment_reference),
            EventKind::DisputeUnpriced(u) => Some(&u.payment_reference),
            EventKind::Transfer(t) => Some(&t.reference),
            EventKind::Ignored => None,
        }
    }

    /// The same event about payment `reference` (a bound transaction's first-seen reference).
    pub fn with_payment_reference(mut self, reference: Reference) -> Self {
        match &mut self.kind {
            EventKind::PaymentSucceeded(p) => p.reference = reference,
            EventKind::PaymentState { facts, .. } => facts.reference = reference,
            EventKind::RefundSucceeded(r)
            | EventKind::RefundReversed(r)
            | EventKind::CancelOrRefund(r) => r.payment_reference = reference,
            EventKind::RefundUnpriced(u) => u.payment_reference = reference,
            EventKind::Dispute { facts, .. } => facts.payment_reference = reference,
            EventKind::DisputeUnpriced(u) => u.payment_reference = reference,
            EventKind::Transfer(_) | EventKind::Ignored => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_refuse_separators_and_empties() {
        assert_eq!(Reference::parse(""), Err(TextError::Empty));
        assert!(
            Reference::parse("order#17").is_ok(),
            "providers use # in references"
        );
        assert_eq!(Reference::parse("a\nb"), Err(TextError::BadCharacter));
        assert_eq!(
            Reference::parse(&"x".repeat(201)),
            Err(TextError::TooLong(200))
        );
        assert!(Reference::parse("pay_1").is_ok());
    }

    #[test]
    fn provider_names_are_short_lowercase_words() {
        assert_eq!(
            ProviderId::parse("stripe").map(|p| p.to_string()),
            Some("stripe".into())
        );
        assert_eq!(format!("{:>8}", ProviderId::from_static("x1")), "      x1");
        for bad in ["", "Stripe", "a:b", "a#b", "sixteen_chars_xx", "é"] {
            assert_eq!(ProviderId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn key_is_provider_operation_reference() -> Result<(), TextError> {
        let r = Reference::parse("pay_1")?;
        let (generic, stripe) = (
            ProviderId::from_static("generic"),
            ProviderId::from_static("stripe"),
        );
        let k = IdempotencyKey::new(generic, Operation::Payment, &r);
        assert_eq!(k.as_str(), "generic:payment:pay_1");
        let k = IdempotencyKey::new(stripe, Operation::Refund, &r);
        assert_eq!(k.as_str(), "stripe:refund:pay_1");
        assert_eq!(k.operation(), Some(Operation::Refund));
        assert_eq!(k.provider(), Some(stripe));
        assert_eq!(
            IdempotencyKey::from_stored("nonsense".into()).provider(),
            None
        );
        assert_eq!(
            IdempotencyKey::from_stored("generic:refund_reversal:re_1".into()).operation(),
            Some(Operation::RefundReversal)
        );
        assert_eq!(
            IdempotencyKey::from_stored("nonsense".into()).operation(),
            None
        );
        Ok(())
    }
}

/// The money facts of a claimed operation, serialised canonically and stored with the claim.
/// It is the fingerprint that tells a duplicate (same facts) from a conflict (other facts), and
/// all reconciliation needs to finish a claim whose invocation died: the claim was only taken
/// after the delivery's signature verified, so these facts are the provider's word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClaimedFacts {
    /// `account` is absent when the payload named none (credited to the payment's own account).
    Payment {
        reference: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        account: Option<String>,
        amount: i64,
        currency: String,
    },
    Refund {
        reference: String,
        payment_reference: String,
        amount: i64,
        currency: String,
    },
    RefundReversal {
        reference: String,
        payment_reference: String,
        amount: i64,
        currency: String,
    },
    /// `reference` is the dispute's id.
    Dispute {
        movement: DisputeMovement,
        reference: String,
        payment_reference: String,
        amount: i64,
        currency: String,
    },
    /// A settlement word about payout `reference`: the word is the fact (the money is the
    /// payout's own, recorded when it was reserved).
    Transfer {
        reference: String,
        state: TransferState,
    },
}

impl ClaimedFacts {
    /// The facts of a money-moving event; `None` for state-only or ignored events.
    pub fn of(kind: &EventKind) -> Option<Self> {
        match kind {
            EventKind::PaymentSucceeded(p) => Some(ClaimedFacts::Payment {
                reference: p.reference.to_string(),
                account: p.account.as_ref().map(ToString::to_string),
                amount: p.money.amount.get(),
                currency: p.money.currency.to_string(),
            }),
            EventKind::RefundSucceeded(r) | EventKind::CancelOrRefund(r) => {
                Some(ClaimedFacts::Refund {
                    reference: r.refund_reference.to_string(),
                    payment_reference: r.payment_reference.to_string(),
                    amount: r.money.amount.get(),
                    currency: r.money.currency.to_string(),
                })
            }
            EventKind::RefundReversed(r) => Some(ClaimedFacts::RefundReversal {
                reference: r.refund_reference.to_string(),
                payment_reference: r.payment_reference.to_string(),
                amount: r.money.amount.get(),
                currency: r.money.currency.to_string(),
            }),
            EventKind::Dispute { facts, movement } => Some(ClaimedFacts::Dispute {
                movement: *movement,
                reference: facts.dispute.to_string(),
                payment_reference: facts.payment_reference.to_string(),
                amount: facts.money.amount.get(),
                currency: facts.money.currency.to_string(),
            }),
            EventKind::Transfer(t) if t.state != TransferState::Pending => {
                // Not the provider's status word: a webhook and an API answer word it
                // differently and are still the same fact.
                Some(ClaimedFacts::Transfer {
                    reference: t.reference.to_string(),
                    state: t.state,
                })
            }
            // Priced (and so claimed) only once its payment's currency is known.
            EventKind::Transfer(_)
            | EventKind::RefundUnpriced(_)
            | EventKind::DisputeUnpriced(_)
            | EventKind::PaymentState { .. }
            | EventKind::Ignored => None,
        }
    }

    /// The canonical text stored as the claim's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::new(serde_json::to_string(self).unwrap_or_default())
    }

    /// Rebuilds the event kind from a stored fingerprint (reconciliation of a stuck claim).
    pub fn parse_kind(fingerprint: &Fingerprint) -> Result<EventKind, String> {
        let facts: ClaimedFacts =
            serde_json::from_str(fingerprint.as_str()).map_err(|e| e.to_string())?;
        let money = |amount: i64, currency: &str| -> Result<Money, String> {
            let c = super::Currency::parse(currency).map_err(|e| e.to_string())?;
            Money::new(amount, c).map_err(|e| e.to_string())
        };
        let refund = |reference: &str,
                      payment_reference: &str,
                      amount: i64,
                      currency: &str|
         -> Result<RefundFacts, String> {
            Ok(RefundFacts {
                refund_reference: Reference::parse(reference).map_err(|e| e.to_string())?,
                payment_reference: Reference::parse(payment_reference)
                    .map_err(|e| e.to_string())?,
                money: money(amount, currency)?,
            })
        };
        Ok(match facts {
            ClaimedFacts::Payment {
                reference,
                account,
                amount,
                currency,
            } => EventKind::PaymentSucceeded(PaymentFacts {
                reference: Reference::parse(&reference).map_err(|e| e.to_string())?,
                account: account
                    .as_deref()
                    .map(AccountId::parse)
                    .transpose()
                    .map_err(|e| e.to_string())?,
                money: money(amount, &currency)?,
            }),
            ClaimedFacts::Refund {
                reference,
                payment_reference,
                amount,
                currency,
            } => EventKind::RefundSucceeded(refund(
                &reference,
                &payment_reference,
                amount,
                &currency,
            )?),
            ClaimedFacts::RefundReversal {
                reference,
                payment_reference,
                amount,
                currency,
            } => EventKind::RefundReversed(refund(
                &reference,
                &payment_reference,
                amount,
                &currency,
            )?),
            ClaimedFacts::Dispute {
                movement,
                reference,
                payment_reference,
                amount,
                currency,
            } => {
                let r = refund(&reference, &payment_reference, amount, &currency)?;
                EventKind::Dispute {
                    facts: DisputeFacts {
                        dispute: r.refund_reference,
                        payment_reference: r.payment_reference,
                        money: r.money,
                    },
                    movement,
                }
            }
            ClaimedFacts::Transfer { reference, state } => EventKind::Transfer(TransferFacts {
                reference: Reference::parse(&reference).map_err(|e| e.to_string())?,
                state,
                provider_status: state.as_str().to_owned(),
                money: None,
                recipient: None,
            }),
        })
    }
}

#[cfg(test)]
mod facts_tests {
    use super::*;
    use crate::domain::Currency;

    #[test]
    fn fingerprints_round_trip_and_ignore_event_identity() -> Result<(), String> {
        let kind = EventKind::PaymentSucceeded(PaymentFacts {
            reference: Reference::parse("pay_1").map_err(|e| e.to_string())?,
            account: Some(AccountId::parse("wallet_42").map_err(|e| e.to_string())?),
            money: Money::new(125_000, Currency::parse("NGN").map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?,
        });
        let fp = ClaimedFacts::of(&kind)
            .map(|f| f.fingerprint())
            .ok_or("no facts")?;
        assert_eq!(
            fp.as_str(),
            r#"{"op":"payment","reference":"pay_1","account":"wallet_42","amount":125000,"currency":"NGN"}"#
        );
        assert_eq!(ClaimedFacts::parse_kind(&fp)?, kind);
        // Without an account the field is absent, so the fingerprint differs from any account's.
        let EventKind::PaymentSucceeded(mut p) = kind else {
            return Err("not a payment".into());
        };
        p.account = None;
        let kind = EventKind::PaymentSucceeded(p);
        let fp = ClaimedFacts::of(&kind)
            .map(|f| f.fingerprint())
            .ok_or("no facts")?;
        assert_eq!(
            fp.as_str(),
            r#"{"op":"payment","reference":"pay_1","amount":125000,"currency":"NGN"}"#
        );
        assert_eq!(ClaimedFacts::parse_kind(&fp)?, kind);
        Ok(())
    }
}
