//! What every writer of a payment item shares: its history entries, the totals condition that
//! orders a refund and a dispute withdrawal of one payment, and how many rounds a contended
//! write takes. It sits below `payments.rs` (credits, refunds) and `disputes.rs` (withdrawals,
//! reinstatements), which both write the payment item and must not import each other.

use std::collections::BTreeMap;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;

use super::item::{n, s, Item, Reader};
use crate::domain::{Fingerprint, IdempotencyKey, PaymentStatus};
use crate::idempotency::{ClaimState, FinalizeOutcome, OwnerToken, StoredResponse};
use crate::payments::pairs::PairGuard;
use crate::payments::{HostClaim, NewHostClaim};
use crate::store::StoreError;

/// Rounds of write -> judge -> write again before answering "contended" (retryable). Each failed
/// round means another writer changed the payment, so the rounds only run out under a storm of
/// concurrent refunds on one payment; the provider's retry then finishes it.
pub(super) const WRITE_ROUNDS: usize = 32;

/// What one write does to a payment item, kept beside its request, so the item after the write
/// is the item before it (`ALL_OLD`: nothing at all for a payment heard of first) with these
/// applied, exactly as DynamoDB applies them. A new credit's first write returned the whole
/// payment (`ALL_NEW`, some 860 bytes to parse, 64 k instructions under callgrind); now a new
/// payment's answer is empty (#44). The old image is the one the write replaced, atomically, so
/// the image built here is the item as written, not a guess.
#[derive(Debug, Default)]
pub(super) struct Overlay(Vec<(&'static str, Apply)>);

/// One attribute's part in an update expression.
#[derive(Debug)]
enum Apply {
    /// `SET a = :v`
    Set(AttributeValue),
    /// `SET a = if_not_exists(a, :v)`
    IfNotExists(AttributeValue),
    /// `SET a = list_append(if_not_exists(a, :empty), :v)`
    Append(Vec<AttributeValue>),
    /// `REMOVE a`
    Remove,
}

impl Overlay {
    /// `SET name = value`.
    pub(super) fn set(&mut self, name: &'static str, value: AttributeValue) {
        self.0.push((name, Apply::Set(value)));
    }

    /// `SET name = if_not_exists(name, value)`.
    pub(super) fn if_not_exists(&mut self, name: &'static str, value: AttributeValue) {
        self.0.push((name, Apply::IfNotExists(value)));
    }

    /// `SET name = list_append(if_not_exists(name, :empty), list)`.
    pub(super) fn append(&mut self, name: &'static str, list: &AttributeValue) {
        let items = list.as_l().cloned().unwrap_or_default();
        self.0.push((name, Apply::Append(items)));
    }

    /// `REMOVE name`.
    pub(super) fn remove(&mut self, name: &'static str) {
        self.0.push((name, Apply::Remove));
    }

    /// The item after the write: `old` (the write's `ALL_OLD`) with each part applied in order.
    pub(super) fn apply(self, mut old: Item) -> Item {
        for (name, apply) in self.0 {
            match apply {
                Apply::Set(v) => {
                    old.insert(name.to_owned(), v);
                }
                Apply::IfNotExists(v) => {
                    old.entry(name.to_owned()).or_insert(v);
                }
                Apply::Append(items) => {
                    let list = old
                        .entry(name.to_owned())
                        .or_insert_with(|| AttributeValue::L(Vec::new()));
                    // Never anything but a list here: DynamoDB refuses `list_append` on
                    // anything else, and then there is no successful write to apply.
                    if let AttributeValue::L(l) = list {
                        l.extend(items);
                    }
                }
                Apply::Remove => {
                    old.remove(name);
                }
            }
        }
        old
    }
}

/// One history entry as a one-element list (for `list_append`), with the money it moved when it
/// is a dispute's (or a paired provider's refund), and what it debited when pairing decided it.
pub(super) fn history_entry(
    status: PaymentStatus,
    note: &str,
    at_ms: i64,
    amount_minor: Option<i64>,
    debit_minor: Option<i64>,
) -> AttributeValue {
    let mut entry: std::collections::HashMap<String, AttributeValue> = [
        ("at_ms".to_owned(), n(at_ms)),
        ("status".to_owned(), s(status.as_str())),
        ("note".to_owned(), s(note)),
    ]
    .into_iter()
    .collect();
    if let Some(amount) = amount_minor {
        entry.insert("amount_minor".to_owned(), n(amount));
    }
    if let Some(debit) = debit_minor {
        entry.insert("debit_minor".to_owned(), n(debit));
    }
    AttributeValue::L(vec![AttributeValue::M(entry)])
}

/// ` AND refunded_minor = :r0 AND disputed_minor = :d0` (either absent counting as 0): the
/// totals the pairing judge read, so a refund and a withdrawal of one payment are decided one
/// after the other, never both as the first report of their money.
pub(super) fn totals_condition(g: &PairGuard) -> String {
    let exact = |field: &str, value: i64, placeholder: &str| {
        if value == 0 {
            format!(" AND (attribute_not_exists({field}) OR {field} = {placeholder})")
        } else {
            format!(" AND {field} = {placeholder}")
        }
    };
    exact("refunded_minor", g.refunded_minor, ":r0")
        + &exact("disputed_minor", g.disputed_minor, ":d0")
}

/// A claim held on a payment item, being applied / finished (the credit's, or a refund's).
pub(super) const APPLYING: &str = "APPLYING";
pub(super) const DONE: &str = "DONE";
/// The `open` index's key prefix of a payment whose held claim is APPLYING.
pub(super) const POSTING: &str = "POSTING";

/// Where a claim held on a payment keeps its fields: the credit's are top-level attributes, a
/// refund's live in one map attribute of its own (#44, `held_claims.rs`).
pub(super) struct ClaimFields {
    pub state: &'static str,
    pub owner: &'static str,
    pub lease: &'static str,
    pub fingerprint: &'static str,
    pub answer_status: &'static str,
    pub answer_body: &'static str,
}

/// A claim held on a payment (`r` reads the item, or a refund claim's map), if there is one.
pub(super) fn claim_of(r: &Reader<'_>, f: &ClaimFields) -> Result<Option<HostClaim>, StoreError> {
    let Some(state) = r.opt_str(f.state) else {
        return Ok(None);
    };
    let owner = OwnerToken::from_stored(r.str(f.owner)?.to_owned());
    let state = match state {
        APPLYING => ClaimState::InProgress {
            owner: owner.clone(),
            lease_expires_at_ms: r.num(f.lease)?,
        },
        DONE => {
            let status = u16::try_from(r.num(f.answer_status)?)
                .map_err(|_| r.corrupt(format!("{} out of range", f.answer_status)))?;
            match r.opt_str(f.answer_body) {
                Some(body) => ClaimState::Done(StoredResponse {
                    status,
                    body: body.to_owned(),
                }),
                // Finished without its answer's body, which did not fit on the payment.
                None => ClaimState::DoneUnrecorded { status },
            }
        }
        other => return Err(r.corrupt(format!("unknown {} {other}", f.state))),
    };
    Ok(Some(HostClaim {
        state,
        fingerprint: Fingerprint::from_stored(r.str(f.fingerprint)?.to_owned()),
        owner,
    }))
}

/// The prefix of a refund claim's attribute name.
const HELD_PREFIX: &str = "rc#";

/// A refund claim's fields inside its map.
pub(super) const HELD_CLAIM: ClaimFields = ClaimFields {
    state: "st",
    owner: "ow",
    lease: "ls",
    fingerprint: "fp",
    answer_status: "as",
    answer_body: "ab",
};

/// The attribute holding `key`'s claim.
pub(super) fn held_claim_attribute(key: &IdempotencyKey) -> String {
    format!("{HELD_PREFIX}{key}")
}

/// Every refund claim on a payment item, by key.
pub(super) fn held_claims_of(
    item: &Item,
    table: &str,
) -> Result<BTreeMap<String, HostClaim>, StoreError> {
    let mut claims = BTreeMap::new();
    for (name, value) in item {
        let Some(key) = name.strip_prefix(HELD_PREFIX) else {
            continue;
        };
        let map = value.as_m().map_err(|_| StoreError::Corrupt {
            table: table.to_owned(),
            key: name.clone(),
            reason: "a refund claim that is not a map".into(),
        })?;
        if let Some(claim) = claim_of(&Reader::new(map, table), &HELD_CLAIM)? {
            claims.insert(key.to_owned(), claim);
        }
    }
    Ok(claims)
}

/// What a refund's write needs to take its claim too: bound onto the refund's update.
pub(super) struct Taking<'a> {
    key: &'a IdempotencyKey,
    claim: NewHostClaim<'a>,
    posting: String,
}

impl<'a> Taking<'a> {
    pub(super) fn new(key: &'a IdempotencyKey, claim: NewHostClaim<'a>, posting: String) -> Self {
        Taking {
            key,
            claim,
            posting,
        }
    }

    /// What a movement's write adds to take its claim (`SET` clauses, each after a ", ", and
    /// the condition's clauses, each after an " AND "): the claim APPLYING and the payment
    /// listed open, on a payment holding no claim APPLYING and none for this key.
    pub(super) fn clauses(taking: Option<&Taking<'_>>) -> (&'static str, &'static str) {
        match taking {
            Some(_) => (
                ", #rc = :rc, #open = :posting",
                " AND attribute_not_exists(#open) AND attribute_not_exists(#rc)",
            ),
            None => ("", ""),
        }
    }

    /// The claim's names and values (`#rc`, `:rc`, `#open`, `:posting`) on `update`.
    pub(super) fn bind(
        &self,
        update: UpdateItemFluentBuilder,
        now_ms: i64,
    ) -> UpdateItemFluentBuilder {
        let claim = std::collections::HashMap::from([
            (HELD_CLAIM.state.to_owned(), s(APPLYING)),
            (HELD_CLAIM.owner.to_owned(), s(self.claim.token.as_str())),
            (
                HELD_CLAIM.lease.to_owned(),
                n(now_ms.saturating_add(self.claim.lease_ms)),
            ),
            (
                HELD_CLAIM.fingerprint.to_owned(),
                s(self.claim.fingerprint.as_str()),
            ),
        ]);
        update
            .expression_attribute_names("#rc", held_claim_attribute(self.key))
            .expression_attribute_names("#open", "open")
            .expression_attribute_values(":rc", AttributeValue::M(claim))
            .expression_attribute_values(":posting", s(self.posting.as_str()))
    }
}

/// A takeover of the claim `#rc` names: conditioned on its old owner and an expired lease (the
/// store's time), it sets the new owner and lease. Shared by every item holding such claims.
pub(super) fn take_over_clauses(
    update: UpdateItemFluentBuilder,
    previous: &OwnerToken,
    token: &OwnerToken,
    now_ms: i64,
    lease_ms: i64,
) -> UpdateItemFluentBuilder {
    update
        .update_expression("SET #rc.ow = :tok, #rc.ls = :lease")
        .condition_expression("#rc.ow = :prev AND #rc.st = :applying AND #rc.ls <= :now")
        .expression_attribute_values(":tok", s(token.as_str()))
        .expression_attribute_values(":prev", s(previous.as_str()))
        .expression_attribute_values(":applying", s(APPLYING))
        .expression_attribute_values(":lease", n(now_ms.saturating_add(lease_ms)))
        .expression_attribute_values(":now", n(now_ms))
}

/// Whether a takeover whose condition failed met its own write (the SDK resent it after
/// losing its reply): the claim is APPLYING under our token.
pub(super) fn took_over_already(claim: Option<&HostClaim>, token: &OwnerToken) -> bool {
    claim
        .is_some_and(|c| matches!(&c.state, ClaimState::InProgress { owner, .. } if owner == token))
}

/// The finalize of the claim `#rc` names: DONE with the answer's status, and its body when
/// `with_body` (without it the item only shrinks: `st` shorter, `open` removed, so it always
/// fits where the APPLYING claim did), `REMOVE open`; conditioned on our ownership.
pub(super) fn finalize_clauses(
    update: UpdateItemFluentBuilder,
    token: &OwnerToken,
    answer: &StoredResponse,
    with_body: bool,
) -> UpdateItemFluentBuilder {
    let body = if with_body { ", #rc.ab = :ab" } else { "" };
    let update = update
        .update_expression(format!(
            "SET #rc.st = :done, #rc.#as = :as{body} REMOVE #open"
        ))
        .condition_expression("#rc.ow = :tok AND #rc.st = :applying")
        .expression_attribute_names("#open", "open")
        .expression_attribute_names("#as", HELD_CLAIM.answer_status)
        .expression_attribute_values(":tok", s(token.as_str()))
        .expression_attribute_values(":applying", s(APPLYING))
        .expression_attribute_values(":done", s(DONE))
        .expression_attribute_values(":as", n(i64::from(answer.status)));
    if with_body {
        update.expression_attribute_values(":ab", s(answer.body.as_str()))
    } else {
        update
    }
}

/// How a finalize whose condition failed ended, from the claim it met.
pub(super) fn finalized_over(claim: Option<HostClaim>, token: &OwnerToken) -> FinalizeOutcome {
    match claim {
        // DONE under our own token: the SDK resent our finalize after losing its reply.
        Some(HostClaim {
            state: ClaimState::Done(_) | ClaimState::DoneUnrecorded { .. },
            owner,
            ..
        }) if &owner == token => FinalizeOutcome::Done,
        Some(HostClaim {
            state: ClaimState::Done(stored),
            ..
        }) => FinalizeOutcome::Superseded(Some(stored)),
        Some(HostClaim {
            state: ClaimState::DoneUnrecorded { status },
            ..
        }) => FinalizeOutcome::Superseded(Some(StoredResponse::unrecorded(status))),
        _ => FinalizeOutcome::Superseded(None),
    }
}

/// Whether a store error is DynamoDB refusing an item past 400 KB.
pub(super) fn too_large(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Rejected {
            why: dynamo_claim::Rejection::TooLarge,
            ..
        }
    )
}
