//! payhook's measuring tools, kept out of the shipped binary and its Lambda zip: what the
//! production function never runs has no place in it.
//!
//! # Layout
//!
//! - [`bench`]: `payhook-tools bench`, a load of signed deliveries against a loopback payhook
//!   (or in process): latency, throughput, DynamoDB requests per delivery.
//! - [`capacity`]: `payhook-tools capacity`, the capacity model (write and read units per
//!   delivery class, hottest partition keys, cost per million), measured from real item images.
//! - [`recorder`]: the SDK interceptor the model costs each request with.
//! - `benches/handler.rs`: the handler's pure logic under criterion (`cargo bench -p
//!   payhook-tools --bench handler`).

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod bench;
pub mod capacity;
pub mod recorder;
