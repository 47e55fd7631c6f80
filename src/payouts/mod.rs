//! Payouts: money out, exactly once. A caller asks (`POST /payouts` with an `Idempotency-Key`),
//! payhook reserves the amount against the account's ledger balance, sends one transfer under
//! a reference derived once from the payout, and settles it from the provider's word (its
//! answer, its webhooks, or reconciliation asking it). This module is the vocabulary and the
//! pure rules; `dynamodb::payouts` keeps the records and decides reservations, and
//! `pipeline::payouts` / `pipeline::transfers` run the steps.
//!
//! # States
//!
//! | status     | money on the ledger            | how it is left                                        |
//! |------------|--------------------------------|-------------------------------------------------------|
//! | `new`      | none                           | the reservation's decision (reserve or refuse)       |
//! | `refused`  | none                           | final: `insufficient_funds` (a new attempt, a new key)|
//! | `reserved` | `-amount` (`payout` entry)     | marked `sent` just before the transfer call           |
//! | `sent`     | `-amount`                      | the provider's word: success, failed, reversed        |
//! | `paid`     | `-amount`                      | `reversed` (a credit back)                            |
//! | `failed`   | `0` (`payout_failed` credit)   | `paid` if the provider says so after all (debit again)|
//! | `reversed` | `0` (`payout_reversed` credit) | final                                                 |
//!
//! Statuses only move right in the order `reserved < sent < failed < paid < reversed`, so each
//! final word is applied at most once and every order of the provider's words converges.

pub mod callers;
pub mod calls;

use std::collections::BTreeMap;
use std::future::Future;

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::domain::{
    AccountId, Currency, IdempotencyKey, Money, Operation, ProviderId, Recipient, Reference,
    TransferState,
};
use crate::idempotency::{FinalizeOutcome, HostClaim, NewHostClaim, OwnerToken, StoredResponse};
use crate::store::StoreError;

/// The longest `Idempotency-Key` accepted.
pub const MAX_KEY_LEN: usize = 255;
/// The largest `POST /payouts` body: a destination is a few fields, and the request is kept
/// whole on the claim (so reconciliation can finish it).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Sends of one payout's transfer at most (the first and resends under the same reference after
/// a lookup past the send's visibility window found nothing); past that the payout waits for a
/// person, never for a guess.
pub const MAX_SENDS: u32 = 3;

/// A payout's id, which is also the reference its transfer is sent under: `po_` and 32 hex
/// digits of SHA-256 over the caller and their `Idempotency-Key`. Derived, never drawn, so
/// every attempt of one key (a retry, a takeover, reconciliation) names the same transfer, and
/// two callers' equal keys name different ones. Lower-case letters, digits and `_` fit every
/// provider's reference rules (Paystack's are the narrowest).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PayoutId(String);

impl PayoutId {
    pub fn derive(caller: &str, key: &RequestKey) -> Self {
        let mut h = Sha256::new();
        h.update(caller.as_bytes());
        h.update([0]);
        h.update(key.as_str().as_bytes());
        let digest = h.finalize();
        let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        PayoutId(format!("po_{hex}"))
    }

    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("po_")?;
        (hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| PayoutId(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The provider reference (the same text).
    pub fn reference(&self) -> Reference {
        Reference::generated(self.0.clone())
    }

    /// The claim of the caller's request (`payout:{id}`): not a provider key, since the same
    /// `Idempotency-Key` with another provider in the body is a reused key, not another payout.
    pub fn claim_key(&self) -> IdempotencyKey {
        IdempotencyKey::from_stored(format!("{CLAIM_PREFIX}{}", self.0))
    }

    /// The payout a claim key is about, if it is a payout's.
    pub fn of_claim(key: &IdempotencyKey) -> Option<Self> {
        key.as_str()
            .strip_prefix(CLAIM_PREFIX)
            .and_then(PayoutId::parse)
    }
}

const CLAIM_PREFIX: &str = "payout:";

impl std::fmt::Display for PayoutId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A caller's `Idempotency-Key`: 1 to 255 visible ASCII characters (the IETF draft's key is a
/// Structured Field string, so a quoted form is accepted and unquoted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestKey(String);

impl RequestKey {
    pub fn parse(header: &str) -> Result<Self, FieldError> {
        let text = header.trim();
        let text = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(text);
        if text.is_empty() || text.len() > MAX_KEY_LEN {
            return Err(FieldError::new(
                "Idempotency-Key",
                "must be 1 to 255 characters",
            ));
        }
        if !text.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(FieldError::new(
                "Idempotency-Key",
                "must be visible ASCII characters",
            ));
        }
        Ok(RequestKey(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A refused request field: answered 400, naming the field, and nothing written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(field: &str, reason: impl Into<String>) -> Self {
        FieldError {
            field: field.to_owned(),
            reason: reason.into(),
        }
    }
}

/// A validated `POST /payouts` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayoutRequest {
    pub provider: ProviderId,
    pub account: AccountId,
    pub money: Money,
    /// The provider's recipient, as the provider wants it (Paystack `{"recipient"}`,
    /// Flutterwave `{"account_bank","account_number"}`, Stripe `{"account"}`): an object,
    /// passed through.
    pub destination: serde_json::Map<String, Value>,
    pub narration: Option<String>,
}

/// What the request checks need to know besides the body.
#[derive(Clone, Copy)]
pub struct Limits<'a> {
    /// The largest payout, in minor units of any currency (`PAYHOOK_PAYOUT_MAX_MINOR`).
    pub max_amount_minor: i64,
    /// Whether a provider can send transfers (and has an API configured here).
    pub supports: &'a dyn Fn(ProviderId) -> bool,
}

impl PayoutRequest {
    pub fn parse(body: &[u8], limits: Limits<'_>) -> Result<Self, FieldError> {
        if body.len() > MAX_REQUEST_BYTES {
            return Err(FieldError::new("body", "is larger than 8 KB"));
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| FieldError::new("body", format!("is not JSON: {e}")))?;
        let obj = value
            .as_object()
            .ok_or_else(|| FieldError::new("body", "must be a JSON object"))?;
        let text = |name: &str| -> Result<&str, FieldError> {
            obj.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| FieldError::new(name, "must be a string"))
        };
        // Which providers exist and pay out is the caller's word (`limits.supports`: the
        // registry and this deployment's configuration), so this module names no adapter.
        let provider = ProviderId::parse(text("provider")?)
            .ok_or_else(|| FieldError::new("provider", "is not a provider name"))?;
        if !(limits.supports)(provider) {
            return Err(FieldError::new(
                "provider",
                format!("{provider} has no payout support configured here"),
            ));
        }
        let account = AccountId::parse(text("account")?)
            .map_err(|e| FieldError::new("account", e.to_string()))?;
        let currency = Currency::parse(text("currency")?)
            .map_err(|e| FieldError::new("currency", e.to_string()))?;
        let amount = obj
            .get("amount")
            .and_then(Value::as_i64)
            .ok_or_else(|| FieldError::new("amount", "must be an integer of minor units"))?;
        if amount <= 0 {
            return Err(FieldError::new("amount", "must be above zero"));
        }
        if amount > limits.max_amount_minor {
            return Err(FieldError::new(
                "amount",
                format!(
                    "is above the maximum payout ({} minor units)",
                    limits.max_amount_minor
                ),
            ));
        }
        let money =
            Money::new(amount, currency).map_err(|e| FieldError::new("amount", e.to_string()))?;
        let destination = obj
            .get("destination")
            .and_then(Value::as_object)
            .filter(|d| !d.is_empty())
            .cloned()
            .ok_or_else(|| FieldError::new("destination", "must be a non-empty object"))?;
        let narration = match obj.get("narration") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= 200 => Some(s.clone()),
            Some(_) => {
                return Err(FieldError::new(
                    "narration",
                    "must be a string of at most 200 characters",
                ))
            }
        };
        Ok(PayoutRequest {
            provider,
            account,
            money,
            destination,
            narration,
        })
    }

    /// The request as canonical JSON (keys sorted): the claim's fingerprint, so the same key
    /// with another body is told apart, and all reconciliation needs to finish the request.
    pub fn fingerprint(&self) -> crate::domain::Fingerprint {
        let value = serde_json::json!({
            "provider": self.provider.as_str(),
            "account": self.account.as_str(),
            "amount": self.money.amount.get(),
            "currency": self.money.currency.as_str(),
            "destination": self.destination,
            "narration": self.narration,
        });
        crate::domain::Fingerprint::from_stored(value.to_string())
    }

    /// The request a fingerprint holds (a stuck payout claim, finished by reconciliation).
    pub fn from_fingerprint(fp: &crate::domain::Fingerprint) -> Result<Self, FieldError> {
        let supports = |_: ProviderId| true;
        Self::parse(
            fp.as_str().as_bytes(),
            Limits {
                // Checked when the request was first accepted; a lowered maximum since then
                // must not strand a payout already under way.
                max_amount_minor: crate::domain::MAX_AMOUNT_MINOR,
                supports: &supports,
            },
        )
    }
}

/// Where a payout is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PayoutStatus {
    New,
    Refused,
    Reserved,
    Sent,
    Failed,
    Paid,
    Reversed,
}

impl PayoutStatus {
    pub const ALL: [PayoutStatus; 7] = [
        PayoutStatus::New,
        PayoutStatus::Refused,
        PayoutStatus::Reserved,
        PayoutStatus::Sent,
        PayoutStatus::Failed,
        PayoutStatus::Paid,
        PayoutStatus::Reversed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PayoutStatus::New => "new",
            PayoutStatus::Refused => "refused",
            PayoutStatus::Reserved => "reserved",
            PayoutStatus::Sent => "sent",
            PayoutStatus::Failed => "failed",
            PayoutStatus::Paid => "paid",
            PayoutStatus::Reversed => "reversed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Not settled yet: reconciliation asks the provider about these.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            PayoutStatus::New | PayoutStatus::Reserved | PayoutStatus::Sent
        )
    }
}

impl std::fmt::Display for PayoutStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A payout as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PayoutRecord {
    pub payout: PayoutId,
    pub status: PayoutStatus,
    pub provider: ProviderId,
    pub account: AccountId,
    pub amount: i64,
    pub currency: Currency,
    pub destination: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub narration: Option<String>,
    /// The ledger shard of every entry of this payout, decided when it was opened.
    pub shard: u32,
    /// The reservation's movement time (its entry's sort key), decided when it was opened.
    pub reserve_at_ms: i64,
    /// The time of each settlement movement made, by operation (`payout_failed`, …), written
    /// in the same statement as the status it belongs to.
    pub moves: BTreeMap<String, i64>,
    /// The provider's final words applied (`success`, `failed`, `reversed`).
    pub words: Vec<String>,
    /// How many times the transfer was sent (the same reference each time).
    pub sends: u32,
    /// The last send's outcome is unknown (a timeout, a reset, a 5xx): ask before anything else.
    pub ambiguous: bool,
    /// The provider has said it has the transfer: a lookup that then finds nothing is its lag.
    pub accepted: bool,
    /// The provider refused the last send (a 4xx), as it worded it: asked about once, then
    /// failed if it was the first send (a refused resend may be refused for the first send's
    /// sake: it waits for a person).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// A word of the payout's own provider about its reference that named other money or
    /// another recipient: it moved nothing, and the payout waits for a person (never sent
    /// again: the reference is the provider's record of something else).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict: Option<String>,
    /// No call for this reference may start before this store time (see [`calls`]).
    pub call_until_ms: i64,
    /// From this store time a lookup that finds nothing proves the last send never arrived.
    pub absent_after_ms: i64,
    /// The provider's last status word, as it wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_status: Option<String>,
    /// The balance in the payout's currency when a reservation was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_minor: Option<i64>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// Settlement words' claims held on the payout (#44), by the word's key: the claim, not the
    /// payout, so never shown.
    #[serde(skip)]
    pub held_claims: BTreeMap<String, HostClaim>,
    /// One of those claims is APPLYING (the payout is listed under `POSTING#{shard}` until it
    /// is DONE): no other word takes its claim here meanwhile.
    #[serde(skip)]
    pub posting: bool,
}

impl PayoutRecord {
    pub fn money(&self) -> Result<Money, crate::domain::MoneyError> {
        Money::new(self.amount, self.currency)
    }

    /// The key of the reservation's debit.
    pub fn reservation_key(&self) -> IdempotencyKey {
        reservation_key(self.provider, &self.payout)
    }
}

/// `{provider}:payout:{payout id}`.
pub fn reservation_key(provider: ProviderId, payout: &PayoutId) -> IdempotencyKey {
    IdempotencyKey::new(provider, Operation::Payout, &payout.reference())
}

/// A payout to open: the request and where its reservation goes.
#[derive(Debug, Clone)]
pub struct NewPayout<'a> {
    pub payout: &'a PayoutId,
    pub request: &'a PayoutRequest,
    pub shard: u32,
}

/// What a provider word does to a payout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Move to `to`, from any of `from`; `movement` is the ledger entry the move makes (under
    /// `{provider}:{operation}:{payout}`) with its sign, if any.
    Move {
        from: &'static [PayoutStatus],
        to: PayoutStatus,
        movement: Option<(Operation, i64)>,
    },
    /// The payout is past what the word would make it (a late or repeated word).
    Stale,
    /// The payout's reservation is not decided yet: nothing was sent under it, so the word
    /// cannot be about it yet (retry later).
    Undecided,
}

const SENDING: &[PayoutStatus] = &[PayoutStatus::Reserved, PayoutStatus::Sent];
const DEBITED: &[PayoutStatus] = &[
    PayoutStatus::Reserved,
    PayoutStatus::Sent,
    PayoutStatus::Paid,
];

/// The rule: a word moves a payout only forward; a word that takes money back credits the
/// reservation once, and a success after a failure debits it again once.
pub fn settle(current: PayoutStatus, word: TransferState) -> Settlement {
    use PayoutStatus as P;
    use TransferState as W;
    let credit = |op| Some((op, 1));
    match (current, word) {
        (P::New, _) => Settlement::Undecided,
        (_, W::Pending) => Settlement::Stale,
        (P::Reserved | P::Sent, W::Success) => Settlement::Move {
            from: SENDING,
            to: P::Paid,
            movement: None,
        },
        (P::Failed, W::Success) => Settlement::Move {
            from: &[P::Failed],
            to: P::Paid,
            movement: Some((Operation::PayoutPaid, -1)),
        },
        (P::Reserved | P::Sent, W::Failed) => Settlement::Move {
            from: SENDING,
            to: P::Failed,
            movement: credit(Operation::PayoutFailed),
        },
        (P::Reserved | P::Sent | P::Paid, W::Reversed) => Settlement::Move {
            from: DEBITED,
            to: P::Reversed,
            movement: credit(Operation::PayoutReversed),
        },
        (P::Failed, W::Reversed) => Settlement::Move {
            from: &[P::Failed],
            to: P::Reversed,
            movement: None,
        },
        _ => Settlement::Stale,
    }
}

/// How applying a word went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// This attempt moved the payout; post `movement` if any.
    Applied {
        record: PayoutRecord,
        movement: Option<(Operation, i64)>,
    },
    /// An earlier attempt under this word moved it: post `movement` if any (idempotent).
    AlreadyApplied {
        record: PayoutRecord,
        movement: Option<(Operation, i64)>,
    },
    Stale(PayoutRecord),
    Undecided(PayoutRecord),
    /// The word is not about this payout: another provider's, or other money. Moves nothing.
    Foreign {
        record: PayoutRecord,
        reason: String,
    },
    /// No payout under that reference: a transfer payhook did not send.
    Unknown,
}

/// A settlement word's write with its claim held on its payout (#44), as the store found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeldWord {
    /// This write applied the word and took its claim (APPLYING, ours): post `movement`, if
    /// any, then finalize.
    Taken {
        record: PayoutRecord,
        movement: Option<(Operation, i64)>,
    },
    /// The word's claim is on the payout already: the claim crate's judge decides.
    Claimed(PayoutRecord, HostClaim),
    /// The word moves nothing now (stale, undecided, another provider's or other money, no
    /// such payout): answered without a claim, since nothing it could apply twice is written.
    Unmoved(SettleOutcome),
    /// Not for the payout to decide: the word was applied without a claim here (before #44, or
    /// through the claims table), another word's claim is APPLYING here (one `open` entry per
    /// item), or the claim does not fit (400 KB). The claims table decides, as before #44.
    Elsewhere,
}

/// Who says a word about a payout, and what money and recipient it names (when it names
/// them): a webhook, the answer to a send, a lookup's answer alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordOrigin {
    pub provider: ProviderId,
    pub money: Option<Money>,
    pub recipient: Option<Recipient>,
}

/// What a provider's word does to a payout, judged from the payout as it is (`None`: no
/// payout under that reference): decided, or one conditional move to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleJudgement {
    Decided(SettleOutcome),
    Move {
        current: PayoutRecord,
        from: &'static [PayoutStatus],
        to: PayoutStatus,
        movement: Option<(Operation, i64)>,
    },
}

/// The one settle decision, for the store's write and a dry run alike: a foreign word moves
/// nothing; a word applied before keeps the movement it made; otherwise [`settle`]'s rule.
pub fn judge_settle(
    current: Option<PayoutRecord>,
    origin: &WordOrigin,
    word: TransferState,
) -> SettleJudgement {
    use SettleJudgement::Decided;
    let Some(current) = current else {
        return Decided(SettleOutcome::Unknown);
    };
    if let Some(reason) = foreign(&current, origin) {
        return Decided(SettleOutcome::Foreign {
            record: current,
            reason,
        });
    }
    if current.words.iter().any(|w| w == word.as_str()) {
        // The status the word made may since have moved on; its movement stands.
        let movement = applied_movement(&current, word);
        return Decided(SettleOutcome::AlreadyApplied {
            record: current,
            movement,
        });
    }
    match settle(current.status, word) {
        Settlement::Move { from, to, movement } => SettleJudgement::Move {
            current,
            from,
            to,
            movement,
        },
        Settlement::Stale => Decided(SettleOutcome::Stale(current)),
        Settlement::Undecided => Decided(SettleOutcome::Undecided(current)),
    }
}

/// The movement a word applied to `record` made (its operation and sign), if it made one: what
/// an attempt that finishes the word posts, without judging the word again.
pub fn applied_movement(record: &PayoutRecord, word: TransferState) -> Option<(Operation, i64)> {
    word.operation()
        .filter(|op| record.moves.contains_key(op.as_str()))
        .map(|op| (op, if op == Operation::PayoutPaid { -1 } else { 1 }))
}

/// **The one judge of a provider's word about a transfer**, whatever carried it (a webhook,
/// the answer to a send, a lookup's answer): a word moves only the payout it is about: one
/// from the payout's own provider, naming its amount and currency when it names money, and
/// its recipient when it names one. `Some(reason)` when it is not.
///
/// A recipient is compared with the destination field the provider's adapter names
/// ([`Recipient::field`]); a destination without that field (a corridor described another
/// way) cannot be compared, and the money check still stands.
pub fn foreign(record: &PayoutRecord, origin: &WordOrigin) -> Option<String> {
    if origin.provider != record.provider {
        return Some(format!(
            "a {} word about a payout sent through {}",
            origin.provider, record.provider
        ));
    }
    if let Some(m) = origin.money {
        if m.amount.get() != record.amount || m.currency != record.currency {
            return Some(format!(
                "the word names {} {} for a payout of {} {}",
                m.amount.get(),
                m.currency,
                record.amount,
                record.currency
            ));
        }
    }
    let r = origin.recipient.as_ref()?;
    match record.destination.get(r.field).and_then(Value::as_str) {
        Some(ours) if ours != r.value => Some(format!(
            "the word names recipient {} {:?} for a payout to {:?}",
            r.field, r.value, ours
        )),
        _ => None,
    }
}

/// Whether a foreign word puts the payout in front of a person: one from the payout's own
/// provider (a transfer under its reference that is not this payout: someone must look). A
/// word signed by another provider is not about the payout at all, and moves nothing without
/// a flag: holding one provider's key must not let anyone raise every payout of another.
pub fn flags_a_person(record: &PayoutRecord, origin: &WordOrigin) -> bool {
    origin.provider == record.provider
}

/// The payouts capability of a store.
pub trait Payouts: Sync {
    fn payout(
        &self,
        id: &PayoutId,
    ) -> impl Future<Output = Result<Option<PayoutRecord>, StoreError>> + Send;

    /// Records a payout as `new` (its reservation's time and shard decided now) unless one
    /// exists under its id, which is returned instead: a retry meets the first attempt's.
    fn open_payout(
        &self,
        new: NewPayout<'_>,
    ) -> impl Future<Output = Result<PayoutRecord, StoreError>> + Send;

    /// Decides a `new` payout: reserved (its debit posted) or refused (not enough money). One
    /// decision per payout, whoever makes it; returns the record with it.
    fn reserve(
        &self,
        payout: &PayoutRecord,
    ) -> impl Future<Output = Result<PayoutRecord, StoreError>> + Send;

    /// Takes the right to make one call for the payout's reference (see [`calls`]): one
    /// conditional write that records until when the call may run, and for a send `sends` =
    /// `seen` → `seen + 1`. `None`: a call of someone else's may still run, or the payout moved
    /// on, and this attempt must not call.
    fn take_call(
        &self,
        id: &PayoutId,
        ticket: calls::CallTicket<'_>,
    ) -> impl Future<Output = Result<Option<PayoutRecord>, StoreError>> + Send;

    /// Records what the provider said that settles nothing (accepted and pending, a refusal to
    /// ask about, or no answer).
    fn note_provider(
        &self,
        id: &PayoutId,
        note: calls::ProviderNote<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Records that a word of the payout's own provider named other money or another
    /// recipient ([`foreign`]): the payout is shown to a person and never sent again.
    fn note_conflict(
        &self,
        id: &PayoutId,
        reason: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Applies a final word, under its key (one conditional write), if it is the payout's own
    /// provider's and names the payout's money ([`foreign`]).
    fn settle_payout(
        &self,
        id: &PayoutId,
        origin: WordOrigin,
        word: TransferState,
        provider_status: &str,
    ) -> impl Future<Output = Result<SettleOutcome, StoreError>> + Send;

    /// Applies a final word as [`Payouts::settle_payout`] does, taking its claim (`key`) on the
    /// payout in the same conditional write (#44).
    fn settle_held(
        &self,
        id: &PayoutId,
        word: HeldWordCall<'_>,
        claim: NewHostClaim<'_>,
    ) -> impl Future<Output = Result<HeldWord, StoreError>> + Send;

    /// Takes over `key`'s claim on the payout from `previous`, whose lease ran out: `false` when
    /// someone else took it over or finished it first.
    fn take_over_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        previous: &OwnerToken,
        token: &OwnerToken,
        lease_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks `key`'s claim on the payout DONE with `answer`, only if `token` still owns it.
    fn finalize_word(
        &self,
        id: &PayoutId,
        key: &IdempotencyKey,
        token: &OwnerToken,
        answer: &StoredResponse,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    /// Open payouts untouched since before `before_ms`, oldest first.
    fn open_payouts(
        &self,
        before_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<PayoutRecord>, StoreError>> + Send;
}

/// One settlement word as [`Payouts::settle_held`] applies it.
#[derive(Debug, Clone, Copy)]
pub struct HeldWordCall<'a> {
    pub origin: &'a WordOrigin,
    pub word: TransferState,
    pub provider_status: &'a str,
    pub key: &'a IdempotencyKey,
}

/// A provider's word about a transfer, as its API answered it: judged by [`foreign`] exactly
/// as the same word by webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferWord {
    pub state: TransferState,
    /// Its status word as it wrote it.
    pub status: String,
    /// The money it says the transfer moves, in ISO minor units (converted from its own).
    pub money: Option<Money>,
    pub recipient: Option<Recipient>,
}

impl TransferWord {
    /// A word naming neither money nor recipient.
    pub fn new(state: TransferState, status: impl Into<String>) -> Self {
        TransferWord {
            state,
            status: status.into(),
            money: None,
            recipient: None,
        }
    }

    pub fn with_money(mut self, money: Option<Money>) -> Self {
        self.money = money;
        self
    }

    pub fn with_recipient(mut self, recipient: Option<Recipient>) -> Self {
        self.recipient = recipient;
        self
    }
}

/// What a provider's transfer API said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransferAnswer {
    /// It has the transfer, in this state.
    Known(TransferWord),
    /// Asked: it has no transfer under the reference (a 404, an empty list). Not a word about
    /// money by itself: see [`calls`] for what it proves when.
    Absent { status: String },
    /// Sent: it refused to create the transfer (a 4xx other than the retryable ones), with
    /// this status.
    Refused { status: String },
    /// Sent: it refused the send in words that prove it already holds a transfer under the
    /// reference (a duplicate reference, an idempotency key already used). Never a failure:
    /// the payout waits for that transfer's word, and nothing is sent again.
    Held { status: String },
}

/// A call whose outcome is unknown: a timeout, a reset, a 5xx, an answer we cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Ambiguous(pub String);

/// The transfer call of one payout.
#[derive(Debug, Clone, Copy)]
pub struct TransferCall<'a> {
    pub payout: &'a PayoutId,
    pub money: Money,
    pub destination: &'a serde_json::Map<String, Value>,
    pub narration: Option<&'a str>,
}

/// The capability of sending and asking about transfers.
pub trait Transfers: Sync {
    /// Sends the transfer under `call.payout` as the provider reference (and the provider's
    /// own idempotency key, where it has one).
    fn send(
        &self,
        provider: ProviderId,
        call: TransferCall<'_>,
    ) -> impl Future<Output = Result<TransferAnswer, Ambiguous>> + Send;

    /// Asks the provider about the transfer under reference `payout`.
    fn ask(
        &self,
        provider: ProviderId,
        payout: &PayoutId,
    ) -> impl Future<Output = Result<TransferAnswer, Ambiguous>> + Send;

    /// Whether transfers can be sent through `provider` here.
    fn supports(&self, provider: ProviderId) -> bool;

    /// The bound of one call (its timeout): what a fence must cover.
    fn bound_ms(&self) -> i64;

    /// How long after a send the provider may still make its transfer visible to a lookup.
    fn visibility_ms(&self, provider: ProviderId) -> i64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_derived_from_caller_and_key() {
        let k = RequestKey::parse("order-1").unwrap();
        let a = PayoutId::derive("alice", &k);
        assert_eq!(a, PayoutId::derive("alice", &k));
        assert_ne!(a, PayoutId::derive("bob", &k));
        assert_eq!(PayoutId::parse(a.as_str()), Some(a.clone()));
        assert_eq!(PayoutId::of_claim(&a.claim_key()), Some(a));
        assert!(PayoutId::parse("po_XYZ").is_none());
    }

    #[test]
    fn keys_are_visible_ascii_up_to_255() {
        assert!(RequestKey::parse("").is_err());
        assert!(RequestKey::parse("a b").is_err());
        assert!(RequestKey::parse(&"k".repeat(256)).is_err());
        assert_eq!(RequestKey::parse("\"abc\"").unwrap().as_str(), "abc");
    }

    #[test]
    fn every_order_of_words_nets_the_provider_s_last_word() {
        use TransferState as W;
        let words = [W::Success, W::Failed, W::Reversed, W::Pending];
        // Every sequence of up to 4 words (with repeats) from `sent`.
        let mut seqs: Vec<Vec<W>> = vec![vec![]];
        for _ in 0..4 {
            seqs = seqs
                .iter()
                .flat_map(|s| {
                    words.iter().map(move |w| {
                        let mut t = s.clone();
                        t.push(*w);
                        t
                    })
                })
                .collect();
            for seq in &seqs {
                let mut status = PayoutStatus::Sent;
                let mut net = -1;
                let mut ops = Vec::new();
                for w in seq {
                    if let Settlement::Move { to, movement, from } = settle(status, *w) {
                        assert!(from.contains(&status));
                        assert!(to > status, "{status} -> {to} goes back");
                        if let Some((op, sign)) = movement {
                            assert!(!ops.contains(&op), "{op:?} twice in {seq:?}");
                            ops.push(op);
                            net += sign;
                        }
                        status = to;
                    }
                }
                let want = match status {
                    PayoutStatus::Failed | PayoutStatus::Reversed => 0,
                    _ => -1,
                };
                assert_eq!(net, want, "{seq:?} ends {status} with net {net}");
            }
        }
    }
}
