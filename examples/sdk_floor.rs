//! The bare-SDK floor of a delivery, for `scripts/bench`: `ROUNDS` rounds of five unconditional
//! `PutItem`s (a new delivery's five writes, with none of payhook's logic), through a client
//! built exactly as payhook builds its own (`payhook::runtime::dynamo_store`: timeouts, plain
//! HTTP locally, the lean interceptors) and the same allocator. Run under callgrind twice with two
//! round counts, the difference divided by the rounds' difference is the SDK's instructions per
//! five requests, start-up cancelled out: what payhook's own instructions per new delivery are
//! judged against.
//!
//!   cargo build --release --example sdk_floor
//!   ROUNDS=200 target/release/examples/sdk_floor   # tables from PAYHOOK_*_TABLE, as payhook

use payhook::config::Config;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match payhook::runtime::tokio_runtime() {
        Ok(rt) => rt.block_on(floor()),
        Err(e) => {
            eprintln!("sdk_floor: tokio runtime: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn floor() -> std::process::ExitCode {
    let rounds: u32 = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(100);
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sdk_floor: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let store = payhook::runtime::dynamo_store(&config).await;
    let (client, table) = (store.client().clone(), store.tables().events.clone());
    let run = std::process::id();
    for round in 0..rounds {
        for write in 0..5 {
            let sent = client
                .put_item()
                .table_name(&table)
                .item("pk", s(format!("floor#{run}#{round}")))
                .item("sk", s(format!("{write}")))
                .item("body", s("{\"status\":\"applied\"}".to_owned()))
                .send()
                .await;
            if let Err(e) = sent {
                eprintln!("sdk_floor: PutItem: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}

fn s(v: String) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::S(v)
}
