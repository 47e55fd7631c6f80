//! The error every store call gives: the claim table's, and (re-exported) every other table's
//! of a service that builds on it, so one `?` carries them all. The claim table itself gives
//! only `Unavailable` and `Corrupt`; `Contended` and `ReadOnly` are for the stores built beside
//! it (payhook's payout guard and its dry run).

/// A store call that did not give an answer we can act on. Every variant is retryable from the
/// provider's point of view (we answer 5xx): nothing was decided, or what was decided is
/// recoverable by the same key.
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
