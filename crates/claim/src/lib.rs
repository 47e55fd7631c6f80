//! # dynamo-claim
//!
//! Exactly-once side effects on DynamoDB for AWS Lambda (or any Rust service): claim a key with
//! one conditional write **before** the effect, fence every later write by the claim's owner,
//! replay the stored answer to every duplicate, and never release a claim after an effect whose
//! outcome is unknown.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use dynamo_claim::{Answer, ClaimTable, Failed, Idempotency};
//!
//! #[derive(serde::Serialize)]
//! struct Order { id: String, amount_minor: i64 }
//!
//! let orders = Idempotency::key_path(ClaimTable::new(&client, "claims"), "/id");
//! let order = Order { id: "ord_1".into(), amount_minor: 500 };
//! let answer = orders
//!     .run(&order, None, |_attempt| async { Ok::<_, Failed<std::io::Error>>("charged".to_owned()) })
//!     .await?;
//! assert!(matches!(answer, Answer::Ran(_) | Answer::Replayed(_)));
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! - [`protocol`]: the vocabulary and the one decision, pure ([`judge_existing`]).
//! - [`ClaimTable`]: the claim table on DynamoDB: claim, take over, finalize, release, read.
//! - [`Store`]: the five calls a store keeps the protocol with; [`ClaimTable`] and
//!   [`MemoryStore`] (one process, for users' unit tests) implement it.
//! - [`Idempotency`]: the function-level entry (a key and a payload from the event, a lease
//!   from the deadline, the answer replayed, an optional in-process cache).
//! - [`Idempotency::batch`]: a batch (SQS, Kinesis) run record by record, the ones to deliver
//!   again answered as `batchItemFailures` ([`BatchResponse`]), FIFO-aware.
//! - [`IdempotencyLayer`] (feature `lambda`): the same as a tower layer over a
//!   `lambda_runtime` handler.
//! - `http` (feature `http`): the `Idempotency-Key` header as a tower layer over
//!   `http::Request` services (axum, `lambda_http`): replays with their status, marked headers
//!   and body; 409 while in progress, 422 for another request under the key.
//! - [`StoreClock`]: DynamoDB's own time, learnt from its answers: leases never depend on a
//!   process's clock.
//! - [`item`], [`StoreError`]: attribute plumbing and the one error of every store call, which
//!   tells an outage ([`StoreError::is_retryable`]) from a refusal to fix ([`Rejection`]).
//!
//! # Limits
//!
//! An effect never runs twice because of one of DynamoDB's limits: an answer too large for an
//! item ([`MAX_ITEM_BYTES`]) finishes the claim as done without it
//! ([`ClaimState::DoneUnrecorded`]); a key longer than [`MAX_KEY_BYTES`] is stored hashed
//! ([`storage_key`]); an empty key runs nothing; a claim past its retention is absent whatever
//! TTL has done; a claim that vanished under a finished effect is written back.
//!
//! # The protocol
//!
//! | claim state          | event                 | write (one conditional statement)                     | next state              |
//! |----------------------|-----------------------|-------------------------------------------------------|-------------------------|
//! | absent               | call                  | `PutItem` if `attribute_not_exists(pk)`               | IN_PROGRESS(owner, lease) |
//! | IN_PROGRESS, live    | duplicate             | none: [`ClaimOutcome::InFlight`]                      | unchanged               |
//! | IN_PROGRESS, expired | duplicate or retry    | `UpdateItem` owner if `owner = old AND lease <= now`  | IN_PROGRESS(new owner)  |
//! | IN_PROGRESS(owner)   | effect done           | `UpdateItem` DONE + answer if `owner = me`            | DONE(answer)            |
//! | IN_PROGRESS(owner)   | surely nothing done   | `DeleteItem` if `owner = me AND IN_PROGRESS`          | absent                  |
//! | IN_PROGRESS(owner)   | outcome unknown       | none: the claim stays until its lease runs out        | unchanged               |
//! | IN_PROGRESS(owner)   | effect done, answer over 400 KB | `UpdateItem` DONE + `answer = not_recorded` if `owner = me` | DONE(not recorded) |
//! | DONE                 | duplicate             | none: [`ClaimOutcome::Replay`] of the stored answer (or [`ClaimOutcome::ReplayUnrecorded`]) | unchanged |
//! | DONE, past retention | call                  | `PutItem` if `status = DONE AND expires_at_s <= now`  | IN_PROGRESS(owner, lease) |
//! | any                  | same key, other payload | none: [`ClaimOutcome::Conflict`] (on every path, the `ALL_OLD` image included) | unchanged |
//!
//! A write whose reply was lost and that the SDK sent again meets its own first attempt: the
//! claim carries our token, so the retry knows it as ours (a put finds its own claim, a finalize
//! its own DONE).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod batch;
mod cache;
mod clock;
mod error;
#[cfg(feature = "http")]
pub mod http;
mod idempotent;
pub mod item;
#[cfg(feature = "lambda")]
mod lambda;
pub mod protocol;
mod store;
mod table;

pub use batch::{BatchItem, BatchResponse, ItemFailure};
pub use clock::{local_now_ms, ServerDate, StoreClock};
pub use error::{Rejection, StoreError};
pub use idempotent::{
    Answer, Attempt, Deadline, Error, Failed, Idempotency, DISABLED_VAR, PREFIX_SEPARATOR,
};
#[cfg(feature = "lambda")]
pub use lambda::{Attempted, IdempotencyLayer, Idempotent};
pub use protocol::{
    judge_existing, ClaimOutcome, ClaimRecord, ClaimState, Existing, FinalizeOutcome, Fingerprint,
    OwnerToken, StoredResponse,
};
pub use store::{MemoryStore, Store};
pub use table::{
    expires_at_s, finalized_size, record_of, shard_of, storage_key, ClaimTable, DONE, IN_PROGRESS,
    MAX_ITEM_BYTES, MAX_KEY_BYTES, OPEN_INDEX,
};
