//! The `payhook` command line. Results go to stdout (JSON unless asked for a table), logs and
//! progress to stderr, so `payhook balance X | jq` always works.

pub mod client;
mod demo;
pub mod payouts;
pub mod progress;
pub mod table;
/// Times as operators type them: the vocabulary's, shared with the console.
pub(crate) use crate::domain::time;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::config::Config;
use crate::domain::{AccountId, Currency, Money, ProviderId, Reference};
use crate::dynamodb::{schema, DynamoStore};
use crate::eventlog::{LogFilter, Outcome};
use crate::http::ReadAccess;
use crate::ledger::Ledger;
use crate::metrics::MetricsSink;
use crate::payments::{ExpectedPayment, Payments, RegisterOutcome};
use crate::read::{self, DeliveryQuery};

#[derive(Debug, Parser)]
#[command(
    name = "payhook",
    version,
    about = "Exactly-once money movement from payment webhooks"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the router on a local address (the same router Lambda runs). The read routes
    /// (balances, payments, deliveries) answer only on a loopback address, unless `--read-api`
    /// is given, which requires a bearer token in PAYHOOK_READ_TOKEN on every read.
    Serve {
        #[arg(long, default_value = "127.0.0.1:3000")]
        addr: SocketAddr,
        /// Serve the read routes on any address, each read carrying
        /// `Authorization: Bearer $PAYHOOK_READ_TOKEN`.
        #[arg(long)]
        read_api: bool,
        /// Where the CloudWatch EMF line of each delivery goes: `emf` (stdout, as in Lambda),
        /// `stderr`, or `off` (the default outside Lambda: stdout is for results).
        #[arg(long, value_name = "SINK")]
        metrics: Option<MetricsSink>,
    },
    /// Create the tables (idempotent), or print their schema.
    Tables {
        #[command(subcommand)]
        action: TablesAction,
    },
    /// Checks the configured tables the way a process does before its first claim: their
    /// multi-Region replication (eventual consistency refused). Prints each table's verdict
    /// (JSON); exits 1 when money must not move on them. For tables made outside the template.
    Doctor,
    /// The ledger's stored layout: how many shards each account's entries spread over.
    Ledger {
        #[command(subcommand)]
        action: LedgerAction,
    },
    /// An account's balances per currency, derived from its ledger entries.
    Balance {
        account: String,
        /// Also list the entries.
        #[arg(long)]
        entries: bool,
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
    },
    /// Query the delivery log, newest first.
    Events {
        #[command(flatten)]
        args: EventsArgs,
        /// Also print each delivery's raw body where the listing has it (by reference).
        #[arg(long)]
        bodies: bool,
    },
    /// Registered payments.
    Payments {
        #[command(subcommand)]
        action: PaymentsAction,
    },
    /// Payouts: create one (reserve, send once), show one, list the unsettled.
    Payouts {
        #[command(subcommand)]
        action: payouts::PayoutsAction,
    },
    /// Re-sign a sample API Gateway event (events/…) with the configured secret and the current
    /// time, and print it: signatures carry a timestamp, so stored samples go stale.
    Sign {
        /// Path of an API Gateway HTTP API (v2) event JSON file.
        file: std::path::PathBuf,
    },
    /// One reconciliation pass: resume stuck claims, ask providers about open payments,
    /// re-drive failed deliveries. Prints the report (JSON).
    Reconcile {
        /// Where the pass's CloudWatch EMF line goes: `emf` (stdout, beside the report),
        /// `stderr`, or `off` (the default outside Lambda).
        #[arg(long, value_name = "SINK")]
        metrics: Option<MetricsSink>,
    },
    /// Re-drive stored deliveries through the pipeline (same filters as `events`). Replaying
    /// what was applied changes nothing; what failed or was parked applies now.
    Replay(ReplayArgs),
    /// Drive the sample events against a running server and print what happened.
    Demo {
        #[arg(long, default_value = "http://127.0.0.1:3000")]
        url: String,
        /// The sample to send.
        #[arg(long, default_value = "events/generic/payment_succeeded.json")]
        event: std::path::PathBuf,
    },
    /// The operator console: a web UI on a loopback address (prints its URL on stdout), over
    /// the configured DynamoDB, or over a deployed stack's read API with `--api`.
    Console {
        /// A loopback address only (port 0: any free port).
        #[arg(long, default_value = "127.0.0.1:8025")]
        addr: SocketAddr,
        /// A deployed read API's URL: every read SigV4-signed with your AWS credentials; no
        /// replay from there.
        #[arg(long, value_name = "URL")]
        api: Option<String>,
        /// The read API's Region (default: the standard chain's, e.g. AWS_REGION).
        #[arg(long)]
        region: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub filter: EventsArgs,
    /// Say what each would do; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Also replay deliveries that were themselves replays.
    #[arg(long)]
    pub include_replays: bool,
    /// At most this many deliveries.
    #[arg(long, default_value_t = 10_000)]
    pub max: usize,
}

#[derive(Debug, Subcommand)]
pub enum TablesAction {
    Create,
    /// Print the table definitions (names from env) as JSON.
    Schema,
}

#[derive(Debug, Subcommand)]
pub enum LedgerAction {
    /// Print the stored layout; `--grow N` grows the ledger shards, `--grow-index N` the index
    /// shards, first (never shrinks). Every reader and writer reads the layout from the table,
    /// not from its environment, and a payment's entries stay in the shard recorded when it was
    /// paid, so growing is safe live.
    Shards {
        #[arg(long)]
        grow: Option<u32>,
        #[arg(long)]
        grow_index: Option<u32>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PaymentsAction {
    /// Register a payment the customer is about to make (PENDING).
    Expect {
        #[arg(long, default_value = "generic")]
        provider: String,
        #[arg(long)]
        reference: String,
        #[arg(long)]
        account: String,
        /// Integer minor units.
        #[arg(long)]
        amount: i64,
        #[arg(long)]
        currency: String,
    },
    /// Show a payment's state, money, history and deliveries.
    Show {
        #[arg(long, default_value = "generic")]
        provider: String,
        #[arg(long)]
        reference: String,
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
    },
}

/// How a listing prints: JSON (the default, for scripts) or a table that fits 100 columns.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Json,
    Table,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[arg(long)]
    pub reference: Option<String>,
    #[arg(long)]
    pub provider: Option<String>,
    #[arg(long = "event-id")]
    pub event_id: Option<String>,
    /// The merchant's order id (PAYHOOK_ORDER_KEYS), as logged with each delivery.
    #[arg(long = "order-id")]
    pub order_id: Option<String>,
    /// applied, replayed, in_flight, conflict, stale, ignored, parked, failed
    #[arg(long)]
    pub outcome: Option<String>,
    /// Epoch milliseconds, inclusive.
    #[arg(long)]
    pub since_ms: Option<i64>,
    /// Epoch milliseconds, exclusive.
    #[arg(long)]
    pub until_ms: Option<i64>,
    /// Inclusive, as typed: 2026-12-01 (UTC midnight), 2026-12-01T10:00:00Z (RFC 3339, any
    /// offset), or back from now: 30s, 90m, 24h, 7d.
    #[arg(long = "since", value_name = "TIME", value_parser = time::time_arg, conflicts_with = "since_ms")]
    pub since_time_ms: Option<i64>,
    /// Exclusive, in the forms `--since` takes.
    #[arg(long = "until", value_name = "TIME", value_parser = time::time_arg, conflicts_with = "until_ms")]
    pub until_time_ms: Option<i64>,
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    #[arg(long)]
    pub cursor: Option<String>,
    #[arg(long, value_enum, default_value_t = Format::Json)]
    pub format: Format,
}

/// A command that could not do its job: printed to stderr, exit code 1 (2 for usage).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Read(#[from] crate::read::ReadError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Other(String),
}

pub fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Other(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn usage<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, CliError> {
    r.map_err(|e| CliError::Usage(format!("{what}: {e}")))
}

fn provider(name: &str) -> Result<ProviderId, CliError> {
    crate::providers::registered(name)
        .ok_or_else(|| CliError::Usage(format!("unknown provider {name:?}")))
}

impl EventsArgs {
    pub fn filter(&self) -> Result<LogFilter, CliError> {
        Ok(LogFilter {
            provider: self.provider.as_deref().map(provider).transpose()?,
            reference: self
                .reference
                .as_deref()
                .map(|r| usage("--reference", Reference::parse(r)))
                .transpose()?,
            event_id: self.event_id.clone(),
            order_id: self.order_id.clone(),
            outcome: self
                .outcome
                .as_deref()
                .map(|o| {
                    Outcome::parse(o)
                        .ok_or_else(|| CliError::Usage(format!("unknown outcome {o:?}")))
                })
                .transpose()?,
            since_ms: self.since_ms.or(self.since_time_ms),
            until_ms: self.until_ms.or(self.until_time_ms),
        })
    }
}

/// A command's exit: 0, 2 for a usage error, 1 for anything else, with the error and its
/// causes on stderr (results went to stdout).
pub fn exit_code(result: Result<(), CliError>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(CliError::Usage(m)) => {
            eprintln!("error: {m}");
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one command with clients built once by the binary.
pub async fn run(command: Command, config: Config, store: DynamoStore) -> Result<(), CliError> {
    match command {
        Command::Serve {
            addr,
            read_api,
            metrics,
        } => {
            store.start_replication_check();
            serve(
                addr,
                read_api,
                crate::runtime::metrics_sink(metrics),
                config,
                store,
            )
            .await
        }
        Command::Tables { action } => tables(action, &store).await,
        Command::Doctor => doctor(&store).await,
        Command::Ledger {
            action: LedgerAction::Shards { grow, grow_index },
        } => ledger_shards(grow, grow_index, &store).await,
        Command::Balance {
            account,
            entries,
            format,
        } => {
            let account = usage("account", AccountId::parse(&account))?;
            let view = read::balance(&store, &account, entries).await?;
            print_as(format, &view, table::balance)
        }
        Command::Events { args, bodies } => events(&args, bodies, &store).await,
        Command::Payments { action } => payments(action, &store).await,
        Command::Payouts { action } => payouts::run(action, &config, store).await,
        Command::Sign { file } => print_json(&client::resign_file(&file, &config)?),
        Command::Reconcile { metrics } => reconcile(metrics, &config, store).await,
        Command::Replay(args) => replay_command(&args, &config, store).await,
        Command::Demo { url, event } => demo::run(&url, &event, &config, &store).await,
        Command::Console { addr, api, region } => console(addr, api, region, &config, store).await,
    }
}

/// Who runs this command line, for replays and audit lines: `cli:$USER`.
pub fn operator() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    format!("cli:{user}")
}

/// Prints `value` as pretty JSON, or as the lines `table` makes of it.
fn print_as<T: Serialize>(
    format: Format,
    value: &T,
    table: impl Fn(&T) -> Vec<String>,
) -> Result<(), CliError> {
    match format {
        Format::Json => print_json(value),
        Format::Table => {
            for line in table(value) {
                println!("{line}");
            }
            Ok(())
        }
    }
}

async fn tables(action: TablesAction, store: &DynamoStore) -> Result<(), CliError> {
    match action {
        TablesAction::Create => print_json(&store.create_tables().await?),
        TablesAction::Schema => print_json(&serde_json::json!({
            "tables": schema::ALL.iter().map(|d| serde_json::json!({
                "name": store.tables().name_of(d), "definition": d })).collect::<Vec<_>>(),
            "env": crate::config::env_vars().iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        })),
    }
}

async fn ledger_shards(
    grow: Option<u32>,
    grow_index: Option<u32>,
    store: &DynamoStore,
) -> Result<(), CliError> {
    let layout = match (grow, grow_index) {
        (None, None) => store.layout().await?,
        (l, i) => {
            let want = crate::ledger::Layout {
                ledger_shards: l.unwrap_or(0),
                index_shards: i.unwrap_or(0),
            };
            let detail = serde_json::json!({ "want": want });
            let grown = store.grow_layout(want).await.map_err(CliError::from);
            audited(&operator(), "ledger.grow", &detail, grown)?
        }
    };
    print_json(&layout)
}

/// One page of the log: JSON lines (one delivery each, so `jq` streams them) or a table; the
/// cursor of the next page goes to stderr, beside the results rather than in them.
async fn events(args: &EventsArgs, bodies: bool, store: &DynamoStore) -> Result<(), CliError> {
    let query = DeliveryQuery {
        filter: args.filter()?,
        limit: args.limit,
        cursor: args.cursor.clone(),
        with_bodies: bodies,
        with_details: true,
    };
    let page = read::deliveries(store, &query).await?;
    match args.format {
        Format::Json => {
            for d in &page.deliveries {
                let line = serde_json::to_string(d).map_err(|e| CliError::Other(e.to_string()))?;
                println!("{line}");
            }
        }
        Format::Table => {
            for line in table::deliveries(&page.deliveries) {
                println!("{line}");
            }
        }
    }
    if let Some(next) = &page.next_cursor {
        eprintln!("more: --cursor {next}");
    }
    Ok(())
}

/// One reconciliation pass, a spinner on stderr while it runs, the report on stdout.
async fn reconcile(
    metrics: Option<MetricsSink>,
    config: &Config,
    store: DynamoStore,
) -> Result<(), CliError> {
    let mut ops = crate::runtime::ops(config, store)?;
    ops.metrics = crate::runtime::metrics_sink(metrics);
    let spinner = progress::spinner("reconciling");
    let report =
        crate::reconcile::invoke::handle(&ops, serde_json::Value::Null, &operator(), None).await;
    spinner.finish_and_clear();
    print_json(&report.map_err(CliError::Other)?)
}

/// Re-drives the selected deliveries, a bar on stderr, the summary on stdout; each replay is
/// logged as started by `cli:$USER`.
async fn replay_command(
    args: &ReplayArgs,
    config: &Config,
    store: DynamoStore,
) -> Result<(), CliError> {
    let ops = crate::runtime::ops(config, store)?;
    let opts = crate::replay::ReplayOptions {
        dry_run: args.dry_run,
        concurrency: args.concurrency,
        started_by: operator(),
        lease_ms: config.lease_ms,
        include_replays: args.include_replays,
        max: args.max,
    };
    // The total is known once the deliveries are selected, at the first report.
    let bar = progress::bar("replaying", 0);
    let filter = args.filter.filter()?;
    let detail = serde_json::json!({ "filter": format!("{filter:?}"), "dry_run": opts.dry_run, "max": opts.max });
    let summary = crate::replay::replay(
        &ops.pipeline,
        &ops.providers,
        &filter,
        &opts,
        |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        },
    )
    .await
    .map_err(|e| CliError::Other(e.to_string()));
    bar.finish();
    let summary = audited(&opts.started_by, "replay", &detail, summary)?;
    print_json(&summary)
}

/// Writes the audit line of an operator action and hands its result on.
fn audited<T: Serialize>(
    who: &str,
    action: &str,
    detail: &serde_json::Value,
    result: Result<T, CliError>,
) -> Result<T, CliError> {
    match &result {
        Ok(value) => {
            let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
            crate::audit::record(who, action, detail, Ok(&value));
        }
        Err(e) => crate::audit::record(who, action, detail, Err(&e.to_string())),
    }
    result
}

async fn payments(action: PaymentsAction, store: &DynamoStore) -> Result<(), CliError> {
    match action {
        PaymentsAction::Expect {
            provider: p,
            reference,
            account,
            amount,
            currency,
        } => {
            let currency = usage("--currency", Currency::parse(&currency))?;
            let expected = ExpectedPayment {
                provider: provider(&p)?,
                reference: usage("--reference", Reference::parse(&reference))?,
                account: usage("--account", AccountId::parse(&account))?,
                money: usage("--amount", Money::new(amount, currency))?,
            };
            let detail = serde_json::json!({
                "provider": expected.provider, "reference": expected.reference,
                "account": expected.account, "amount": expected.money.amount.get(),
                "currency": expected.money.currency,
            });
            let outcome = store.register(&expected).await.map_err(CliError::from);
            let said = outcome.as_ref().map(|o| match o {
                RegisterOutcome::Created(_) => "created",
                RegisterOutcome::Exists(_) => "exists",
                RegisterOutcome::Assigned(_) => "assigned",
                RegisterOutcome::Mismatch(..) => "mismatch",
            });
            let said = said.map_err(|e| CliError::Other(e.to_string()));
            audited(&operator(), "payments.expect", &detail, said)?;
            match outcome? {
                RegisterOutcome::Created(p) => {
                    print_json(&serde_json::json!({"result": "created", "payment": p}))
                }
                RegisterOutcome::Exists(p) => {
                    print_json(&serde_json::json!({"result": "exists", "payment": p}))
                }
                RegisterOutcome::Assigned(p) => {
                    let next = format!(
                        "payhook replay --outcome unassigned --reference {}",
                        p.reference
                    );
                    print_json(
                        &serde_json::json!({"result": "assigned", "payment": p, "next": next}),
                    )
                }
                RegisterOutcome::Mismatch(m, p) => {
                    print_json(
                        &serde_json::json!({"result": "mismatch", "mismatch": m, "payment": p}),
                    )?;
                    Err(CliError::Other(format!(
                        "payment exists with another {}",
                        m.field
                    )))
                }
            }
        }
        PaymentsAction::Show {
            provider: p,
            reference,
            format,
        } => {
            let provider = provider(&p)?;
            let reference = usage("--reference", Reference::parse(&reference))?;
            let view = read::payment(store, provider, &reference).await?;
            print_as(format, &view, table::payment)
        }
    }
}

/// Who may use the read routes of `payhook serve`: with `--read-api`, bearers of the token (and
/// no token configured is an error, not an open door); without it, whoever can reach a loopback
/// address, and nobody when listening on any other.
pub fn serve_read_access(
    addr: SocketAddr,
    read_api: bool,
    config: &Config,
) -> Result<ReadAccess, CliError> {
    match (read_api, &config.read_token) {
        (true, Some(token)) => Ok(ReadAccess::Token(token.clone())),
        (true, None) => Err(CliError::Usage(
            "--read-api needs a bearer token in PAYHOOK_READ_TOKEN".into(),
        )),
        (false, _) if addr.ip().is_loopback() => Ok(ReadAccess::Loopback),
        (false, _) => Ok(ReadAccess::Off),
    }
}

/// `payhook console`: binds a loopback address, prints the URL, serves until Ctrl-C.
async fn console(
    addr: SocketAddr,
    api: Option<String>,
    region: Option<String>,
    config: &Config,
    store: DynamoStore,
) -> Result<(), CliError> {
    if !addr.ip().is_loopback() {
        return Err(CliError::Usage(format!(
            "the console serves a loopback address only, not {addr}"
        )));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    // 244 random bits (two v4 UUIDs, from the OS's generator): the console's access token.
    let access = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let base = |replay| crate::console::Console {
        source: (),
        replay,
        csrf: uuid::Uuid::new_v4().simple().to_string(),
        origin: origin.clone(),
        lease_ms: config.lease_ms,
        pending_after_ms: config.reconcile.pending_after_ms,
        payout_unresolved_after_ms: config.reconcile.payout_unresolved_after_ms,
        operator: format!("console:{user}"),
        access: access.clone(),
        done: Default::default(),
    };
    // Only here: stdout is the operator's (never argv or the environment, which other local
    // users can list).
    println!("{origin}/?token={access}");
    let done = match api {
        Some(url) => {
            let source = crate::console::source::ApiSource::new(&url, region)
                .await
                .map_err(|e| CliError::Usage(e.to_string()))?;
            let c = base(None);
            eprintln!("payhook console on {origin}/ reading {url} (SigV4)");
            crate::console::serve(listener, c.with_source(source), shutdown()).await
        }
        None => {
            let ops = crate::runtime::ops(config, store.clone())?;
            warm_in_background(store.clone(), config);
            let label = format!("DynamoDB tables {}", store.tables().payments);
            let source = crate::console::source::StoreSource { store, label };
            eprintln!("payhook console on {origin}/ reading the configured DynamoDB");
            crate::console::serve(listener, base(Some(ops)).with_source(source), shutdown()).await
        }
    };
    Ok(done?)
}

/// Stores the rollups of the console's longest window (7 days) while the operator opens the
/// first page, so no page walks the log for long (`read::warm_rollups`); logged, never fatal.
fn warm_in_background(store: DynamoStore, config: &Config) {
    use crate::idempotency::Claims;
    let (providers, _) = config.providers();
    tokio::spawn(async move {
        let now = store.now_ms();
        let window = (now - crate::http::read::MAX_WINDOW_MS, now, now);
        match crate::read::warm_rollups(&store, &providers, window, 20).await {
            Ok(true) => tracing::info!("console rollups stored for the last 7 days"),
            Ok(false) => tracing::info!("console rollups partly stored; pages store the rest"),
            Err(e) => tracing::warn!(error = %e, "console rollups not stored; pages will"),
        }
    });
}

/// `payhook doctor`: the replication check, on demand.
async fn doctor(store: &DynamoStore) -> Result<(), CliError> {
    use crate::dynamodb::regions::{Replication, ReplicationCheck};
    match store.check_replication().await {
        Ok(verdicts) => {
            let tables: Vec<serde_json::Value> = verdicts
                .iter()
                .map(|v| match v {
                    Replication::Single => serde_json::json!({"replication": "single-region"}),
                    Replication::Strong { regions } => serde_json::json!(
                        {"replication": "multi-region strong consistency", "regions": regions}),
                })
                .collect();
            print_json(&serde_json::json!({"money_may_move": true, "tables": tables}))
        }
        Err(ReplicationCheck::Eventual(e)) => {
            print_json(&serde_json::json!({"money_may_move": false, "reason": e.to_string()}))?;
            Err(CliError::Other(e.to_string()))
        }
        Err(ReplicationCheck::Store(e)) => Err(CliError::Store(e)),
    }
}

/// Serves the router on `addr` until Ctrl-C or SIGTERM, EMF lines to `metrics`.
async fn serve(
    addr: SocketAddr,
    read_api: bool,
    metrics: MetricsSink,
    config: Config,
    store: DynamoStore,
) -> Result<(), CliError> {
    // A server that would reserve payouts and never send one does not start.
    config.check_payout_timing(false)?;
    let access = serve_read_access(addr, read_api, &config)?;
    // Never open: a route that moves money out needs its token even on loopback. Each caller's
    // scope is read from the store (and its new tokens bound) before anything is served.
    let payout_access = crate::runtime::serve_payout_access(&config, &store)
        .await
        .map_err(|e| CliError::Other(e.to_string()))?;
    let gated = store.clone();
    let mut app = crate::runtime::build_app(&config, store);
    if let Some(a) = Arc::get_mut(&mut app) {
        a.read_access = access.clone();
        a.metrics = metrics;
        a.payouts = crate::runtime::payout_service(&config, payout_access);
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, read_access = access.describe(), "serving POST /webhooks/{{provider}} and the read routes");
    eprintln!("payhook listening on http://{}", listener.local_addr()?);
    let server = axum::serve(listener, crate::http::router(app)).with_graceful_shutdown(shutdown());
    // Ready before the replication check answers; a verdict against the tables ends the process
    // (every claim before it was refused already: the claims wait for it).
    let refused = async {
        match gated.replication_verdict().await {
            Some(e) => e,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        served = server => served?,
        e = refused => return Err(CliError::Other(e.to_string())),
    }
    Ok(())
}

async fn shutdown() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! { _ = ctrl_c => {}, _ = term.recv() => {} }
            return;
        }
    }
    let _ = ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(args: &[&str]) -> Result<EventsArgs, clap::Error> {
        let argv = ["payhook", "events"].iter().chain(args).copied();
        match Cli::try_parse_from(argv)?.command {
            Command::Events { args, .. } => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn since_and_until_take_typed_times_into_the_same_filter_as_the_ms_flags() {
        let typed = events(&[
            "--since",
            "2026-12-01",
            "--until",
            "2026-12-02T00:00:00+01:00",
        ])
        .unwrap()
        .filter()
        .unwrap();
        assert_eq!(typed.since_ms, Some(1_796_083_200_000));
        assert_eq!(typed.until_ms, Some(1_796_083_200_000 + 23 * 3_600_000));
        let raw = events(&["--since-ms", "5", "--until-ms", "9"])
            .unwrap()
            .filter()
            .unwrap();
        assert_eq!((raw.since_ms, raw.until_ms), (Some(5), Some(9)));
        let before = crate::domain::now_ms();
        let relative = events(&["--since", "24h"]).unwrap().filter().unwrap();
        let since = relative.since_ms.unwrap();
        assert!((before - 86_400_000..=before - 86_400_000 + 60_000).contains(&since));
    }

    #[test]
    fn a_time_given_both_ways_or_unreadable_is_a_usage_error() {
        use clap::error::ErrorKind;
        for (args, kind) in [
            (
                &["--since", "24h", "--since-ms", "5"][..],
                ErrorKind::ArgumentConflict,
            ),
            (
                &["--until-ms", "5", "--until", "1d"][..],
                ErrorKind::ArgumentConflict,
            ),
            (&["--since", "yesterday"][..], ErrorKind::ValueValidation),
        ] {
            let err = events(args).unwrap_err();
            assert_eq!(err.kind(), kind, "{args:?}");
            assert_eq!(err.exit_code(), 2);
        }
        let err = events(&["--since", "2026-02-30"]).unwrap_err().to_string();
        assert!(err.contains("day out of range"), "{err}");
    }
}
