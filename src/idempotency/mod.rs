//! The claim protocol: claim a key before the money moves, finalize it with the response, replay
//! that response to every duplicate. See the state table in the crate docs.

use std::future::Future;

use serde::Serialize;

use crate::domain::{Fingerprint, IdempotencyKey};
use crate::store::StoreError;

/// Who holds a claim. Finalize and release are conditioned on it, so an invocation whose lease
/// expired (a zombie) cannot overwrite the work of the one that took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerToken(String);

impl OwnerToken {
    pub fn generate() -> Self {
        OwnerToken(uuid::Uuid::new_v4().simple().to_string())
    }
    pub fn from_stored(text: String) -> Self {
        OwnerToken(text)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The answer the first completed attempt gave, replayed byte for byte to duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
}

/// A claim as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    pub key: IdempotencyKey,
    pub state: ClaimState,
    /// What the operation moves ([`Fingerprint`]): the same key with other money is a
    /// conflict, not a duplicate.
    pub fingerprint: Fingerprint,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    InProgress {
        owner: OwnerToken,
        lease_expires_at_ms: i64,
    },
    Done(StoredResponse),
}

/// What the caller of [`Claims::claim`] must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// We own the key: perform the movement, then finalize with `token`. `took_over` says an
    /// earlier attempt's lease expired first, so some steps may already be done (each step is
    /// idempotent by the key, so running them again is safe and cheap).
    Claimed { token: OwnerToken, took_over: bool },
    /// Already done: answer this, move nothing.
    Replay(StoredResponse),
    /// Another attempt holds a live lease: answer retryable, move nothing.
    InFlight { retry_after_ms: i64 },
    /// The key was claimed for different money: answer 422, move nothing.
    Conflict { stored_fingerprint: Fingerprint },
}

/// What to do about an existing claim that made our conditional put fail. Pure, so every branch
/// is unit-tested without a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    Decided(ClaimOutcome),
    /// The lease expired: try to take over from this owner (the takeover is itself conditioned
    /// on that owner and the expiry, so two takers cannot both win).
    TakeOver {
        previous_owner: OwnerToken,
    },
}

/// `mine` is the token our put carried: the SDK retries a put whose reply was lost, and the item
/// that then fails the condition is our own claim, not a rival's.
pub fn judge_existing(
    existing: &ClaimRecord,
    fingerprint: &Fingerprint,
    now_ms: i64,
    mine: &OwnerToken,
) -> Existing {
    if let ClaimState::InProgress { owner, .. } = &existing.state {
        if owner == mine && existing.fingerprint == *fingerprint {
            return Existing::Decided(ClaimOutcome::Claimed {
                token: mine.clone(),
                took_over: false,
            });
        }
    }
    if existing.fingerprint != *fingerprint {
        return Existing::Decided(ClaimOutcome::Conflict {
            stored_fingerprint: existing.fingerprint.clone(),
        });
    }
    match &existing.state {
        ClaimState::Done(response) => Existing::Decided(ClaimOutcome::Replay(response.clone())),
        // A live lease: the holder may be mid-charge; only time (or its finalize) settles it.
        ClaimState::InProgress {
            lease_expires_at_ms,
            ..
        } if *lease_expires_at_ms > now_ms => Existing::Decided(ClaimOutcome::InFlight {
            retry_after_ms: lease_expires_at_ms - now_ms,
        }),
        // Expired: the holder crashed or timed out; its steps are resumable by the key.
        ClaimState::InProgress { owner, .. } => Existing::TakeOver {
            previous_owner: owner.clone(),
        },
    }
}

/// How a finalize went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizeOutcome {
    Done,
    /// Our lease was taken over; the successor's answer (if it finished) is the one that stands.
    Superseded(Option<StoredResponse>),
}

/// The idempotency capability the pipeline needs.
pub trait Claims: Sync {
    /// Claims `key` for `lease_ms`. One conditional write; duplicates learn what to do next.
    fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Marks the claim DONE with `response`, only if `token` still owns it.
    fn finalize(
        &self,
        key: &IdempotencyKey,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    /// Deletes the claim, only if `token` still owns it and it is IN_PROGRESS. Only for attempts
    /// that surely moved nothing. Returns whether it was ours to delete.
    fn release(
        &self,
        key: &IdempotencyKey,
        token: &OwnerToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// IN_PROGRESS claims whose lease expired before `now_ms`, oldest first, at most `limit`
    /// (reconciliation resumes them; each is re-judged under a condition when it acts).
    fn stuck_claims(
        &self,
        now_ms: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<ClaimRecord>, StoreError>> + Send;

    /// The time leases are written and judged in: the store's clock, never this process's own
    /// (a takeover or a stuck-claim search by a machine with a wrong clock would judge live
    /// leases expired, or expired ones live).
    fn now_ms(&self) -> i64;

    /// Reads a claim (operators, reconciliation, tests).
    fn get_claim(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send;

    /// Of `keys`, those whose claim is DONE (a batch read: the console's needs-attention page
    /// asks this of every delivery it lists).
    fn done_among(
        &self,
        keys: &[IdempotencyKey],
    ) -> impl Future<Output = Result<std::collections::HashSet<IdempotencyKey>, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: ClaimState) -> ClaimRecord {
        ClaimRecord {
            key: IdempotencyKey::from_stored("generic:payment:p".into()),
            state,
            fingerprint: fp(),
        }
    }

    fn fp() -> Fingerprint {
        Fingerprint::from_stored("fp".into())
    }

    fn other() -> OwnerToken {
        OwnerToken::from_stored("someone-else".into())
    }

    #[test]
    fn done_claims_replay_their_response() {
        let stored = StoredResponse {
            status: 200,
            body: "{}".into(),
        };
        let r = record(ClaimState::Done(stored.clone()));
        assert_eq!(
            judge_existing(&r, &fp(), 0, &other()),
            Existing::Decided(ClaimOutcome::Replay(stored))
        );
    }

    #[test]
    fn our_own_claim_found_by_a_retried_put_is_ours() {
        let me = OwnerToken::from_stored("me".into());
        let r = record(ClaimState::InProgress {
            owner: me.clone(),
            lease_expires_at_ms: i64::MAX,
        });
        assert_eq!(
            judge_existing(&r, &fp(), 0, &me),
            Existing::Decided(ClaimOutcome::Claimed {
                token: me,
                took_over: false
            })
        );
    }

    #[test]
    fn live_leases_are_in_flight_and_expired_ones_are_taken_over() {
        let owner = OwnerToken::from_stored("a".into());
        let r = record(ClaimState::InProgress {
            owner: owner.clone(),
            lease_expires_at_ms: 1_000,
        });
        assert_eq!(
            judge_existing(&r, &fp(), 400, &other()),
            Existing::Decided(ClaimOutcome::InFlight {
                retry_after_ms: 600
            })
        );
        assert_eq!(
            judge_existing(&r, &fp(), 1_000, &other()),
            Existing::TakeOver {
                previous_owner: owner
            }
        );
    }

    #[test]
    fn other_money_under_the_same_key_is_a_conflict_in_any_state() {
        let done = record(ClaimState::Done(StoredResponse {
            status: 200,
            body: "{}".into(),
        }));
        let live = record(ClaimState::InProgress {
            owner: OwnerToken::from_stored("a".into()),
            lease_expires_at_ms: i64::MAX,
        });
        for r in [done, live] {
            assert_eq!(
                judge_existing(&r, &Fingerprint::from_stored("other".into()), 0, &other()),
                Existing::Decided(ClaimOutcome::Conflict {
                    stored_fingerprint: fp()
                })
            );
        }
    }
}
