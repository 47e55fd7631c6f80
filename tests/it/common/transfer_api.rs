//! A fake transfer API on loopback (the generic provider's documented contract) that behaves like
//! real providers do: it can hold a POST for a while (payhook may have given up by then), make a
//! transfer visible to `GET /transfers/{reference}` only once it has processed it and later
//! still, dedupe by reference or pay again for every POST, and refuse with a 4xx. It records
//! every call per reference, and any call that arrived while an earlier one for the same
//! reference was still running for payhook (not answered yet, inside payhook's bound).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use serde_json::{json, Value};

/// How the fake provider behaves.
#[derive(Debug, Clone, Copy)]
pub struct Behaviour {
    /// How long it holds a POST before answering.
    pub hold_ms: u64,
    /// The transfer exists for a lookup only once the POST is processed (after the hold).
    pub commits_after_answering: bool,
    /// After that, how much longer a lookup still misses it.
    pub lag_ms: u64,
    /// A POST under a reference it has returns that transfer; otherwise it pays again.
    pub dedupes: bool,
    /// Refuses every POST with this status (after the hold), making nothing.
    pub refuses: Option<u16>,
}

/// Answers at once, shows at once, dedupes, refuses nothing.
pub const PATIENT: Behaviour = Behaviour {
    hold_ms: 0,
    commits_after_answering: false,
    lag_ms: 0,
    dedupes: true,
    refuses: None,
};

pub struct Transfer {
    pub reference: String,
    pub amount: i64,
    pub status: &'static str,
    visible_at: Instant,
}

pub struct Fake {
    pub behaviour: Behaviour,
    pub transfers: Vec<Transfer>,
    /// Each call for a reference: when it arrived, when it answered, and whether a POST.
    calls: HashMap<String, Vec<(Instant, Option<Instant>, bool)>>,
    /// payhook's bound on one call: past it, payhook has given up on a call still held.
    bound: Duration,
    pub overlaps: Vec<String>,
}

pub type Shared = Arc<Mutex<Fake>>;

/// What the fake saw of one reference: POSTs, lookups, transfers made and the money in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub posts: usize,
    pub gets: usize,
    pub transfers: usize,
    pub sent_minor: i64,
}

impl Fake {
    fn arrive(&mut self, reference: &str, post: bool) -> usize {
        let now = Instant::now();
        let bound = self.bound;
        let calls = self.calls.entry(reference.to_owned()).or_default();
        let running = calls
            .iter()
            .filter(|(at, end, _)| now < end.unwrap_or(*at + bound).min(*at + bound))
            .count();
        calls.push((now, None, post));
        let index = calls.len() - 1;
        if running > 0 {
            self.overlaps
                .push(format!("{reference}: a call while {running} other(s) ran"));
        }
        index
    }

    fn answered(&mut self, reference: &str, index: usize) {
        if let Some(call) = self.calls.get_mut(reference).and_then(|c| c.get_mut(index)) {
            call.1 = Some(Instant::now());
        }
    }

    pub fn seen(&self, reference: &str) -> Seen {
        let calls = self.calls.get(reference).map(Vec::as_slice).unwrap_or(&[]);
        let made = self.transfers.iter().filter(|t| t.reference == reference);
        Seen {
            posts: calls.iter().filter(|c| c.2).count(),
            gets: calls.iter().filter(|c| !c.2).count(),
            transfers: made.clone().count(),
            sent_minor: made.map(|t| t.amount).sum(),
        }
    }

    pub fn total_posts(&self) -> usize {
        self.calls.values().flatten().filter(|c| c.2).count()
    }

    /// Money the provider holds paid out (or paying) under `reference`.
    pub fn out_minor(&self, reference: &str) -> i64 {
        self.transfers
            .iter()
            .filter(|t| t.reference == reference && t.status != "failed")
            .map(|t| t.amount)
            .sum()
    }

    /// Ends every pending transfer under `reference` as `status`; how the first of them ended,
    /// if there is one.
    pub fn settle(&mut self, reference: &str, status: &'static str) -> Option<&'static str> {
        let mut ended = None;
        for t in self
            .transfers
            .iter_mut()
            .filter(|t| t.reference == reference)
        {
            if t.status == "pending" {
                t.status = status;
            }
            ended = ended.or(Some(t.status));
        }
        ended
    }
}

async fn create(State(fake): State<Shared>, body: String) -> (axum::http::StatusCode, String) {
    let v: Value = serde_json::from_str(&body).unwrap();
    let reference = v["reference"].as_str().unwrap().to_owned();
    let (b, index, status) = {
        let mut f = fake.lock().unwrap();
        let index = f.arrive(&reference, true);
        let b = f.behaviour;
        let hold = Duration::from_millis(b.hold_ms);
        let status = match (
            b.refuses,
            f.transfers.iter().find(|t| t.reference == reference),
        ) {
            (Some(_), _) => "refused",
            (None, Some(t)) if b.dedupes => t.status,
            _ => {
                let processed = if b.commits_after_answering {
                    hold
                } else {
                    Duration::ZERO
                };
                f.transfers.push(Transfer {
                    reference: reference.clone(),
                    amount: v["amount"].as_i64().unwrap(),
                    status: "pending",
                    visible_at: Instant::now() + processed + Duration::from_millis(b.lag_ms),
                });
                "pending"
            }
        };
        (b, index, status)
    };
    tokio::time::sleep(Duration::from_millis(b.hold_ms)).await;
    fake.lock().unwrap().answered(&reference, index);
    match b.refuses {
        Some(code) => (
            axum::http::StatusCode::from_u16(code).unwrap(),
            json!({"message": "refused"}).to_string(),
        ),
        None => (
            axum::http::StatusCode::OK,
            json!({"reference": reference, "status": status}).to_string(),
        ),
    }
}

async fn lookup(
    State(fake): State<Shared>,
    Path(reference): Path<String>,
) -> (axum::http::StatusCode, String) {
    let mut f = fake.lock().unwrap();
    let index = f.arrive(&reference, false);
    f.answered(&reference, index);
    let now = Instant::now();
    match f
        .transfers
        .iter()
        .find(|t| t.reference == reference && t.visible_at <= now)
    {
        Some(t) => (
            axum::http::StatusCode::OK,
            json!({"reference": reference, "status": t.status}).to_string(),
        ),
        None => (axum::http::StatusCode::NOT_FOUND, "{}".into()),
    }
}

/// Starts the fake; payhook gives up on a call after `bound_ms`. Returns its URL.
pub async fn start(behaviour: Behaviour, bound_ms: u64) -> (String, Shared) {
    let fake: Shared = Arc::new(Mutex::new(Fake {
        behaviour,
        transfers: Vec::new(),
        calls: HashMap::new(),
        bound: Duration::from_millis(bound_ms),
        overlaps: Vec::new(),
    }));
    let app = axum::Router::new()
        .route("/transfers", axum::routing::post(create))
        .route("/transfers/{reference}", axum::routing::get(lookup))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), fake)
}
