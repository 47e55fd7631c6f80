//! Every integration test, as modules of one test binary: one link of the crate and the AWS
//! SDK instead of one per file (`cargo test --test it`; a module's tests alone with
//! `cargo test --test it console::`). Each module says what it proves; `common` is the shared
//! harness (dynalite per process or the endpoint in `AWS_ENDPOINT_URL_DYNAMODB`, uniquely named
//! tables per test, signed-request builders).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod adyen;
mod bench_scripts;
mod capacity;
mod change_events;
mod cli;
mod console;
mod console_browser;
mod crash;
mod disputes;
mod drift;
mod drift_model;
mod eventbridge;
mod fuzz_providers;
mod held;
mod kill;
mod layers;
mod lifecycle;
mod money;
mod moto;
mod paid_image;
mod payout_callers;
mod payout_providers;
mod payout_units;
mod payout_words;
mod payouts;
mod payouts_model;
mod providers;
mod read_api;
mod reconcile;
mod refunds;
mod replay;
mod secrets;
mod template;
mod webhook;
