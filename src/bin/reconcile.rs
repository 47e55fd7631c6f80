//! The operations function. On its schedule it runs a reconciliation pass; invoked directly with
//! `{"action":"replay",…}` it replays stored deliveries. Outside Lambda it runs one pass and
//! prints the report (`payhook reconcile` does the same from the CLI).

use std::process::ExitCode;

use lambda_http::lambda_runtime::{self, service_fn, LambdaEvent};
use payhook::config::Config;
use payhook::reconcile::invoke::handle;
use payhook::runtime;
use serde_json::Value;

async fn run() -> Result<(), String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let config = runtime::read_secrets(config).await;
    let store = runtime::dynamo_store(&config).await;
    // Off the path to ready; every claim waits for its verdict (dynamodb::regions).
    store.start_replication_check();
    let ops = runtime::ops(&config, store).map_err(|e| e.to_string())?;
    if !runtime::in_lambda() {
        let report = handle(&ops, Value::Null, &payhook::cli::operator(), None).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    let ops = &ops;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let deadline_ms = i64::try_from(event.context.deadline).ok();
        let caller = format!("lambda:{}", event.context.request_id);
        handle(ops, event.payload, &caller, deadline_ms).await
    }))
    .await
    .map_err(|e| e.to_string())
}

/// mimalloc: fewer instructions per allocation than glibc malloc, and the SDK, hyper and serde
/// allocate on every request (docs/performance.md has the saving).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    runtime::init_tracing();
    let result = match runtime::tokio_runtime() {
        Ok(rt) => rt.block_on(run()),
        Err(e) => Err(format!("tokio runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
