//! The error every store call gives: the claim table's, and (re-exported) every other table's
//! of a service that builds on it, so one `?` carries them all. The claim table itself gives
//! `Unavailable`, `Rejected` and `Corrupt`; `Contended` and `ReadOnly` are for the stores built
//! beside it (payhook's payout guard and its dry run).
//!
//! | variant       | what it says                                         | what to do                        |
//! |---------------|------------------------------------------------------|-----------------------------------|
//! | `Unavailable` | throttled, 5xx, timed out, the network               | retry the same call later         |
//! | `Rejected`    | DynamoDB refused the request itself (too large, invalid, no table, no access) | fix the code or the deployment; a retry fails the same way |
//! | `Corrupt`     | an item this code did not write                      | a person looks at it              |
//! | `Contended`   | writers kept moving the item                         | retry                             |
//! | `ReadOnly`    | a dry run was asked to write                         | nothing: it is a dry run          |
//!
//! Nothing was decided by a failed call, or what was decided is recoverable by the same key, so
//! every variant is safe to answer with a 5xx; only [`StoreError::is_retryable`] ones are worth
//! retrying at once.

/// Why DynamoDB refused a request for good: the same request fails the same way every time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// An item or item collection over DynamoDB's limits (400 KB an item).
    TooLarge,
    /// A request DynamoDB's validation refuses (a reserved word, an empty or over-long key,
    /// a malformed expression).
    Invalid,
    /// The table (or index) does not exist in this account and Region.
    NoTable,
    /// The credentials may not make this call, or are not valid here.
    NoAccess,
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Rejection::TooLarge => "too large",
            Rejection::Invalid => "invalid",
            Rejection::NoTable => "no such table",
            Rejection::NoAccess => "access denied",
        })
    }
}

/// A store call that did not give an answer we can act on. Every variant is safe to answer
/// with a retryable 5xx (nothing was decided, or what was decided is recoverable by the same
/// key); [`StoreError::is_retryable`] says whether retrying can help.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The call failed after the SDK's own retries (throttling, 5xx, timeout, network).
    #[error("DynamoDB {operation} on {table} failed")]
    Unavailable {
        /// The DynamoDB operation (`PutItem`, …).
        operation: &'static str,
        /// The table it was sent to.
        table: String,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// DynamoDB refused the request itself: retrying it as it is fails the same way.
    #[error("DynamoDB {operation} on {table} was refused ({why})")]
    Rejected {
        /// The DynamoDB operation (`PutItem`, …).
        operation: &'static str,
        /// The table it was sent to.
        table: String,
        /// What kind of refusal.
        why: Rejection,
        /// The SDK's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An item exists but does not have the shape this code writes: never guess with money.
    #[error("item {key} in {table} is malformed: {reason}")]
    Corrupt {
        /// The table the item is in.
        table: String,
        /// The item's partition key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Concurrent writers kept moving an item this call needed to move (a busy account's
    /// payout guard): nothing was decided, retry.
    #[error("item {key} in {table} is contended; retry")]
    Contended {
        /// The table the item is in.
        table: String,
        /// The item's partition key (or what was contended).
        key: String,
    },
    /// A read-only store (a dry run) was asked to write: it reads and judges, never writes.
    #[error("a dry run does not {operation}")]
    ReadOnly {
        /// The write it was asked to make.
        operation: &'static str,
    },
}

impl StoreError {
    /// Whether the same call may succeed later: `Unavailable` and `Contended`. A `Rejected`,
    /// `Corrupt` or `ReadOnly` call fails the same way until code, deployment or data change,
    /// so a caller that loops on "retry" must not loop on these.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Contended { .. }
        )
    }
}
