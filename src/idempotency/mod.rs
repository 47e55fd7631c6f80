//! The claim protocol as payhook's pipeline needs it: the `dynamo_claim` crate's vocabulary and
//! judgement (re-exported, never copied), and [`Claims`], the capability keyed by payhook's own
//! [`IdempotencyKey`] (`{provider}:{operation}:{reference}`). The state table is in the crate
//! docs and in payhook's.

use std::future::Future;

pub use dynamo_claim::{
    judge_existing, ClaimOutcome, ClaimRecord, ClaimState, Existing, FinalizeOutcome, OwnerToken,
    StoredResponse,
};

use crate::domain::{Fingerprint, IdempotencyKey};
use crate::store::StoreError;

/// A claim held on the item its movement writes anyway (#32, #44): a payment's credit, a
/// refund's, a dispute movement's, a reversal's, a payout's settlement word. The write that
/// moves the money is the one that claims it, so it costs no claims-table writes. The
/// same protocol as the claims table (`dynamo_claim`): an owner and a lease while APPLYING,
/// the stored answer once DONE, the facts' fingerprint either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostClaim {
    pub state: ClaimState,
    pub fingerprint: Fingerprint,
    /// The last owner, kept once DONE (a finalize the SDK resent knows its own DONE by it).
    pub owner: OwnerToken,
}

impl HostClaim {
    /// As a claim record of `key`, for the claim crate's one judge.
    pub fn record(&self, key: &IdempotencyKey) -> ClaimRecord {
        ClaimRecord {
            key: key.to_string(),
            state: self.state.clone(),
            fingerprint: self.fingerprint.clone(),
        }
    }
}

/// The claim a movement's first write takes on its item (see [`HostClaim`]).
#[derive(Debug, Clone, Copy)]
pub struct NewHostClaim<'a> {
    pub token: &'a OwnerToken,
    pub lease_ms: i64,
    pub fingerprint: &'a Fingerprint,
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
    /// asks this of every delivery it lists). Each key comes with the payment its delivery was
    /// about, when known: a refund's claim may be held on that payment (#44), and its key
    /// does not name it.
    fn done_among(
        &self,
        keys: &[(IdempotencyKey, Option<crate::domain::Reference>)],
    ) -> impl Future<Output = Result<std::collections::HashSet<IdempotencyKey>, StoreError>> + Send;
}
