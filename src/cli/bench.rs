//! `payhook bench`: end-to-end load against a running payhook (`--url`, loopback only) or against
//! the router served in this process, at several concurrencies, for all-new and 50%-duplicate
//! traffic. Prints p50/p99 latency and deliveries per second as a table on stdout (or `--json`
//! to compare commits), a progress line on stderr. Bounded: `--requests` per cell and
//! `--max-seconds` per cell.
//!
//! In-process, the store's client is wrapped with a [`RequestCounter`], so the table also shows
//! DynamoDB requests per delivery. Nothing here is on the money path: it sends signed HTTP
//! requests like a provider would.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
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

use super::client::sign_headers;
use super::CliError;
use crate::config::Config;
use crate::domain::{now_ms, ProviderId};
use crate::store::dynamodb::observe::RequestCounter;
use crate::store::dynamodb::DynamoStore;

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
            ProviderId::Generic,
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

/// A progress line on stderr, redrawn in place on a terminal, one line per cell otherwise.
struct Progress {
    label: String,
    total: usize,
    tty: bool,
}

impl Progress {
    fn draw(&self, done: usize) {
        if !self.tty {
            return;
        }
        let width = 30;
        let filled = (done * width)
            .checked_div(self.total)
            .unwrap_or(width)
            .min(width);
        eprint!(
            "\r{:<14} [{}{}] {done}/{}",
            self.label,
            "#".repeat(filled),
            "-".repeat(width - filled),
            self.total
        );
        let _ = std::io::stderr().flush();
    }

    fn finish(&self, done: usize, elapsed: Duration) {
        self.draw(done);
        if self.tty {
            eprintln!(" {:.1}s", elapsed.as_secs_f64());
        } else {
            eprintln!(
                "{:<14} {done}/{} {:.1}s",
                self.label,
                self.total,
                elapsed.as_secs_f64()
            );
        }
    }
}

/// Sends `events` with `concurrency` workers; returns the replies and the wall time.
async fn drive(
    target: &Arc<Target>,
    events: Arc<Vec<Event>>,
    concurrency: usize,
    deadline: Duration,
    progress: &Progress,
) -> (Vec<Sent>, Duration) {
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (target, events, next, done) =
                (target.clone(), events.clone(), next.clone(), done.clone());
            tokio::spawn(async move {
                let mut sent = Vec::new();
                while started.elapsed() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(e) = events.get(i) else { break };
                    sent.push(target.send(e).await);
                    done.fetch_add(1, Ordering::Relaxed);
                }
                sent
            })
        })
        .collect();
    let all = futures::future::join_all(workers);
    tokio::pin!(all);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let results = loop {
        tokio::select! {
            r = &mut all => break r,
            _ = tick.tick() => progress.draw(done.load(Ordering::Relaxed)),
        }
    };
    let elapsed = started.elapsed();
    progress.finish(done.load(Ordering::Relaxed), elapsed);
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
    let mut app = super::build_app(config, counted);
    if let Some(app) = Arc::get_mut(&mut app) {
        app.metrics = crate::metrics::MetricsSink::Off;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let router = crate::http::router(app);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::error!(error = %e, "bench server stopped");
        }
    });
    Ok(format!("http://{addr}"))
}

pub async fn run(args: BenchArgs, config: Config, store: DynamoStore) -> Result<(), CliError> {
    if config.generic().is_none() {
        return Err(CliError::Usage(
            "payhook bench signs generic webhooks: set PAYHOOK_GENERIC_SECRETS".into(),
        ));
    }
    if args.requests == 0 || args.concurrency.iter().any(|c| *c == 0 || *c > 1_024) {
        return Err(CliError::Usage(
            "--requests must be positive and each --concurrency in 1..=1024".into(),
        ));
    }
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
    let run = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(8)
        .collect::<String>();
    let deadline = Duration::from_secs(args.max_seconds);
    let tty = std::io::stderr().is_terminal();
    let mut n = 0usize;
    let mut batch = |count: usize| -> Vec<Event> {
        let events = (n..n + count).map(|i| payment(&run, i)).collect();
        n += count;
        events
    };

    // Warm-up (untimed): connections, the SDK's connection pool, table metadata.
    let warm = Progress {
        label: "warm-up".into(),
        total: 32,
        tty,
    };
    drive(&target, Arc::new(batch(32)), 8, deadline, &warm).await;

    let mut rows = Vec::new();
    for traffic in [Traffic::New, Traffic::Dup50] {
        for &concurrency in &args.concurrency {
            let events = match traffic {
                Traffic::New => batch(args.requests),
                Traffic::Dup50 => {
                    // Apply half first (untimed), then send them again interleaved with new ones.
                    let half = args.requests / 2;
                    let seeded = batch(half);
                    let seed = Progress {
                        label: format!("seed c={concurrency}"),
                        total: half,
                        tty,
                    };
                    drive(
                        &target,
                        Arc::new(seeded.clone()),
                        concurrency,
                        deadline,
                        &seed,
                    )
                    .await;
                    let fresh = batch(args.requests - half);
                    let mut mixed = Vec::with_capacity(args.requests);
                    for (i, e) in fresh.into_iter().enumerate() {
                        mixed.push(e);
                        if let Some(s) = seeded.get(i) {
                            // A provider's redelivery: the same event, byte for byte.
                            mixed.push(s.clone());
                        }
                    }
                    mixed
                }
            };
            let progress = Progress {
                label: format!("{} c={concurrency}", traffic.as_str()),
                total: events.len(),
                tty,
            };
            counter.reset();
            let (sent, elapsed) =
                drive(&target, Arc::new(events), concurrency, deadline, &progress).await;
            let mut r = row(traffic, concurrency, &sent, elapsed);
            if args.url.is_none() && !sent.is_empty() {
                let per = counter
                    .snapshot()
                    .into_iter()
                    .map(|(op, c)| (op, c as f64 / sent.len() as f64))
                    .collect();
                r.requests_per_delivery = Some(per);
            }
            rows.push(r);
        }
    }

    let report = Report {
        target: &label,
        version: env!("CARGO_PKG_VERSION"),
        requests_per_cell: args.requests,
        rows,
    };
    if args.json {
        return super::print_json(&report);
    }
    print_table(&report);
    Ok(())
}

fn print_table(report: &Report<'_>) {
    println!(
        "payhook bench against {} ({} deliveries per cell)",
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
