//! The payhook binary: inside Lambda it runs the webhook router under `lambda_http`; elsewhere
//! it is the `payhook` command line (`serve`, `tables`, `balance`, `events`, …). Clients are
//! built once here and handed to the library.

use clap::Parser;
use payhook::cli::{self, Cli, CliError};
use payhook::config::Config;
use std::process::ExitCode;

async fn run() -> Result<(), CliError> {
    let config = Config::from_env()?;
    // Provider secrets named by `*_ARN` variables, from Secrets Manager (never the environment).
    let config = payhook::runtime::read_secrets(config).await;
    if payhook::runtime::in_lambda() {
        // A function that would reserve payouts and never send one does not start.
        config.check_payout_timing(true)?;
        let store = payhook::runtime::dynamo_store(&config).await;
        // Off the path to ready: the first claim waits for the verdict (dynamodb::regions), so
        // no cold start pays DescribeTable and no money moves on eventual replicas.
        store.start_replication_check();
        let app = payhook::runtime::build_app(&config, store);
        let router = payhook::http::router(app);
        // EventBridge events (the pass-through) answered 5xx become function errors, so Lambda
        // retries them: payhook::http::events.
        let service = tower::service_fn(move |req: lambda_http::Request| {
            payhook::http::events::lambda_call(router.clone(), req)
        });
        return lambda_http::run(service)
            .await
            .map_err(|e| CliError::Other(format!("lambda runtime: {e}")));
    }
    let args = Cli::parse();
    cli::run(
        args.command,
        config.clone(),
        payhook::runtime::dynamo_store(&config).await,
    )
    .await
}

/// mimalloc: fewer instructions per allocation than glibc malloc, and the SDK, hyper and serde
/// allocate on every request (docs/performance.md has the saving).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    payhook::runtime::init_tracing();
    let result = match payhook::runtime::tokio_runtime() {
        Ok(rt) => rt.block_on(run()),
        Err(e) => Err(CliError::Other(format!("tokio runtime: {e}"))),
    };
    cli::exit_code(result)
}
