//! The HTTP door (`dynamo_claim::http`) over a service that counts its runs (the charges a real
//! one would make), each behaviour on both stores: `MemoryStore` (what a user's unit tests
//! meet) and a DynamoDB claim table (dynalite, or `AWS_ENDPOINT_URL_DYNAMODB`). Every test
//! counts the runs and the claims kept.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dynamo_claim::http::{
    IdempotencyKeyLayer, IdempotentHttp, NothingHappened, ANSWER_HEADER, REPLAYED_HEADER,
};
use dynamo_claim::{Attempt, ClaimRecord, ClaimState, ClaimTable, MemoryStore, Store};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::util::BoxCloneSyncService;
use tower::{Layer, ServiceExt};

/// A store whose claims a test can count.
trait Kept: Store {
    fn kept(&self) -> impl Future<Output = Vec<ClaimRecord>> + Send;
}

impl Kept for MemoryStore {
    async fn kept(&self) -> Vec<ClaimRecord> {
        self.claims()
    }
}

impl Kept for ClaimTable {
    async fn kept(&self) -> Vec<ClaimRecord> {
        support::records(self.name()).await
    }
}

type Inner = BoxCloneSyncService<Request<Full<Bytes>>, Response<Full<Bytes>>, Infallible>;

/// The service under test and what it has done.
struct Rig<S> {
    service: IdempotentHttp<Inner, S>,
    store: S,
    /// Runs that reached the effect (after any gate).
    runs: Arc<AtomicUsize>,
    /// Runs that started (before the gate).
    entered: Arc<AtomicUsize>,
    /// Holds runs that ask to wait (`x-wait`) until the test adds a permit.
    gate: Arc<tokio::sync::Semaphore>,
}

/// A 600 KB answer: over DynamoDB's 400 KB item.
const BIG: usize = 600 * 1024;

/// The service: its answer is chosen by the request's `x-answer` (`201` by default, `binary`,
/// `big`, or a status, `-nothing` to add [`NothingHappened`]); `x-wait` holds it at the gate.
fn inner(
    runs: Arc<AtomicUsize>,
    entered: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
) -> Inner {
    BoxCloneSyncService::new(tower::service_fn(move |req: Request<Full<Bytes>>| {
        let (runs, entered, gate) = (runs.clone(), entered.clone(), gate.clone());
        async move {
            entered.fetch_add(1, Ordering::SeqCst);
            if req.headers().contains_key("x-wait") {
                gate.acquire().await.unwrap().forget();
            }
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let took_over = req.extensions().get::<Attempt>().map(|a| a.took_over);
            let answer = req
                .headers()
                .get("x-answer")
                .map_or("201", |v| v.to_str().unwrap())
                .to_owned();
            let body = req.into_body().collect().await.unwrap().to_bytes();
            let (status, nothing) = match answer.strip_suffix("-nothing") {
                Some(s) => (s.to_owned(), true),
                None => (answer.clone(), false),
            };
            let payload = match status.as_str() {
                "binary" => Bytes::from(vec![0xff, 0x00, 0x9f, u8::try_from(n).unwrap(), b'\n']),
                "big" => Bytes::from("x".repeat(BIG)),
                _ => Bytes::from(format!(
                    "{{\"charge\":\"ch_{n}\", \"note\":\"caf\u{e9} \u{1f4b8}\",\"request_bytes\":{}}}",
                    body.len()
                )),
            };
            let code = status.parse::<u16>().unwrap_or(201);
            let mut res = Response::new(Full::new(payload));
            *res.status_mut() = StatusCode::from_u16(code).unwrap();
            let h = res.headers_mut();
            h.insert(
                "content-type",
                "application/json; charset=utf-8".parse().unwrap(),
            );
            h.insert("x-run", n.to_string().parse().unwrap());
            h.insert("set-cookie", format!("s={n}").parse().unwrap());
            h.insert("x-took-over", format!("{took_over:?}").parse().unwrap());
            if nothing {
                res.extensions_mut().insert(NothingHappened);
            }
            Ok::<_, Infallible>(res)
        }
    }))
}

fn rig<S: Store>(
    store: S,
    configure: impl FnOnce(IdempotencyKeyLayer<S>) -> IdempotencyKeyLayer<S>,
) -> Rig<S> {
    let (runs, entered) = (Arc::default(), Arc::default());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let door = configure(IdempotencyKeyLayer::new(store.clone(), |parts| {
        parts
            .headers
            .get("x-tenant")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    }));
    Rig {
        service: door.layer(inner(
            Arc::clone(&runs),
            Arc::clone(&entered),
            Arc::clone(&gate),
        )),
        store,
        runs,
        entered,
        gate,
    }
}

/// What came back, body read whole.
#[derive(Debug, Clone)]
struct Got {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Got {
    fn replayed(&self) -> bool {
        self.headers
            .get(REPLAYED_HEADER)
            .is_some_and(|v| v == "true")
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

struct Req<'a> {
    method: &'a str,
    path: &'a str,
    key: Option<&'a str>,
    tenant: &'a str,
    answer: &'a str,
    body: &'a str,
    wait: bool,
}

const POST: Req<'static> = Req {
    method: "POST",
    path: "/charges",
    key: Some("k1"),
    tenant: "tenant-a",
    answer: "201",
    body: "{\"amount_minor\":500}",
    wait: false,
};

impl Req<'_> {
    fn build(&self) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(self.method)
            .uri(self.path)
            .header("x-tenant", self.tenant)
            .header("x-answer", self.answer);
        if let Some(k) = self.key {
            b = b.header("idempotency-key", k);
        }
        if self.wait {
            b = b.header("x-wait", "1");
        }
        b.body(Full::from(self.body.to_owned())).unwrap()
    }
}

impl<S: Kept> Rig<S> {
    async fn send(&self, req: &Req<'_>) -> Got {
        self.send_request(req.build()).await
    }

    async fn send_request(&self, req: Request<Full<Bytes>>) -> Got {
        let res = self.service.clone().oneshot(req).await.unwrap();
        let (parts, body) = res.into_parts();
        Got {
            status: parts.status,
            headers: parts.headers,
            body: body.collect().await.unwrap().to_bytes(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn kept(&self) -> Vec<ClaimRecord> {
        self.store.kept().await
    }

    /// The kept claims' states, done ones as their stored status.
    async fn states(&self) -> Vec<String> {
        let mut states: Vec<String> = self
            .kept()
            .await
            .into_iter()
            .map(|r| match r.state {
                ClaimState::InProgress { .. } => "in_progress".to_owned(),
                ClaimState::Done(s) => format!("done {}", s.status),
                ClaimState::DoneUnrecorded { status } => format!("unrecorded {status}"),
            })
            .collect();
        states.sort();
        states
    }
}

/// Polls `check` until it holds, for at most 60 s (a loaded machine is slow, never wrong).
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Both stores, each a fresh one.
async fn both(name: &str) -> (MemoryStore, ClaimTable) {
    (MemoryStore::new(), support::table(name).await)
}

async fn replays_byte_for_byte<S: Kept>(store: S) {
    let rig = rig(store, |d| d);
    let first = rig.send(&POST).await;
    let again = rig.send(&POST).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert!(!first.replayed());
    assert_eq!(first.header("x-run"), Some("1"));
    assert!(again.replayed(), "{:?}", again.headers);
    assert_eq!((again.status, &again.body), (first.status, &first.body));
    assert!(std::str::from_utf8(&again.body)
        .unwrap()
        .contains("caf\u{e9} \u{1f4b8}"));
    // Only the marked header (content-type) and the replay's own mark come back.
    let mut names: Vec<&str> = again.headers.keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["content-type", "idempotent-replayed"]);
    assert_eq!(
        again.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    // A body that is not UTF-8 comes back byte for byte too (stored in base64).
    let binary = Req {
        key: Some("k-bin"),
        answer: "binary",
        ..POST
    };
    let first_bin = rig.send(&binary).await;
    let again_bin = rig.send(&binary).await;
    assert!(again_bin.replayed());
    assert_eq!(again_bin.body, first_bin.body);
    assert_eq!(&again_bin.body[..], &[0xff, 0x00, 0x9f, 2, b'\n']);
    assert_eq!(rig.runs(), 2);
    assert_eq!(rig.states().await, ["done 201", "done 201"]);
}

#[tokio::test]
async fn a_replay_is_the_first_answer_byte_for_byte_with_only_the_marked_headers() {
    let (memory, table) = both("replay").await;
    replays_byte_for_byte(memory).await;
    replays_byte_for_byte(table).await;
}

async fn in_progress_is_409<S: Kept>(store: S) {
    let rig = Arc::new(rig(store, |d| d.lease_ms(60_000)));
    let held = Req { wait: true, ..POST };
    let first = tokio::spawn({
        let rig = Arc::clone(&rig);
        async move { rig.send(&held).await }
    });
    eventually("the first request holds the claim", || {
        rig.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let dup = rig.send(&POST).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert_eq!(dup.header("content-type"), Some("application/problem+json"));
    let retry_after: u64 = dup.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(rig.runs(), 0, "the duplicate ran nothing");
    assert_eq!(rig.states().await, ["in_progress"]);
    rig.gate.add_permits(1);
    let first = first.await.unwrap();
    assert_eq!(first.status, StatusCode::CREATED);
    let after = rig.send(&POST).await;
    assert!(after.replayed());
    assert_eq!(after.body, first.body);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.states().await, ["done 201"]);
}

#[tokio::test]
async fn a_duplicate_while_the_first_runs_is_409_with_retry_after() {
    let (memory, table) = both("inflight").await;
    in_progress_is_409(memory).await;
    in_progress_is_409(table).await;
}

async fn another_request_is_422<S: Kept>(store: S) {
    let rig = rig(store, |d| d);
    assert_eq!(rig.send(&POST).await.status, StatusCode::CREATED);
    for other in [
        Req {
            body: "{\"amount_minor\":501}",
            ..POST
        },
        Req {
            method: "PUT",
            ..POST
        },
        Req {
            path: "/charges/other",
            ..POST
        },
        Req {
            path: "/charges?currency=eur",
            ..POST
        },
    ] {
        let got = rig.send(&other).await;
        assert_eq!(
            got.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{} {}",
            other.method,
            other.path
        );
        assert!(!got.replayed());
        assert!(std::str::from_utf8(&got.body)
            .unwrap()
            .contains("already used"));
    }
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.states().await, ["done 201"]);
}

#[tokio::test]
async fn the_same_key_for_another_body_method_or_path_is_422() {
    let (memory, table) = both("conflict").await;
    another_request_is_422(memory).await;
    another_request_is_422(table).await;
}

async fn no_key<S: Kept>(store: S) {
    let strict = rig(store.clone(), |d| d);
    for key in [None, Some(""), Some("\"\"")] {
        let got = strict.send(&Req { key, ..POST }).await;
        assert_eq!(got.status, StatusCode::BAD_REQUEST, "{key:?}");
        assert_eq!(got.header("content-type"), Some("application/problem+json"));
    }
    assert_eq!(strict.runs(), 0);
    // Safe methods pass through unguarded, with or without a key.
    let got = strict
        .send(&Req {
            method: "GET",
            key: None,
            ..POST
        })
        .await;
    assert_eq!((got.status, strict.runs()), (StatusCode::CREATED, 1));
    // Where the key is optional, a request without one runs, every time, and keeps nothing.
    let optional = rig(store, |d| d.require_key(false));
    for _ in 0..2 {
        let got = optional.send(&Req { key: None, ..POST }).await;
        assert_eq!(got.status, StatusCode::CREATED);
        assert!(!got.replayed());
    }
    assert_eq!(optional.runs(), 2);
    assert!(optional.kept().await.is_empty());
}

#[tokio::test]
async fn no_key_is_400_or_passed_through_where_optional() {
    let (memory, table) = both("nokey").await;
    no_key(memory).await;
    no_key(table).await;
}

async fn scoped<S: Kept>(store: S) {
    let rig = rig(store, |d| d.prefix("svc"));
    let a = rig
        .send(&Req {
            tenant: "sk_live_tenant_a",
            ..POST
        })
        .await;
    let b = rig
        .send(&Req {
            tenant: "sk_live_tenant_b",
            ..POST
        })
        .await;
    assert!(!a.replayed() && !b.replayed());
    assert_ne!(a.body, b.body);
    let a_again = rig
        .send(&Req {
            tenant: "sk_live_tenant_a",
            ..POST
        })
        .await;
    assert!(a_again.replayed());
    assert_eq!(a_again.body, a.body);
    assert_eq!(rig.runs(), 2);
    let kept = rig.kept().await;
    assert_eq!(kept.len(), 2);
    for r in kept {
        assert!(
            r.key.starts_with("svc#idem#") && r.key.ends_with("#k1"),
            "{}",
            r.key
        );
        assert!(
            !r.key.contains("sk_live"),
            "the scope's text is stored: {}",
            r.key
        );
    }
}

#[tokio::test]
async fn one_key_from_two_tenants_is_two_charges() {
    let (memory, table) = both("scope").await;
    scoped(memory).await;
    scoped(table).await;
}

async fn server_errors<S: Kept>(store: S) {
    let rig = rig(store, |d| d.lease_ms(300));
    // A 500 that may have done something: not stored, the claim kept.
    let failed = rig
        .send(&Req {
            answer: "500",
            ..POST
        })
        .await;
    assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(!failed.replayed());
    assert_eq!(rig.states().await, ["in_progress"]);
    // A 500 that says nothing happened: released, so its retry runs afresh.
    let nothing = Req {
        key: Some("k-nothing"),
        answer: "500-nothing",
        ..POST
    };
    assert_eq!(
        rig.send(&nothing).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(rig.states().await, ["in_progress"]);
    assert_eq!(
        rig.send(&nothing).await.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(rig.runs(), 3);
    // The kept claim: a retry is 409 until its lease runs out, then takes over, told so.
    let start = Instant::now();
    let retried = loop {
        let got = rig.send(&POST).await;
        if got.status != StatusCode::CONFLICT {
            break got;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "never taken over"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(retried.status, StatusCode::CREATED);
    assert_eq!(retried.header("x-took-over"), Some("Some(true)"));
    assert_eq!(rig.runs(), 4);
    assert_eq!(rig.states().await, ["done 201"]);
}

#[tokio::test]
async fn a_5xx_is_not_stored_and_releases_its_claim_only_when_nothing_happened() {
    let (memory, table) = both("5xx").await;
    server_errors(memory).await;
    server_errors(table).await;
}

async fn retry_statuses<S: Kept>(store: S) {
    let rig = rig(store, |d| d.lease_ms(60_000));
    // 408 without the mark: not stored, claim kept, the retry is in progress.
    let timeout = Req {
        answer: "408",
        ..POST
    };
    assert_eq!(rig.send(&timeout).await.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(rig.send(&timeout).await.status, StatusCode::CONFLICT);
    // 429 with the mark: released, every retry runs (and is refused) again.
    let limited = Req {
        key: Some("k-429"),
        answer: "429-nothing",
        ..POST
    };
    for _ in 0..2 {
        let got = rig.send(&limited).await;
        assert_eq!(got.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(!got.replayed());
    }
    // A 404 is final: stored and replayed.
    let missing = Req {
        key: Some("k-404"),
        answer: "404",
        ..POST
    };
    assert_eq!(rig.send(&missing).await.status, StatusCode::NOT_FOUND);
    let again = rig.send(&missing).await;
    assert_eq!(
        (again.status, again.replayed()),
        (StatusCode::NOT_FOUND, true)
    );
    assert_eq!(rig.runs(), 4);
    assert_eq!(rig.states().await, ["done 404", "in_progress"]);
}

#[tokio::test]
async fn a_408_or_429_is_not_stored() {
    let (memory, table) = both("retry").await;
    retry_statuses(memory).await;
    retry_statuses(table).await;
}

async fn too_large<S: Kept>(store: S) {
    let rig = rig(store, |d| d.lease_ms(300));
    let big = Req {
        answer: "big",
        ..POST
    };
    let first = rig.send(&big).await;
    assert_eq!(first.status, StatusCode::CREATED);
    assert_eq!(first.body.len(), BIG);
    assert_eq!(rig.states().await, ["unrecorded 201"]);
    for round in 0..3 {
        if round == 2 {
            tokio::time::sleep(Duration::from_millis(900)).await; // past the lease
        }
        let again = rig.send(&big).await;
        assert_eq!(again.status, StatusCode::CREATED);
        assert!(again.replayed());
        assert_eq!(again.header(ANSWER_HEADER.as_str()), Some("not-recorded"));
        assert!(again.body.is_empty());
    }
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.states().await, ["unrecorded 201"]);
}

#[tokio::test]
async fn an_answer_too_large_to_store_runs_once_and_is_replayed_as_not_recorded() {
    let (memory, table) = both("big").await;
    too_large(memory).await;
    too_large(table).await;
}

async fn body_limit<S: Kept>(store: S) {
    let rig = rig(store, |d| d.max_body_bytes(1_024));
    let long = "x".repeat(1_025);
    // Declared too long, and too long without a declared length.
    let declared = Request::post("/charges")
        .header("idempotency-key", "k-long")
        .header("content-length", "1025")
        .body(Full::from(long.clone()))
        .unwrap();
    assert_eq!(
        rig.send_request(declared).await.status,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let got = rig
        .send(&Req {
            key: Some("k-long"),
            body: &long,
            ..POST
        })
        .await;
    assert_eq!(got.status, StatusCode::PAYLOAD_TOO_LARGE);
    let at_limit = "x".repeat(1_024);
    assert_eq!(
        rig.send(&Req {
            key: Some("k-1024"),
            body: &at_limit,
            ..POST
        })
        .await
        .status,
        StatusCode::CREATED
    );
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.states().await, ["done 201"]);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_claims_nothing() {
    let (memory, table) = both("413").await;
    body_limit(memory).await;
    body_limit(table).await;
}

async fn switches<S: Kept>(store: S) {
    let off = rig(store.clone(), |d| d.disabled(true));
    for _ in 0..2 {
        let got = off.send(&POST).await;
        assert_eq!(got.status, StatusCode::CREATED);
        assert!(!got.replayed());
    }
    assert_eq!(off.runs(), 2);
    assert!(off.kept().await.is_empty());
    let hooked = rig(store, |d| {
        d.on_replay(|res| {
            res.headers_mut().insert("x-hooked", "yes".parse().unwrap());
        })
    });
    let first = hooked.send(&POST).await;
    let again = hooked.send(&POST).await;
    assert_eq!(first.header("x-hooked"), None);
    assert_eq!(again.header("x-hooked"), Some("yes"));
    assert_eq!(again.body, first.body);
    assert_eq!(hooked.runs(), 1);
    assert_eq!(hooked.states().await, ["done 201"]);
}

#[tokio::test]
async fn the_kill_switch_passes_through_and_the_replay_hook_sees_replays_only() {
    let (memory, table) = both("switches").await;
    switches(memory).await;
    switches(table).await;
}

#[tokio::test]
async fn under_lambda_http_the_lease_follows_the_invocations_deadline() {
    let rig = Arc::new(rig(MemoryStore::new(), |d| d.lease_ms(600_000)));
    let mut context = lambda_runtime::Context::default();
    context.deadline = u64::try_from(dynamo_claim::local_now_ms() + 2_000).unwrap();
    let mut held = Req { wait: true, ..POST }.build();
    held.extensions_mut().insert(context);
    let first = tokio::spawn({
        let rig = Arc::clone(&rig);
        async move { rig.send_request(held).await }
    });
    eventually("the first request holds the claim", || {
        rig.entered.load(Ordering::SeqCst) == 1
    })
    .await;
    let dup = rig.send(&POST).await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    // 2 s left and the 5 s margin, not the 600 s lease.
    let retry_after: u64 = dup.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=7).contains(&retry_after), "{retry_after}");
    rig.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status, StatusCode::CREATED);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.states().await, ["done 201"]);
}

#[tokio::test]
async fn store_errors_are_503_when_retryable_and_500_when_refused() {
    // No such table: refused for good.
    let missing = ClaimTable::new(&support::client(), support::table_name("absent"));
    let refused = rig(missing, |d| d);
    let got = refused.send(&POST).await;
    assert_eq!(got.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(got.header("retry-after"), None);
    // Nobody listening: unavailable, retry.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let down = ClaimTable::new(&support::client_at(&format!("http://{addr}")), "claims");
    let unavailable = rig(down, |d| d);
    let got = unavailable.send(&POST).await;
    assert_eq!(got.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(got.header("retry-after"), Some("1"));
    assert_eq!(refused.runs() + unavailable.runs(), 0);
}

/// What `lambda_http::run` asks of a service: the door over a plain `lambda_http` handler
/// qualifies (this compiles only if it does).
fn runs_under_lambda_http<S>(service: S) -> S
where
    S: tower::Service<lambda_http::Request>,
    S::Response: lambda_http::IntoResponse,
    S::Error: std::fmt::Debug + Into<lambda_runtime::Diagnostic>,
{
    service
}

#[tokio::test]
async fn a_plain_lambda_http_handler_takes_the_door() {
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = lambda_http::service_fn({
        let runs = Arc::clone(&runs);
        move |req: lambda_http::Request| {
            let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                let echo = String::from_utf8(req.body().to_vec()).unwrap();
                Ok::<_, lambda_http::Error>(Response::new(lambda_http::Body::from(format!(
                    "ch_{n} {echo}"
                ))))
            }
        }
    });
    let store = MemoryStore::new();
    let door = IdempotencyKeyLayer::new(store.clone(), |_| "t".to_owned());
    let service = runs_under_lambda_http(door.layer(handler));
    let request = || {
        Request::post("/charges")
            .header("idempotency-key", "k1")
            .body(lambda_http::Body::from("{\"amount_minor\":5}"))
            .unwrap()
    };
    let first = service.clone().oneshot(request()).await.unwrap();
    let again = service.clone().oneshot(request()).await.unwrap();
    assert!(again.headers().contains_key(REPLAYED_HEADER));
    let first = first.into_body().collect().await.unwrap().to_bytes();
    let again = again.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(first, again);
    assert_eq!(&first[..], b"ch_1 {\"amount_minor\":5}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(store.claims().len(), 1);
}
