//! `payhook-tools`: the load bench and the capacity model, against the DynamoDB payhook is
//! configured for (the same environment as `payhook`). Results on stdout, progress on stderr.

use clap::{Parser, Subcommand};
use payhook::cli::CliError;
use payhook::config::Config;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "payhook-tools",
    about = "payhook's load bench and capacity model"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Load a payhook (loopback) with signed deliveries: p50/p99 latency and deliveries/s at
    /// several concurrencies, all-new and 50%-duplicate traffic.
    Bench(payhook_tools::bench::BenchArgs),
    /// The capacity model: write/read units per delivery, hottest partition keys at 10,000
    /// deliveries/s and at 1,000 credits/s on one account, balance read cost, cost per million.
    Capacity(payhook_tools::capacity::CapacityArgs),
}

async fn run() -> Result<(), CliError> {
    let args = Cli::parse();
    let config = Config::from_env()?;
    let config = payhook::runtime::read_secrets(config).await;
    let store = payhook::runtime::dynamo_store(&config).await;
    match args.command {
        Command::Bench(a) => payhook_tools::bench::run(a, config, store).await,
        Command::Capacity(a) => payhook_tools::capacity::run(a, config, store).await,
    }
}

/// The shipped binary's allocator, so the in-process bench measures what production runs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    payhook::runtime::init_tracing();
    let result = match payhook::runtime::tokio_runtime() {
        Ok(rt) => rt.block_on(run()),
        Err(e) => Err(CliError::Other(format!("tokio runtime: {e}"))),
    };
    payhook::cli::exit_code(result)
}
