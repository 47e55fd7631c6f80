//! # payhook
//!
//! An AWS Lambda (and a local HTTP server) that receives payment-provider webhooks and turns
//! their at-least-once delivery into **exactly-once money movement**, with DynamoDB conditional
//! writes as the referee.
//!
//! Providers retry, redeliver, reorder and arrive late; check-then-act double-credits under
//! concurrency. So every money movement first **claims** its key
//! (`{provider}:{operation}:{reference}`) with one conditional `PutItem`
//! (`attribute_not_exists`). Exactly one claim wins and moves the money; every duplicate gets the
//! **stored response** replayed. Each step after the claim is idempotent by the same key, so an
//! invocation that dies between any two writes is finished by the next attempt, never repeated.
//!
//! # Layout
//!
//! - [`domain`]: money (minor units + ISO currency), keys, normalised events, payment states.
//! - [`providers`]: one adapter per provider: verify the raw body, map it to a normalised event.
//! - [`pipeline`]: claim -> payment transition -> ledger entry -> finalize -> log; a payment's
//!   credit, and a refund, dispute movement or reversal that applies, claim on their payment
//!   item instead, in the write that moves the payment (four writes, `credits.rs`, `held.rs`).
//! - [`idempotency`]: the `Claims` capability; the claim outcome enum and the pure decision over
//!   an existing claim are the `dynamo_claim` crate's (crates/claim), re-exported.
//! - [`payments`]: the payment state machine, and how a failed transition is judged (pure).
//! - [`payouts`]: money out: payout ids, requests, states, the settlement rule, the store and
//!   transfer capabilities (pure; the guard that keeps payouts from overdrawing is in
//!   `dynamodb::payouts`, the request's steps in `pipeline::payouts`).
//! - [`ledger`]: postings, the stored shard layout, balances as sums of entries.
//! - [`eventlog`]: the append-only delivery log and its queries.
//! - [`store`]: the error every store call can give (the seam; the traits sit beside their types).
//! - [`dynamodb`]: the only code that speaks DynamoDB, one module per table, item mapping beside it.
//! - [`read`]: balances, payments and delivery pages as the CLI prints them and the read API
//!   serves them (one code path for both).
//! - [`http`]: the axum router shared by `payhook serve` and the Lambda runtime: the webhook
//!   route, and the authorized read routes ([`http::read`]).
//! - [`reconcile`]: the backstop: stuck claims, open payments (asking the provider), failed deliveries.
//! - [`replay`]: re-driving stored deliveries through the pipeline.
//! - [`secrets`]: provider secrets read from Secrets Manager at run time (every rotation stage).
//! - [`audit`]: one structured line per operator action (who, what, when, how it ended).
//! - [`config`]: environment, read once.
//! - [`cli`]: the `payhook` command line.
//! - [`console`]: `payhook console`, the operator's web UI over the read layer (and replay).
//!
//! Layers, bottom first; a module uses only its own layer and those below (tests/it/layers.rs
//! checks it): `domain`, `store` → `idempotency`, `payments`, `payouts`, `ledger`, `eventlog`,
//! `providers` → `pipeline`, `read`, `replay`, `reconcile`, `metrics`, `audit` → `dynamodb`, `http`, `secrets` →
//! `config`, `runtime`, `cli`, `console`.
//!
//! # The idempotency protocol
//!
//! | claim state          | event                          | write (one conditional statement)                      | next state            |
//! |----------------------|--------------------------------|--------------------------------------------------------|-----------------------|
//! | absent               | delivery                       | `PutItem` if `attribute_not_exists(pk)`                | IN_PROGRESS(owner, lease) |
//! | IN_PROGRESS, live    | duplicate                      | none: answer 409 + `Retry-After`                       | unchanged             |
//! | IN_PROGRESS, expired | duplicate or retry             | `UpdateItem` owner if `owner = old AND lease <= now`   | IN_PROGRESS(new owner) |
//! | IN_PROGRESS(owner)   | money moved                    | `UpdateItem` DONE + response if `owner = me`           | DONE(response)        |
//! | IN_PROGRESS(owner)   | nothing moved (mismatch, parked, unassigned) | `DeleteItem` if `owner = me AND IN_PROGRESS` | absent             |
//! | DONE                 | duplicate                      | none: replay the stored response                       | unchanged             |
//! | any                  | same key, other money          | none: answer 422 `reference_conflict`                  | unchanged             |
//!
//! Between claim and finalize, the steps are: the payment's transition (`status IN (sources)`,
//! recording the key that moved it) and the ledger entry (`PutItem` keyed by the key). A retry
//! that finds a step's condition false *and* its key recorded knows the step was its own, and
//! goes on. Balances are sums of entries, never a bare `ADD` a retry could repeat. A write whose
//! reply was lost and that the SDK sent again meets its own first attempt: the claim carries our
//! token, the payment our key, the log item our delivery id, so the retry knows it as ours.
//!
//! Nothing a retry needs is recomputed from what may change in between: a payment's ledger shard
//! is recorded when it is paid, a provider transaction is bound to the reference it was first
//! keyed by, and the account credited is recorded on the payment. Nor does anything depend on a
//! process's clock: leases, movement times and ledger checkpoints are in DynamoDB's own time,
//! learnt from the `Date` of its answers ([`dynamo_claim::StoreClock`]), so a takeover, a replay or a
//! balance read on a machine minutes off judges and writes the same times as every other.
//!
//! # Money out
//!
//! A payout is the same protocol around an *outgoing* call (`pipeline::payouts`, [`pipeline::Pipeline::payout`]): claim the
//! caller's `Idempotency-Key` (`payout:{id}`, the id derived from caller and key), record the
//! payout (`new`), decide its reservation through the account's guard item (one conditional
//! write per decision, so concurrent payouts never overdraw: [`dynamodb`]'s `payouts` module),
//! take the call's fence (one conditional write recording until when the call may run, in the
//! store's time, and the send count), call the provider once under the id as its reference,
//! apply the provider's word under the word's own key, finalize. Nobody calls a reference while
//! its fence holds; a call whose outcome is unknown is never repeated under another reference,
//! and a lookup that finds nothing proves nothing until the send's visibility window has
//! passed: money comes back only on the provider's word. The states and the settlement rule:
//! [`payouts`]; the fence and what each look does: [`payouts::calls`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod audit;
pub mod cli;
pub mod config;
pub mod console;
pub mod domain;
pub mod dynamodb;
pub mod eventlog;
pub mod http;
pub mod idempotency;
pub mod ledger;
pub mod metrics;
pub mod payments;
pub mod payouts;
pub mod pipeline;
pub mod providers;
pub mod read;
pub mod reconcile;
pub mod replay;
pub mod runtime;
pub mod secrets;
pub mod store;
