//! The claim protocol's vocabulary and its one decision, pure: what a claim holds, what the
//! caller must do next, and how an existing claim is judged. No I/O here, so every branch is
//! unit-tested without a store; [`crate::ClaimTable`] is the DynamoDB side.

use serde::Serialize;

/// What an operation does, as stored on its claim. The same key with another fingerprint is
/// another operation under one key (other money under one reference): a conflict, never a
/// duplicate, whichever path the claim was read by. Compared whole, never parsed here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// A fingerprint whose text the caller chose (canonical JSON of what moves, say).
    pub fn new(text: impl Into<String>) -> Self {
        Fingerprint(text.into())
    }

    /// A fingerprint read back from the store.
    pub fn from_stored(text: String) -> Self {
        Fingerprint(text)
    }

    /// The SHA-256 (hex) of `bytes`: a fixed-size fingerprint of a payload of any size.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        use sha2::Digest;
        Fingerprint(format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(bytes))
        ))
    }

    /// The text as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who holds a claim. Finalize and release are conditioned on it, so an invocation whose lease
/// expired (a zombie) cannot overwrite the work of the one that took over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A fresh random token (122 random bits): one per attempt.
    pub fn generate() -> Self {
        OwnerToken(uuid::Uuid::new_v4().simple().to_string())
    }
    /// A token read back from the store.
    pub fn from_stored(text: String) -> Self {
        OwnerToken(text)
    }
    /// The token as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The answer the first completed attempt gave, replayed byte for byte to duplicates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredResponse {
    /// A status the caller chose (an HTTP status, or 200 for a plain value).
    pub status: u16,
    /// The answer's bytes as text, replayed unchanged.
    pub body: String,
}

impl StoredResponse {
    /// The answer of a claim finished without its answer ([`ClaimState::DoneUnrecorded`]) for
    /// a caller that replays only a status: the status, an empty body.
    pub fn unrecorded(status: u16) -> Self {
        StoredResponse {
            status,
            body: String::new(),
        }
    }
}

/// A claim as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRecord {
    /// The claimed key (the item's partition key).
    pub key: String,
    /// In progress under an owner, or done with its answer.
    pub state: ClaimState,
    /// What the operation moves ([`Fingerprint`]): the same key with other money is a
    /// conflict, not a duplicate.
    pub fingerprint: Fingerprint,
}

/// Where a claim is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimState {
    /// Held by `owner` until `lease_expires_at_ms` (the store's time); then anyone may take it
    /// over, conditioned on that owner.
    InProgress {
        /// Who holds it.
        owner: OwnerToken,
        /// Until when, in the store's clock.
        lease_expires_at_ms: i64,
    },
    /// Finished: this answer is replayed to every duplicate.
    Done(StoredResponse),
    /// Finished, but its answer was too large for a DynamoDB item (400 KB): duplicates learn
    /// that the effect happened and its status, never run it again, and cannot be given the
    /// answer itself.
    DoneUnrecorded {
        /// The status the answer had.
        status: u16,
    },
}

/// What the caller of a claim ([`crate::ClaimTable::claim`]) must do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// We own the key: perform the effect, then finalize with `token`. `took_over` says an
    /// earlier attempt's lease expired first, so some of its effect may already exist: the
    /// caller's steps must find their own earlier work by the key (payhook's each are).
    Claimed {
        /// Finalize and release are conditioned on it.
        token: OwnerToken,
        /// An earlier attempt held the key and its lease ran out.
        took_over: bool,
    },
    /// Already done: answer this, move nothing.
    Replay(StoredResponse),
    /// Already done, its answer too large to have been kept ([`ClaimState::DoneUnrecorded`]):
    /// say so (HTTP: the status, and that the answer was not recorded), move nothing.
    ReplayUnrecorded {
        /// The status the answer had.
        status: u16,
    },
    /// Another attempt holds a live lease: answer "retry later", do nothing.
    InFlight {
        /// When the holder's lease runs out, from now.
        retry_after_ms: i64,
    },
    /// The key was claimed for another payload (other money): refuse, do nothing.
    Conflict {
        /// What the key was claimed for.
        stored_fingerprint: Fingerprint,
    },
}

/// What to do about an existing claim that made our conditional put fail. Pure, so every branch
/// is unit-tested without a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Existing {
    /// The answer, with no further write.
    Decided(ClaimOutcome),
    /// The lease expired: try to take over from this owner (the takeover is itself conditioned
    /// on that owner and the expiry, so two takers cannot both win).
    TakeOver {
        /// The owner whose lease ran out.
        previous_owner: OwnerToken,
    },
}

/// Judges the claim that made our conditional put fail. The fingerprint is compared first on
/// every path, the `ALL_OLD` image as much as a read, so other money is never replayed.
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
        ClaimState::DoneUnrecorded { status } => {
            Existing::Decided(ClaimOutcome::ReplayUnrecorded { status: *status })
        }
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
    /// Our answer is stored.
    Done,
    /// Our lease was taken over; the successor's answer (if it finished) is the one that stands.
    Superseded(Option<StoredResponse>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: ClaimState) -> ClaimRecord {
        ClaimRecord {
            key: "generic:payment:p".into(),
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
