//! The payhook binary: inside Lambda it runs the webhook router under `lambda_http`; elsewhere
//! it is the `payhook` command line (`serve`, `tables`, `balance`, `events`, …). Clients are
//! built once here and handed to the library.

use std::process::ExitCode;
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use clap::Parser;
use payhook::cli::{self, Cli, CliError};
use payhook::config::Config;
use payhook::store::dynamodb::DynamoStore;

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|v| v.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().with_current_span(false).init();
    } else {
        builder.with_ansi(false).init();
    }
}

/// One SDK client per process. Endpoint, region and credentials come from the standard chain
/// (`AWS_ENDPOINT_URL_DYNAMODB` points it at dynalite or DynamoDB Local).
async fn store(config: &Config) -> DynamoStore {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(2))
        .operation_attempt_timeout(Duration::from_secs(3))
        .operation_timeout(Duration::from_secs(10))
        .build();
    let sdk = aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts).load().await;
    DynamoStore::new(aws_sdk_dynamodb::Client::new(&sdk), config.tables.clone(), config.store)
}

async fn run() -> Result<(), CliError> {
    let config = Config::from_env()?;
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        let app = cli::build_app(&config, store(&config).await);
        return lambda_http::run(payhook::http::router(app))
            .await
            .map_err(|e| CliError::Other(format!("lambda runtime: {e}")));
    }
    let args = Cli::parse();
    cli::run(args.command, config.clone(), store(&config).await).await
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(m)) => {
            eprintln!("error: {m}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}
