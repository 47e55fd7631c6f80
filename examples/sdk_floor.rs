//! The bare-SDK floor of a delivery, for `scripts/bench`: `ROUNDS` rounds of the requests one
//! class of delivery makes (`CALLS`, one letter a request: `P` PutItem, `U` UpdateItem, `G`
//! consistent GetItem; `UPUP` a new credit's four, `UP` a duplicate's two where the store returns
//! `ALL_OLD`, `UGP` on dynalite; `PPPPP` by default, the five writes before #32), unconditional,
//! with none of payhook's logic, through a client
//! built exactly as payhook builds its own (`payhook::runtime::dynamo_store`: timeouts, plain
//! HTTP locally, the lean interceptors) and the same allocator. Run under callgrind twice with two
//! round counts, the difference divided by the rounds' difference is the SDK's instructions per
//! five requests, start-up cancelled out: what payhook's own instructions per new delivery are
//! judged against.
//!
//!   cargo build --release --example sdk_floor
//!   ROUNDS=200 CALLS=UPUP target/release/examples/sdk_floor   # tables from PAYHOOK_*_TABLE

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
    let calls = std::env::var("CALLS").unwrap_or_else(|_| "PPPPP".to_owned());
    let run = std::process::id();
    for round in 0..rounds {
        for (i, call) in calls.chars().enumerate() {
            let pk = s(format!("floor#{run}#{round}"));
            let sk = s(format!("{i}"));
            let sent = match call {
                'U' => client
                    .update_item()
                    .table_name(&table)
                    .key("pk", pk)
                    .key("sk", sk)
                    .update_expression("SET body = :b")
                    .expression_attribute_values(":b", s("{\"status\":\"applied\"}".to_owned()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                'G' => client
                    .get_item()
                    .table_name(&table)
                    .key("pk", pk)
                    .key("sk", sk)
                    .consistent_read(true)
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                _ => client
                    .put_item()
                    .table_name(&table)
                    .item("pk", pk)
                    .item("sk", sk)
                    .item("body", s("{\"status\":\"applied\"}".to_owned()))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
            };
            if let Err(e) = sent {
                eprintln!("sdk_floor: {call}: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    std::process::ExitCode::SUCCESS
}

fn s(v: String) -> aws_sdk_dynamodb::types::AttributeValue {
    aws_sdk_dynamodb::types::AttributeValue::S(v)
}
