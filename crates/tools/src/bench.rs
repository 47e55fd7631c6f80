//! `payhook-tools bench`: end-to-end load against a running payhook (`--url`, loopback only) or against
//! the router served in this process, at several concurrencies, for all-new and 50%-duplicate
//! traffic. Prints p50/p99 latency and deliveries per second as a table on stdout (or `--json`
//! to compare commits), a progress bar on stderr (one line per cell when stderr is not a
//! terminal). Bounded: `--requests` per cell and `--max-seconds` per cell.
//!
//! In-process, the store's client is wrapped with a [`RequestCounter`], so the table also shows
//! DynamoDB requests per delivery. Nothing here is on the money path: it sends signed HTTP
//! requests like a provider would.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

use payhook::cli::client::sign_headers;
use payhook::cli::CliError;
use payhook::config::Config;
use payhook::domain::{now_ms, ProviderId};
use payhook::dynamodb::observe::RequestCounter;
use payhook::dynamodb::DynamoStore;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// A running payhook (loopback only), e.g. http://127.0.0.1:3000. Without it, the router is
    /// served on a loopback port inside this process (tables created if missing).
    #[arg(long)]
    pub url: Option<String>,
    /// Deliveries per cell (one cell = one concurrency x one traffic mix).
    #[arg(long, default_value_t = 400)]
    pub requests: usize,
    /// Concurrencies to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    pub concurrency: Vec<usize>,
    /// Stop issuing deliveries in a cell after this many seconds.
    #[arg(long, default_value_t = 60)]
    pub max_seconds: u64,
    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The traffic of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Traffic {
    /// Every delivery a new money movement.
    New,
    /// Half new, half redeliveries of events applied before the cell started.
    Dup50,
}

impl Traffic {
    fn as_str(self) -> &'static str {
        match self {
            Traffic::New => "new",
            Traffic::Dup50 => "dup50",
        }
    }
}

/// One cell's figures.
#[derive(Debug, Clone, Serialize)]
struct Row {
    traffic: Traffic,
    concurrency: usize,
    deliveries: usize,
    /// Responses by HTTP status; 0 counts transport errors.
    statuses: BTreeMap<u16, usize>,
    replayed: usize,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    per_s: f64,
    /// DynamoDB requests per delivery by operation (in-process only).
    #[serde(skip_serializing_if = "Option::is_none")]
    requests_per_delivery: Option<BTreeMap<String, f64>>,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    target: &'a str,
    version: &'static str,
    requests_per_cell: usize,
    rows: Vec<Row>,
}

/// One delivery to send: its event id and body.
#[derive(Debug, Clone)]
struct Event {
    id: String,
    body: Vec<u8>,
}

fn payment(run: &str, n: usize) -> Event {
    let id = format!("evt_{run}_{n}");
    let body = format!(
        r#"{{"id":"{id}","type":"payment.succeeded","created":{},"data":{{"reference":"bench_{run}_{n}","account":"bench_{}","amount":{},"currency":"NGN"}}}}"#,
        now_ms() / 1_000,
        n % 64,
        1_000 + n
    );
    Event {
        id,
        body: body.into_bytes(),
    }
}

type Http = Client<HttpConnector, Full<Bytes>>;

struct Target {
    url: String,
    client: Http,
    config: Config,
}

struct Sent {
    status: u16,
    replayed: bool,
    elapsed: Duration,
}

impl Target {
    async fn send(&self, e: &Event) -> Sent {
        let started = Instant::now();
        let sent = self.try_send(e).await;
        let elapsed = started.elapsed();
        match sent {
            Ok((status, replayed)) => Sent {
                status,
                replayed,
                elapsed,
            },
            Err(_) => Sent {
                status: 0,
                replayed: false,
                elapsed,
            },
        }
    }

    async fn try_send(&self, e: &Event) -> Result<(u16, bool), CliError> {
        let headers = sign_headers(
            ProviderId::GENERIC,
            &self.config,
            &e.body,
            &e.id,
            now_ms() / 1_000,
        )?;
        let mut req = http::Request::post(&self.url).header("content-type", "application/json");
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(e.body.clone())))
            .map_err(|e| CliError::Other(e.to_string()))?;
        let res = self
            .client
            .request(req)
            .await
            .map_err(|e| CliError::Other(e.to_string()))?;
        let status = res.status().as_u16();
        let replayed = res
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        res.into_body()
            .collect()
            .await
            .map_err(|e| CliError::Other(e.to_string()))?;
        Ok((status, replayed))
    }
}

/// Refuses anything but a loopback `http://` URL: this tool generates load.
fn loopback(url: &str) -> Result<String, CliError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| CliError::Usage(format!("--url {url:?}: {e}")))?;
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let is_loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if uri.scheme_str() != Some("http") || !is_loopback {
        return Err(CliError::Usage(format!(
            "--url must be http:// on a loopback address, got {url:?}"
        )));
    }
    Ok(format!("{}/webhooks/generic", url.trim_end_matches('/')))
}

/// Sends `events` with `concurrency` workers; returns the replies and the wall time. Progress
/// is a bar on a terminal, and one line per cell when stderr is a log.
async fn drive(
    target: &Arc<Target>,
    events: Arc<Vec<Event>>,
    concurrency: usize,
    deadline: Duration,
    label: &str,
) -> (Vec<Sent>, Duration) {
    let total = events.len();
    let bar = payhook::cli::progress::bar(label, total as u64);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (target, events, next, bar) =
                (target.clone(), events.clone(), next.clone(), bar.clone());
            tokio::spawn(async move {
                let mut sent = Vec::new();
                while started.elapsed() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(e) = events.get(i) else { break };
                    sent.push(target.send(e).await);
                    bar.inc(1);
                }
                sent
            })
        })
        .collect();
    let results = futures::future::join_all(workers).await;
    let elapsed = started.elapsed();
    bar.finish();
    if bar.is_hidden() {
        eprintln!(
            "{label:<14} {}/{total} {:.1}s",
            bar.position(),
            elapsed.as_secs_f64()
        );
    }
    (
        results
            .into_iter()
            .flat_map(Result::unwrap_or_default)
            .collect(),
        elapsed,
    )
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let i = rank.clamp(1, sorted.len()) - 1;
    sorted.get(i).map_or(0.0, |d| d.as_secs_f64() * 1_000.0)
}

fn row(traffic: Traffic, concurrency: usize, sent: &[Sent], elapsed: Duration) -> Row {
    let mut latencies: Vec<Duration> = sent.iter().map(|s| s.elapsed).collect();
    latencies.sort_unstable();
    let mut statuses = BTreeMap::new();
    for s in sent {
        *statuses.entry(s.status).or_insert(0) += 1;
    }
    let secs = elapsed.as_secs_f64();
    Row {
        traffic,
        concurrency,
        deliveries: sent.len(),
        statuses,
        replayed: sent.iter().filter(|s| s.replayed).count(),
        p50_ms: percentile(&latencies, 50.0),
        p99_ms: percentile(&latencies, 99.0),
        max_ms: latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1_000.0),
        per_s: if secs > 0.0 {
            sent.len() as f64 / secs
        } else {
            0.0
        },
        requests_per_delivery: None,
    }
}

/// Serves the router on a loopback port in this process, over a counted client; metrics off
/// (stdout carries the results).
async fn in_process(
    config: &Config,
    store: DynamoStore,
    counter: &RequestCounter,
) -> Result<String, CliError> {
    let conf = store
        .client()
        .config()
        .to_builder()
        .interceptor(counter.clone())
        .build();
    let counted = DynamoStore::new(
        aws_sdk_dynamodb::Client::from_conf(conf),
        store.tables().clone(),
        store.settings(),
    );
    counted.create_tables().await?;
    let mut app = payhook::runtime::build_app(config, counted);
    if let Some(app) = Arc::get_mut(&mut app) {
        app.metrics = payhook::metrics::MetricsSink::Off;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = payhook::http::router(app);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "bench server stopped");
        }
    });
    Ok(format!("http://{addr}"))
}

pub async fn run(args: BenchArgs, config: Config, store: DynamoStore) -> Result<(), CliError> {
    check_args(&args, &config)?;
    let counter = RequestCounter::new();
    let (base, label) = match &args.url {
        Some(url) => (url.clone(), url.clone()),
        None => (
            in_process(&config, store, &counter).await?,
            "in-process router".to_owned(),
        ),
    };
    let mut client = Client::builder(TokioExecutor::new());
    client.pool_idle_timeout(Duration::from_secs(30));
    let target = Arc::new(Target {
        url: loopback(&base)?,
        client: client.build_http(),
        config,
    });
    let mut bench = Bench {
        target,
        counter,
        deadline: Duration::from_secs(args.max_seconds),
        run: uuid::Uuid::new_v4()
            .simple()
            .to_string()
            .chars()
            .take(8)
            .collect(),
        next: 0,
        count_requests: args.url.is_none(),
    };

    // Warm-up (untimed): connections, the SDK's connection pool, table metadata.
    let warm = bench.batch(32);
    drive(&bench.target, Arc::new(warm), 8, bench.deadline, "warm-up").await;

    let mut rows = Vec::new();
    for traffic in [Traffic::New, Traffic::Dup50] {
        for &concurrency in &args.concurrency {
            rows.push(bench.cell(traffic, concurrency, args.requests).await);
        }
    }

    let report = Report {
        target: &label,
        version: env!("CARGO_PKG_VERSION"),
        requests_per_cell: args.requests,
        rows,
    };
    if args.json {
        return payhook::cli::print_json(&report);
    }
    print_table(&report);
    Ok(())
}

/// Refuses what cannot run before anything is sent (usage errors, exit code 2).
fn check_args(args: &BenchArgs, config: &Config) -> Result<(), CliError> {
    if config.providers().0.get(ProviderId::GENERIC).is_none() {
        return Err(CliError::Usage(
            "payhook-tools bench signs generic webhooks: set PAYHOOK_GENERIC_SECRETS".into(),
        ));
    }
    if args.requests == 0 || args.concurrency.iter().any(|c| *c == 0 || *c > 1_024) {
        return Err(CliError::Usage(
            "--requests must be positive and each --concurrency in 1..=1024".into(),
        ));
    }
    Ok(())
}

/// One bench run: where it sends, and the events it has made so far (every event of a run is
/// distinct, so a cell's "new" traffic is new to the store).
struct Bench {
    target: Arc<Target>,
    counter: RequestCounter,
    deadline: Duration,
    run: String,
    next: usize,
    /// In-process: the store's client is counted, so rows carry requests per delivery.
    count_requests: bool,
}

impl Bench {
    fn batch(&mut self, count: usize) -> Vec<Event> {
        let events = (self.next..self.next + count)
            .map(|i| payment(&self.run, i))
            .collect();
        self.next += count;
        events
    }

    /// Runs one cell (one traffic mix at one concurrency) and returns its row.
    async fn cell(&mut self, traffic: Traffic, concurrency: usize, requests: usize) -> Row {
        let events = match traffic {
            Traffic::New => self.batch(requests),
            Traffic::Dup50 => self.half_redelivered(concurrency, requests).await,
        };
        let label = format!("{} c={concurrency}", traffic.as_str());
        self.counter.reset();
        let (sent, elapsed) = drive(
            &self.target,
            Arc::new(events),
            concurrency,
            self.deadline,
            &label,
        )
        .await;
        let mut r = row(traffic, concurrency, &sent, elapsed);
        if self.count_requests && !sent.is_empty() {
            let per = self
                .counter
                .snapshot()
                .into_iter()
                .map(|(op, c)| (op, c as f64 / sent.len() as f64))
                .collect();
            r.requests_per_delivery = Some(per);
        }
        r
    }

    /// 50%-duplicate traffic: applies half first (untimed), then returns them again
    /// interleaved with as many new ones, each a provider's redelivery byte for byte.
    async fn half_redelivered(&mut self, concurrency: usize, requests: usize) -> Vec<Event> {
        let half = requests / 2;
        let seeded = self.batch(half);
        let label = format!("seed c={concurrency}");
        let seed = Arc::new(seeded.clone());
        drive(&self.target, seed, concurrency, self.deadline, &label).await;
        let fresh = self.batch(requests - half);
        let mut mixed = Vec::with_capacity(requests);
        for (i, e) in fresh.into_iter().enumerate() {
            mixed.push(e);
            if let Some(s) = seeded.get(i) {
                mixed.push(s.clone());
            }
        }
        mixed
    }
}

fn print_table(report: &Report<'_>) {
    println!(
        "payhook-tools bench against {} ({} deliveries per cell)",
        report.target, report.requests_per_cell
    );
    let h = [
        "traffic",
        "conc",
        "sent",
        "p50 ms",
        "p99 ms",
        "max ms",
        "deliv/s",
        "replayed",
        "statuses",
        "DynamoDB requests/delivery",
    ];
    println!(
        "{:<8} {:>4} {:>6} {:>9} {:>9} {:>9} {:>10} {:>9}  {:<20} {}",
        h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]
    );
    for r in &report.rows {
        let statuses = r
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}:{n}"))
            .collect::<Vec<_>>()
            .join(" ");
        let requests = r.requests_per_delivery.as_ref().map_or_else(
            || "-".to_owned(),
            |m| {
                m.iter()
                    .map(|(op, v)| format!("{op} {v:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        );
        println!(
            "{:<8} {:>4} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>10.0} {:>9}  {:<20} {}",
            r.traffic.as_str(),
            r.concurrency,
            r.deliveries,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.per_s,
            r.replayed,
            statuses,
            requests
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_accepted() {
        assert_eq!(
            loopback("http://127.0.0.1:3000/").unwrap(),
            "http://127.0.0.1:3000/webhooks/generic"
        );
        assert!(loopback("http://localhost:3000").is_ok());
        assert!(loopback("http://[::1]:3000").is_ok());
        assert!(loopback("http://10.0.0.1:3000").is_err());
        assert!(loopback("https://127.0.0.1:3000").is_err());
        assert!(loopback("http://example.com").is_err());
    }

    #[test]
    fn events_are_distinct_generic_payments() {
        let (a, b) = (payment("r", 7), payment("r", 8));
        let v: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
        assert_eq!(v["id"], "evt_r_7");
        assert_eq!(v["type"], "payment.succeeded");
        assert_eq!(v["data"]["reference"], "bench_r_7");
        assert_ne!(a.body, b.body);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 50.0), 50.0);
        assert_eq!(percentile(&d, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
