//! The seam between the code that decides and the code that stores: the error every store
//! call can give. The capability traits live beside the types they speak
//! ([`crate::idempotency::Claims`], [`crate::payments::Payments`], [`crate::ledger::Ledger`],
//! [`crate::eventlog::EventLog`]) and return this error; [`crate::dynamodb`] implements them.
//! This module imports nothing of payhook, so every layer can see it and no import runs back up.

/// A store call that did not give an answer we can act on. Every variant is retryable from the
/// provider's point of view (we answer 5xx): nothing was decided, or what was decided is
/// recoverable by the same key.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The call failed after the SDK's own retries (throttling, 5xx, timeout, network).
    #[error("DynamoDB {operation} on {table} failed")]
    Unavailable {
        operation: &'static str,
        table: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An item exists but does not have the shape this code writes: never guess with money.
    #[error("item {key} in {table} is malformed: {reason}")]
    Corrupt {
        table: String,
        key: String,
        reason: String,
    },
    /// Concurrent writers kept moving an item this call needed to move (a busy account's
    /// payout guard): nothing was decided, retry.
    #[error("item {key} in {table} is contended; retry")]
    Contended { table: String, key: String },
    /// A dry run was asked to write (`pipeline::dry_run`): it reads and judges, never writes.
    #[error("a dry run does not {operation}")]
    ReadOnly { operation: &'static str },
}
