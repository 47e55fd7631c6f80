//! Where claims are kept: the [`Store`] capability, with [`ClaimTable`] (DynamoDB) and
//! [`MemoryStore`] (one process's memory, for users' unit tests). Another store (Redis,
//! Valkey) is a crate away: implement the five calls with the same guarantees.
//!
//! # What a store promises
//!
//! | call       | guarantee                                                                 |
//! |------------|---------------------------------------------------------------------------|
//! | `claim`    | one atomic step: of concurrent claims of one key, one is `Claimed`; an expired lease is taken over only from the owner that held it ([`crate::judge_existing`] decides) |
//! | `finalize` | stores the answer only while the token owns the claim; an answer too large to keep finishes it as not recorded; a vanished claim is written back |
//! | `release`  | deletes only the token's own IN_PROGRESS claim                            |
//! | `abandon`  | ends only the token's own lease, keeping the claim                        |
//! | `get`      | a consistent read; a DONE claim past its retention is absent              |

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::clock::local_now_ms;
use crate::protocol::{
    judge_existing, ClaimOutcome, ClaimRecord, ClaimState, Existing, FinalizeOutcome, Fingerprint,
    OwnerToken, StoredResponse,
};
use crate::table::{finalized_size, storage_key, MAX_ITEM_BYTES};
use crate::{ClaimTable, StoreError};

/// The claim protocol's five calls, as [`crate::Idempotency`] uses them.
pub trait Store: Clone + Send + Sync + 'static {
    /// Claims `key` for `lease_ms`, or says what to do instead.
    fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send;

    /// Stores `response` as the key's answer, only while `token` owns the claim.
    fn finalize(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> impl Future<Output = Result<FinalizeOutcome, StoreError>> + Send;

    /// Deletes the token's own IN_PROGRESS claim: nothing happened.
    fn release(
        &self,
        key: &str,
        token: &OwnerToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Ends the token's own lease and keeps the claim: the next attempt takes over at once.
    fn abandon(
        &self,
        key: &str,
        token: &OwnerToken,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The claim as stored, `None` when absent or past its retention.
    fn get(
        &self,
        key: &str,
    ) -> impl Future<Output = Result<Option<ClaimRecord>, StoreError>> + Send;
}

impl Store for ClaimTable {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        ClaimTable::claim(self, key, fingerprint, lease_ms).await
    }

    async fn finalize(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        self.finalize_with(key, fingerprint, token, response).await
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        ClaimTable::release(self, key, token).await
    }

    async fn abandon(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        ClaimTable::abandon(self, key, token).await
    }

    async fn get(&self, key: &str) -> Result<Option<ClaimRecord>, StoreError> {
        ClaimTable::get(self, key).await
    }
}

/// Claims in this process's memory, with [`ClaimTable`]'s rules (the same judge, limits and
/// retention), for a user's unit tests: no DynamoDB, no network. Times are this process's
/// clock, which is only sound inside one process, so never use it to guard a real effect.
/// Clones share the claims.
///
/// ```
/// use dynamo_claim::{Answer, Failed, Idempotency, MemoryStore};
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// let once = Idempotency::key_path(MemoryStore::new(), "/id");
/// let event = serde_json::json!({"id": "ord_1", "amount_minor": 500});
/// let first = once.run(&event, None, |_| async { Ok::<_, Failed<String>>(1) }).await;
/// let again = once.run(&event, None, |_| async { Ok::<_, Failed<String>>(2) }).await;
/// assert_eq!((first.unwrap(), again.unwrap()), (Answer::Ran(1), Answer::Replayed(1)));
/// # });
/// ```
#[derive(Clone, Debug)]
pub struct MemoryStore {
    claims: Arc<Mutex<HashMap<String, Entry>>>,
    retention_ms: i64,
}

#[derive(Debug, Clone)]
struct Entry {
    record: ClaimRecord,
    owner: OwnerToken,
    /// Set once DONE: past it the claim is absent.
    expires_at_ms: Option<i64>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore {
            claims: Arc::default(),
            retention_ms: 3_600_000,
        }
    }
}

impl MemoryStore {
    /// An empty store keeping DONE claims an hour, as [`ClaimTable`] does.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long a DONE claim is kept.
    pub fn retention_ms(mut self, retention_ms: i64) -> Self {
        self.retention_ms = retention_ms.max(0);
        self
    }

    /// Every claim, for a test to look at.
    pub fn claims(&self) -> Vec<ClaimRecord> {
        self.locked(|m| m.values().map(|e| e.record.clone()).collect())
    }

    fn locked<T>(&self, f: impl FnOnce(&mut HashMap<String, Entry>) -> T) -> T {
        // A panic while holding the lock cannot leave a claim half-written (each call
        // replaces whole entries), so a poisoned map is still the truth.
        let mut guard = match self.claims.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    fn live(entry: Option<&Entry>, now_ms: i64) -> Option<&Entry> {
        entry.filter(|e| e.expires_at_ms.is_none_or(|t| t > now_ms))
    }

    fn done_state(
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        r: &StoredResponse,
    ) -> ClaimState {
        if finalized_size(key, fingerprint, token, r) <= MAX_ITEM_BYTES {
            ClaimState::Done(r.clone())
        } else {
            ClaimState::DoneUnrecorded { status: r.status }
        }
    }
}

impl Store for MemoryStore {
    async fn claim(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        lease_ms: i64,
    ) -> Result<ClaimOutcome, StoreError> {
        if key.is_empty() {
            return Err(StoreError::Rejected {
                operation: "claim",
                table: "memory".into(),
                why: crate::Rejection::Invalid,
                source: Box::new(std::io::Error::other("an empty key names nothing")),
            });
        }
        let key = storage_key(key).into_owned();
        let now = local_now_ms();
        let token = OwnerToken::generate();
        let lease = now.saturating_add(lease_ms);
        Ok(self.locked(|claims| {
            let fresh = |took_over| ClaimOutcome::Claimed {
                token: token.clone(),
                took_over,
            };
            let Some(existing) = Self::live(claims.get(&key), now) else {
                claims.insert(
                    key.clone(),
                    Entry {
                        record: ClaimRecord {
                            key: key.clone(),
                            state: ClaimState::InProgress {
                                owner: token.clone(),
                                lease_expires_at_ms: lease,
                            },
                            fingerprint: fingerprint.clone(),
                        },
                        owner: token.clone(),
                        expires_at_ms: None,
                    },
                );
                return fresh(false);
            };
            match judge_existing(&existing.record, fingerprint, now, &token) {
                Existing::Decided(outcome) => outcome,
                Existing::TakeOver { .. } => {
                    if let Some(e) = claims.get_mut(&key) {
                        e.owner = token.clone();
                        e.record.state = ClaimState::InProgress {
                            owner: token.clone(),
                            lease_expires_at_ms: lease,
                        };
                    }
                    fresh(true)
                }
            }
        }))
    }

    async fn finalize(
        &self,
        key: &str,
        fingerprint: &Fingerprint,
        token: &OwnerToken,
        response: &StoredResponse,
    ) -> Result<FinalizeOutcome, StoreError> {
        let key = storage_key(key).into_owned();
        let now = local_now_ms();
        let expires = now.saturating_add(self.retention_ms);
        let state = Self::done_state(&key, fingerprint, token, response);
        Ok(self.locked(|claims| match claims.get_mut(&key) {
            Some(e)
                if e.owner == *token && matches!(e.record.state, ClaimState::InProgress { .. }) =>
            {
                e.record.state = state;
                e.expires_at_ms = Some(expires);
                FinalizeOutcome::Done
            }
            Some(e) => FinalizeOutcome::Superseded(match &e.record.state {
                ClaimState::Done(r) => Some(r.clone()),
                _ => None,
            }),
            // Vanished under a finished effect: written back, so duplicates replay.
            None => {
                claims.insert(
                    key.clone(),
                    Entry {
                        record: ClaimRecord {
                            key: key.clone(),
                            state,
                            fingerprint: fingerprint.clone(),
                        },
                        owner: token.clone(),
                        expires_at_ms: Some(expires),
                    },
                );
                FinalizeOutcome::Done
            }
        }))
    }

    async fn release(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        let key = storage_key(key).into_owned();
        Ok(self.locked(|claims| {
            let ours = claims.get(&key).is_some_and(|e| {
                e.owner == *token && matches!(e.record.state, ClaimState::InProgress { .. })
            });
            if ours {
                claims.remove(&key);
            }
            ours
        }))
    }

    async fn abandon(&self, key: &str, token: &OwnerToken) -> Result<bool, StoreError> {
        let key = storage_key(key).into_owned();
        Ok(self.locked(|claims| match claims.get_mut(&key) {
            Some(e) if e.owner == *token => match &mut e.record.state {
                ClaimState::InProgress {
                    lease_expires_at_ms,
                    ..
                } => {
                    *lease_expires_at_ms = 0;
                    true
                }
                _ => false,
            },
            _ => false,
        }))
    }

    async fn get(&self, key: &str) -> Result<Option<ClaimRecord>, StoreError> {
        let key = storage_key(key).into_owned();
        let now = local_now_ms();
        Ok(self.locked(|claims| Self::live(claims.get(&key), now).map(|e| e.record.clone())))
    }
}
