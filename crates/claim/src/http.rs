//! The HTTP door: the `Idempotency-Key` request header (the IETF HTTPAPI draft "The
//! Idempotency-Key HTTP Header Field") as a tower layer over `http::Request<B>` →
//! `http::Response<B>` services, so an axum `Router` (or one route of it), a `lambda_http`
//! service and a hyper service are guarded alike. The first request with a key runs the
//! service; its final answer (status, the headers marked replayable, the body byte for byte) is
//! stored and every retry with the same key and the same request gets it back.
//!
//! ```no_run
//! # async fn demo(client: aws_sdk_dynamodb::Client) {
//! use axum::routing::post;
//! use dynamo_claim::http::IdempotencyKeyLayer;
//! use dynamo_claim::ClaimTable;
//!
//! // The caller a key belongs to: the authenticated account (here a header set by an
//! // authorizer in front), never the raw credential.
//! let once = IdempotencyKeyLayer::new(ClaimTable::new(&client, "claims"), |parts| {
//!     parts.headers.get("x-tenant").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
//! });
//! let app: axum::Router = axum::Router::new()
//!     .route("/charges", post(|body: String| async move { body }).layer(once));
//! # let _ = app;
//! # }
//! ```
//!
//! # Layout
//!
//! - [`IdempotencyKeyLayer`]: what the door asks and keeps (the key's header, the caller's scope,
//!   the fingerprint, what is stored and replayed, the body limit), and the layer itself.
//! - [`IdempotentHttp`]: the service it makes. Its response body is [`ReplayBody`]: the
//!   service's own body when it passes a request through, the buffered one otherwise.
//! - [`NothingHappened`]: the response extension a handler sets to say it did nothing, so its
//!   claim is released rather than kept.
//! - [`default_storable`]: which statuses are final answers, stored and replayed.
//!
//! The claim itself is [`crate::Idempotency`]'s (its store, lease, prefix, kill switch and
//! cache): this module turns requests into keys and fingerprints, and responses into stored
//! answers, and nothing else.
//!
//! # What a request gets
//!
//! | the key's claim                                   | the answer                                                      |
//! |---------------------------------------------------|-----------------------------------------------------------------|
//! | new (or taken over after its lease)               | the service's own response (the request carries an [`Attempt`] extension, as every request passed on does) |
//! | done, same request                                | the stored status, replayable headers and body, `Idempotent-Replayed: true` |
//! | done, answer too large to store (over 400 KB)     | the stored status, empty body, `Idempotent-Replayed: true`, `Idempotency-Answer: not-recorded`: nothing reruns |
//! | held by a live lease                              | `409 Conflict`, `Retry-After` (seconds left on the lease)       |
//! | done or held for another request (method, path or body) | `422 Unprocessable Content`                               |
//! | no key, on a route that requires one (the default) | `400 Bad Request` (or passed through: [`IdempotencyKeyLayer::require_key`]) |
//! | a key that is empty or given twice                | `400 Bad Request`                                               |
//! | a body over [`IdempotencyKeyLayer::max_body_bytes`] | `413 Content Too Large`, nothing claimed                      |
//! | the store unavailable (throttled, a timeout)      | `503 Service Unavailable`, `Retry-After: 1`                     |
//! | the store refusing (no table, no access, invalid) | `500 Internal Server Error`                                     |
//! | `GET`, `HEAD`, `OPTIONS`, `TRACE`; the kill switch on | passed through, nothing claimed                             |
//!
//! Every answer of the door's own is `application/problem+json` (RFC 9457), as the draft's
//! examples are.
//!
//! # What is stored
//!
//! Only final answers: by [`default_storable`], 2xx and 4xx other than 408, 409, 425 and 429
//! (those say "try again", so a retry must run). A response that is not stored (a 5xx, a 408,
//! a service error) leaves the claim as [`Failed::Unknown`] does: kept until its lease runs
//! out, so no retry runs the effect while it may have happened; then a retry takes over with
//! [`Attempt::took_over`]. A handler that knows it did nothing inserts [`NothingHappened`] in
//! its response's extensions: the claim is released ([`Failed::Before`]) and a retry runs
//! afresh, whatever the status (a refused validation frees the key for a corrected request).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use ::http::request::Parts;
use ::http::{Method, Request, Response, StatusCode};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use serde::{Deserialize, Serialize};
use tower_layer::Layer;
use tower_service::Service;

use crate::idempotent::{canonical, Attempt, Deadline, Error, Failed, Idempotency, Stored};
use crate::protocol::{Fingerprint, StoredResponse};
use crate::store::Store;
use crate::ClaimTable;

/// The request header the key is read from by default (`Idempotency-Key`).
pub const KEY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");
/// Set to `true` on every replayed answer, so a client (and its logs) can tell a replay from a
/// fresh run.
pub const REPLAYED_HEADER: HeaderName = HeaderName::from_static("idempotent-replayed");
/// Set to `not-recorded` on a replay whose answer was too large to store: the effect happened
/// once, its status is the stored one, its body is gone.
pub const ANSWER_HEADER: HeaderName = HeaderName::from_static("idempotency-answer");
/// The body limit by default: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Errors any body may give, as `http-body-util` boxes them.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The response body of [`IdempotentHttp`]: a buffered body (a run, a replay, the door's own
/// answers) or the service's own, untouched, for a request the door lets through.
pub type ReplayBody<B> = Either<Full<Bytes>, B>;

/// Inserted by a handler into its response's extensions to say that it did nothing (refused
/// before any effect): its claim is released and a retry with the same key runs afresh. Without
/// it, an answer that is not stored keeps its claim until the lease runs out.
///
/// ```
/// use dynamo_claim::http::NothingHappened;
///
/// let mut refused = http::Response::new("the card was declined before any call".to_owned());
/// *refused.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
/// refused.extensions_mut().insert(NothingHappened);
/// assert!(refused.extensions().get::<NothingHappened>().is_some());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NothingHappened;

/// Whether an answer with `status` is final, so it is stored and replayed: 2xx, and 4xx other
/// than 408 (timeout), 409 (conflict), 425 (too early) and 429 (too many requests), which ask
/// for a retry that must really run.
///
/// ```
/// use dynamo_claim::http::default_storable;
/// use http::StatusCode;
///
/// assert!(default_storable(StatusCode::CREATED) && default_storable(StatusCode::NOT_FOUND));
/// assert!(!default_storable(StatusCode::TOO_MANY_REQUESTS));
/// assert!(!default_storable(StatusCode::BAD_GATEWAY) && !default_storable(StatusCode::FOUND));
/// ```
pub fn default_storable(status: StatusCode) -> bool {
    status.is_success()
        || (status.is_client_error() && !matches!(status.as_u16(), 408 | 409 | 425 | 429))
}

type ScopeFn = dyn Fn(&Parts) -> String + Send + Sync;
type FingerprintFn = dyn Fn(&Parts, &[u8]) -> Vec<u8> + Send + Sync;
type StorableFn = dyn Fn(StatusCode) -> bool + Send + Sync;
type ReplayFn = dyn Fn(&mut Response<Bytes>) + Send + Sync;

/// What the door asks of a request and keeps of its answer. Cheap to clone; built once.
struct Door<S> {
    once: Idempotency<(), S>,
    scope: Arc<ScopeFn>,
    key_header: HeaderName,
    require_key: bool,
    fingerprint: Arc<FingerprintFn>,
    replay_headers: Vec<HeaderName>,
    storable: Arc<StorableFn>,
    max_body_bytes: usize,
    on_replay: Option<Arc<ReplayFn>>,
}

impl<S: Clone> Clone for Door<S> {
    fn clone(&self) -> Self {
        Door {
            once: self.once.clone(),
            scope: Arc::clone(&self.scope),
            key_header: self.key_header.clone(),
            require_key: self.require_key,
            fingerprint: Arc::clone(&self.fingerprint),
            replay_headers: self.replay_headers.clone(),
            storable: Arc::clone(&self.storable),
            max_body_bytes: self.max_body_bytes,
            on_replay: self.on_replay.clone(),
        }
    }
}

/// The method and the path with its query, one line: what every fingerprint starts from.
fn request_line(parts: &Parts) -> Vec<u8> {
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| parts.uri.path(), |p| p.as_str());
    format!("{} {path}\n", parts.method).into_bytes()
}

/// The default fingerprint: method, path (with its query) and the body's bytes.
fn whole_request(parts: &Parts, body: &[u8]) -> Vec<u8> {
    let mut out = request_line(parts);
    out.extend_from_slice(body);
    out
}

/// A tower layer that makes each request with an `Idempotency-Key` run its service at most
/// once per caller and key, in claims kept in `S` (a DynamoDB [`ClaimTable`] by default;
/// [`crate::MemoryStore`] in a user's unit tests).
///
/// Defaults: the key from `Idempotency-Key` ([`KEY_HEADER`]), required; the fingerprint over
/// method, path (with its query) and body; `content-type` replayed; answers stored by
/// [`default_storable`]; bodies up to 1 MiB; a 60 s lease (the invocation's deadline under
/// `lambda_http`, with the `lambda` feature); the function's name as the prefix inside Lambda.
pub struct IdempotencyKeyLayer<S = ClaimTable> {
    door: Door<S>,
}

impl<S: Clone> Clone for IdempotencyKeyLayer<S> {
    fn clone(&self) -> Self {
        IdempotencyKeyLayer {
            door: self.door.clone(),
        }
    }
}

impl<S: Store> IdempotencyKeyLayer<S> {
    /// The door over claims in `store`, each key scoped by `scope`: who the caller is (a
    /// tenant, the owner of an API key, an authorizer's principal), so two callers' equal keys
    /// never meet. Name the caller, never the credential itself: the scope is stored only as
    /// its SHA-256, but a credential has no business in a key. An empty scope is one scope
    /// shared by every caller that has none.
    ///
    /// The stored key is `{prefix}idem#{sha256(scope) in hex}#{key}`.
    ///
    /// ```
    /// use dynamo_claim::http::{IdempotencyKeyLayer, REPLAYED_HEADER};
    /// use dynamo_claim::MemoryStore;
    /// use http_body_util::{BodyExt, Full};
    /// use tower::{Layer, ServiceExt};
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    /// # rt.block_on(async {
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_req| "tenant-1".to_owned());
    /// let charges = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    /// let service = door.layer(tower::service_fn({
    ///     let charges = charges.clone();
    ///     move |_req: http::Request<Full<bytes::Bytes>>| {
    ///         let n = charges.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    ///         async move { Ok::<_, std::convert::Infallible>(http::Response::new(Full::from(format!("ch_{n}")))) }
    ///     }
    /// }));
    /// let post = || {
    ///     http::Request::post("/charges")
    ///         .header("idempotency-key", "k1")
    ///         .body(Full::from("{\"amount_minor\":500}"))
    ///         .unwrap()
    /// };
    /// let first = service.clone().oneshot(post()).await.unwrap();
    /// let again = service.clone().oneshot(post()).await.unwrap();
    /// assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    /// let (a, b) = (first.collect().await.unwrap().to_bytes(), again.collect().await.unwrap().to_bytes());
    /// assert_eq!((a, b), ("ch_1".into(), "ch_1".into()));
    /// assert_eq!(charges.load(std::sync::atomic::Ordering::SeqCst), 1);
    /// # });
    /// ```
    pub fn new(store: S, scope: impl Fn(&Parts) -> String + Send + Sync + 'static) -> Self {
        IdempotencyKeyLayer {
            door: Door {
                once: Idempotency::new(store, |_: &()| None),
                scope: Arc::new(scope),
                key_header: KEY_HEADER,
                require_key: true,
                fingerprint: Arc::new(whole_request),
                replay_headers: vec![CONTENT_TYPE],
                storable: Arc::new(default_storable),
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                on_replay: None,
            },
        }
    }

    /// Reads the key from `header` instead of `Idempotency-Key`.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .key_header(http::HeaderName::from_static("x-request-key"));
    /// # let _ = door;
    /// ```
    pub fn key_header(mut self, header: HeaderName) -> Self {
        self.door.key_header = header;
        self
    }

    /// Whether a request without a key is refused with 400 (`true`, the default: nothing runs
    /// unguarded on a route that moves money) or passed through to the service unguarded.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let optional = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).require_key(false);
    /// # let _ = optional;
    /// ```
    pub fn require_key(mut self, required: bool) -> Self {
        self.door.require_key = required;
        self
    }

    /// What a retry must repeat to be a retry: `part(parts, body)`'s bytes (hashed with
    /// SHA-256). The same key with other bytes is answered 422. By default the method, the
    /// path with its query, and the body.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// // Only the body: the same charge posted to /v1 and /v2 is one request.
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .fingerprint(|_parts, body| body.to_vec());
    /// # let _ = door;
    /// ```
    pub fn fingerprint(
        mut self,
        part: impl Fn(&Parts, &[u8]) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.door.fingerprint = Arc::new(part);
        self
    }

    /// The fingerprint over the body alone.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).fingerprint_body();
    /// # let _ = door;
    /// ```
    pub fn fingerprint_body(self) -> Self {
        self.fingerprint(|_, body| body.to_vec())
    }

    /// The fingerprint over the method, the path with its query, and the values at the JSON
    /// pointers `pointers` of a JSON body (`"/amount_minor"`, `"/currency"`; a missing one as
    /// `null`), compared as canonical JSON (keys sorted), so what differs between honest
    /// retries (a client timestamp, a trace id) is not a conflict. A body that is not JSON is
    /// compared whole.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .fingerprint_json(&["/amount_minor", "/currency"]);
    /// # let _ = door;
    /// ```
    pub fn fingerprint_json(self, pointers: &[&str]) -> Self {
        let pointers: Vec<String> = pointers.iter().map(|p| (*p).to_owned()).collect();
        self.fingerprint(move |parts, body| {
            let mut out = request_line(parts);
            match serde_json::from_slice::<serde_json::Value>(body) {
                Ok(value) => {
                    let picked: Vec<serde_json::Value> = pointers
                        .iter()
                        .map(|p| canonical(value.pointer(p).cloned().unwrap_or_default()))
                        .collect();
                    out.extend_from_slice(b"json:");
                    out.extend(serde_json::to_vec(&picked).unwrap_or_default());
                }
                Err(_) => {
                    out.extend_from_slice(b"raw:");
                    out.extend_from_slice(body);
                }
            }
            out
        })
    }

    /// The response headers stored with an answer and replayed (`content-type` by default):
    /// the rest (dates, trace ids, cookies) belong to the first response only.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// use http::header::{CONTENT_TYPE, LOCATION};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .replay_headers([CONTENT_TYPE, LOCATION]);
    /// # let _ = door;
    /// ```
    pub fn replay_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.door.replay_headers = headers.into_iter().collect();
        self
    }

    /// Which answers are final, so stored and replayed ([`default_storable`] by default). An
    /// answer that is not stored keeps its claim until the lease runs out, unless the handler
    /// said [`NothingHappened`].
    ///
    /// ```
    /// # use dynamo_claim::{http::{default_storable, IdempotencyKeyLayer}, MemoryStore};
    /// // A 303 See Other after a POST is final here too.
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .storable(|s| default_storable(s) || s == http::StatusCode::SEE_OTHER);
    /// # let _ = door;
    /// ```
    pub fn storable(
        mut self,
        storable: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.door.storable = Arc::new(storable);
        self
    }

    /// The largest request body read (1 MiB by default): a longer one is answered 413 before
    /// anything is claimed. The body is read whole, as the fingerprint needs it.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).max_body_bytes(64 * 1024);
    /// # let _ = door;
    /// ```
    pub fn max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.door.max_body_bytes = max_body_bytes;
        self
    }

    /// How long a claim holds its key when the request carries no deadline (60 s by default;
    /// see [`Idempotency::lease_ms`]): it must outlast the handler. A duplicate meanwhile is
    /// answered 409 with the time left.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).lease_ms(10_000);
    /// # let _ = door;
    /// ```
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.door.once = self.door.once.lease_ms(lease_ms);
        self
    }

    /// Prefixes every stored key (see [`Idempotency::prefix`]: the function's name inside
    /// Lambda by default), so two services sharing a table never share a key.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).prefix("charges");
    /// # let _ = door;
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.door.once = self.door.once.prefix(prefix);
        self
    }

    /// Turns the door off (every request passed through, nothing claimed) or back on, whatever
    /// [`crate::DISABLED_VAR`] says.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let local = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).disabled(true);
    /// # let _ = local;
    /// ```
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.door.once = self.door.once.disabled(disabled);
        self
    }

    /// Keeps the last `max_items` finished answers in this process (see
    /// [`Idempotency::local_cache`]).
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new()).local_cache(256);
    /// # let _ = door;
    /// ```
    pub fn local_cache(mut self, max_items: usize) -> Self {
        self.door.once = self.door.once.local_cache(max_items);
        self
    }

    /// Changes every replayed response (status, headers, body) before it is sent: to drop
    /// what only the first caller may see, say. The stored answer is not changed.
    ///
    /// ```
    /// # use dynamo_claim::{http::IdempotencyKeyLayer, MemoryStore};
    /// let door = IdempotencyKeyLayer::new(MemoryStore::new(), |_| String::new())
    ///     .on_replay(|res| { res.headers_mut().insert("x-replayed-by", http::HeaderValue::from_static("edge")); });
    /// # let _ = door;
    /// ```
    pub fn on_replay(
        mut self,
        hook: impl Fn(&mut Response<Bytes>) + Send + Sync + 'static,
    ) -> Self {
        self.door.on_replay = Some(Arc::new(hook));
        self
    }
}

impl<Svc, S: Clone> Layer<Svc> for IdempotencyKeyLayer<S> {
    type Service = IdempotentHttp<Svc, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        IdempotentHttp {
            inner,
            door: Arc::new(self.door.clone()),
        }
    }
}

/// The service [`IdempotencyKeyLayer`] makes. Its errors are the wrapped service's own (an
/// axum route's are `Infallible`): every answer of the door's is a response.
pub struct IdempotentHttp<Svc, S = ClaimTable> {
    inner: Svc,
    door: Arc<Door<S>>,
}

impl<Svc: Clone, S> Clone for IdempotentHttp<Svc, S> {
    fn clone(&self) -> Self {
        IdempotentHttp {
            inner: self.inner.clone(),
            door: Arc::clone(&self.door),
        }
    }
}

/// What passes through to the caller unstored: a response that is not a final answer, or the
/// service's error.
enum Passed<E> {
    /// Boxed: the error side of every result on the way is this large otherwise.
    Response(Box<Response<Bytes>>),
    Error(E),
}

/// The stored form of a response's replayable part: its marked headers and its body (UTF-8 as
/// text, anything else in base64), as the claim's JSON answer.
#[derive(Serialize, Deserialize)]
struct Envelope {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

impl Envelope {
    fn of(res: &Response<Bytes>, replayable: &[HeaderName]) -> Self {
        let mut headers = Vec::new();
        for name in replayable {
            for value in res.headers().get_all(name) {
                match std::str::from_utf8(value.as_bytes()) {
                    Ok(v) => headers.push((name.as_str().to_owned(), v.to_owned())),
                    Err(_) => {
                        tracing::warn!(header = %name, "a header that is not UTF-8 is not replayed")
                    }
                }
            }
        }
        let (body, body_base64) = match std::str::from_utf8(res.body()) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(res.body())),
            ),
        };
        Envelope {
            headers,
            body,
            body_base64,
        }
    }

    /// The stored answer as a response, or why it cannot be one (not written by this door).
    fn replay(stored: &StoredResponse) -> Result<Response<Bytes>, String> {
        let envelope: Envelope = serde_json::from_str(&stored.body).map_err(|e| e.to_string())?;
        let body = match (envelope.body, envelope.body_base64) {
            (Some(text), _) => Bytes::from(text),
            (None, Some(b64)) => Bytes::from(
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| e.to_string())?,
            ),
            (None, None) => Bytes::new(),
        };
        let mut res = Response::new(body);
        *res.status_mut() = StatusCode::from_u16(stored.status).map_err(|e| e.to_string())?;
        for (name, value) in envelope.headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_bytes(value.as_bytes()).map_err(|e| e.to_string())?;
            res.headers_mut().append(name, value);
        }
        Ok(res)
    }
}

/// One of the door's own answers: a problem document (RFC 9457).
fn problem(status: StatusCode, title: &str, detail: &str) -> Response<Bytes> {
    let doc = serde_json::json!({"title": title, "status": status.as_u16(), "detail": detail});
    let mut res = Response::new(Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()));
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    res
}

fn retry_after(mut res: Response<Bytes>, seconds: u64) -> Response<Bytes> {
    res.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(seconds.max(1)));
    res
}

/// The key as the client sent it: the draft's structured-field string (`"8e03978e-…"`) or the
/// bare token most clients send. `Ok(None)`: no key; `Err`: a key that names nothing (empty,
/// given twice, not text).
fn key_of(headers: &::http::HeaderMap, name: &HeaderName) -> Result<Option<String>, &'static str> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("the Idempotency-Key header is given more than once");
    }
    let text = value
        .to_str()
        .map_err(|_| "the Idempotency-Key header is not text")?
        .trim();
    let key = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\\\"", "\"").replace("\\\\", "\\"),
        None => text.to_owned(),
    };
    if key.is_empty() {
        return Err("the Idempotency-Key header is empty");
    }
    Ok(Some(key))
}

/// The request's body, whole, or the answer to give instead (413 over `max_bytes`, 400 for a
/// body that could not be read).
async fn read_body<B>(
    headers: &::http::HeaderMap,
    body: B,
    max_bytes: usize,
) -> Result<Bytes, Response<Bytes>>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    let too_large = || {
        problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request body too large",
            &format!("An idempotent request's body is read whole, up to {max_bytes} bytes."),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > u64::try_from(max_bytes).unwrap_or(u64::MAX)) {
        return Err(too_large());
    }
    match Limited::new(body, max_bytes).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Err(e) => {
            tracing::debug!(error = %e, "the request body could not be read");
            Err(problem(
                StatusCode::BAD_REQUEST,
                "Request body unreadable",
                "The request's body ended before it was read whole.",
            ))
        }
    }
}

/// The invocation's deadline under `lambda_http` (its context in the request's extensions),
/// so the claim's lease ends with the invocation.
#[cfg(feature = "lambda")]
fn deadline_of(parts: &Parts) -> Option<Deadline> {
    parts
        .extensions
        .get::<lambda_runtime::Context>()
        .and_then(Deadline::of)
}

#[cfg(not(feature = "lambda"))]
fn deadline_of(_parts: &Parts) -> Option<Deadline> {
    None
}

/// The stored key: the prefix, the caller's scope as a digest (never the scope's text, so no
/// credential is ever stored), and the client's key.
fn stored_key(prefix: &str, scope: &str, key: &str) -> String {
    use sha2::Digest;
    let scope = hex::encode(sha2::Sha256::digest(scope.as_bytes()));
    format!("{prefix}idem#{scope}#{key}")
}

impl<Svc, S, B, ResBody> Service<Request<B>> for IdempotentHttp<Svc, S>
where
    Svc: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    Svc::Future: Send,
    Svc::Error: Send,
    S: Store,
    B: http_body::Body + From<Vec<u8>> + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<ReplayBody<ResBody>>;
    type Error = Svc::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The ready service answers this call; a fresh clone waits for the next (tower's rule).
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let door = Arc::clone(&self.door);
        Box::pin(async move {
            let safe = matches!(
                *req.method(),
                Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
            );
            // Passed through unguarded, the request still says what its attempt is: fresh.
            let mut req = req;
            if safe || door.once.is_disabled() {
                req.extensions_mut().insert(Attempt { took_over: false });
                return Ok(inner.call(req).await?.map(Either::Right));
            }
            let key = match key_of(req.headers(), &door.key_header) {
                Ok(Some(key)) => key,
                Ok(None) if !door.require_key => {
                    req.extensions_mut().insert(Attempt { took_over: false });
                    return Ok(inner.call(req).await?.map(Either::Right));
                }
                Ok(None) => {
                    return Ok(buffered(problem(
                        StatusCode::BAD_REQUEST,
                        "Idempotency-Key is missing",
                        "This operation is idempotent and requires an Idempotency-Key header.",
                    )))
                }
                Err(why) => {
                    return Ok(buffered(problem(
                        StatusCode::BAD_REQUEST,
                        "Idempotency-Key is not valid",
                        why,
                    )))
                }
            };
            let (parts, body) = req.into_parts();
            let body = match read_body(&parts.headers, body, door.max_body_bytes).await {
                Ok(body) => body,
                Err(res) => return Ok(buffered(res)),
            };
            let key = stored_key(door.once.key_prefix(), &(door.scope)(&parts), &key);
            let fingerprint = Fingerprint::of_bytes(&(door.fingerprint)(&parts, &body));
            let deadline = deadline_of(&parts);
            let storable = Arc::clone(&door.storable);
            let handler = move |attempt: Attempt| async move {
                let mut parts = parts;
                parts.extensions.insert(attempt);
                let req = Request::from_parts(parts, B::from(Vec::from(body)));
                let res = inner
                    .call(req)
                    .await
                    .map_err(|e| Failed::Unknown(Passed::Error(e)))?;
                let (res_parts, res_body) = res.into_parts();
                let bytes = match res_body.collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(e) => {
                        // The handler ran and its answer broke off: what it did is unknown.
                        tracing::warn!(error = %e.into(), "the service's response body failed; the claim is kept");
                        return Err(Failed::Unknown(Passed::Response(Box::new(problem(
                            StatusCode::BAD_GATEWAY,
                            "The answer broke off",
                            "The service's response failed part way; retry with the same key after the Retry-After of a 409.",
                        )))));
                    }
                };
                let res = Response::from_parts(res_parts, bytes);
                if res.extensions().get::<NothingHappened>().is_some() {
                    Err(Failed::Before(Passed::Response(Box::new(res))))
                } else if storable(res.status()) {
                    Ok(res)
                } else {
                    Err(Failed::Unknown(Passed::Response(Box::new(res))))
                }
            };
            let stored_as = |res: &Response<Bytes>| {
                let envelope = Envelope::of(res, &door.replay_headers);
                Ok(StoredResponse {
                    status: res.status().as_u16(),
                    body: serde_json::to_string(&envelope).map_err(Error::Encode)?,
                })
            };
            let outcome = door
                .once
                .run_stored(key, fingerprint, deadline, handler, stored_as)
                .await;
            Ok(buffered(match outcome {
                Ok(Stored::Ran(res)) => res,
                Ok(Stored::Replayed(stored)) => match Envelope::replay(&stored) {
                    Ok(res) => door.replayed(res),
                    Err(why) => {
                        tracing::error!(%why, "a stored answer does not read as a response");
                        problem(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "Stored answer unreadable",
                            "The answer stored for this Idempotency-Key could not be read.",
                        )
                    }
                },
                Ok(Stored::Unrecorded { status }) => {
                    let mut res = Response::new(Bytes::new());
                    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
                    res.headers_mut()
                        .insert(ANSWER_HEADER, HeaderValue::from_static("not-recorded"));
                    door.replayed(res)
                }
                Ok(Stored::InProgress { retry_after_ms }) => retry_after(
                    problem(
                        StatusCode::CONFLICT,
                        "A request is outstanding for this Idempotency-Key",
                        "A request with the same Idempotency-Key is being processed; retry after Retry-After.",
                    ),
                    u64::try_from(retry_after_ms.saturating_add(999) / 1_000).unwrap_or(1),
                ),
                Ok(Stored::Conflict) => problem(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Idempotency-Key is already used",
                    "This Idempotency-Key was used for another request; it must not be reused for another payload.",
                ),
                Err(Error::Handler(Passed::Response(res))) => *res,
                Err(Error::Handler(Passed::Error(e))) => return Err(e),
                Err(Error::Store(e)) if e.is_retryable() => {
                    tracing::warn!(error = %e, "the claim store is unavailable");
                    retry_after(
                        problem(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "Idempotency store unavailable",
                            "The store of idempotency keys did not answer; retry with the same key.",
                        ),
                        1,
                    )
                }
                Err(Error::Store(e)) => {
                    tracing::error!(error = %e, "the claim store refused the request");
                    problem(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "Idempotency store refused",
                        "The store of idempotency keys refused the request.",
                    )
                }
                // The door encodes its own answers and the crate's core gives these only to
                // other entries: a 500 if ever.
                Err(Error::Encode(e) | Error::Decode(e)) => {
                    tracing::error!(error = %e, "an answer could not be stored");
                    problem(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "Answer not stored",
                        "The service's answer could not be stored.",
                    )
                }
                Err(Error::NoKey | Error::InProgress { .. } | Error::Conflict | Error::NotRecorded) => {
                    problem(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "Unexpected idempotency outcome",
                        "The idempotency layer met an outcome it does not answer.",
                    )
                }
            }))
        })
    }
}

impl<S> Door<S> {
    /// A replay as sent: marked, through the replay hook.
    fn replayed(&self, mut res: Response<Bytes>) -> Response<Bytes> {
        res.headers_mut()
            .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        if let Some(hook) = &self.on_replay {
            hook(&mut res);
        }
        res
    }
}

/// A buffered response as the service's response.
fn buffered<B>(res: Response<Bytes>) -> Response<ReplayBody<B>> {
    res.map(|b| Either::Left(Full::new(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    use ::http::HeaderMap;

    #[test]
    fn keys_are_read_quoted_or_bare_and_refused_empty_or_twice() {
        let mut h = HeaderMap::new();
        assert_eq!(key_of(&h, &KEY_HEADER), Ok(None));
        h.insert(&KEY_HEADER, HeaderValue::from_static("\"8e03-\\\"x\\\"\""));
        assert_eq!(key_of(&h, &KEY_HEADER), Ok(Some("8e03-\"x\"".into())));
        h.insert(&KEY_HEADER, HeaderValue::from_static(" k1 "));
        assert_eq!(key_of(&h, &KEY_HEADER), Ok(Some("k1".into())));
        h.insert(&KEY_HEADER, HeaderValue::from_static("\"\""));
        assert!(key_of(&h, &KEY_HEADER).is_err());
        h.insert(&KEY_HEADER, HeaderValue::from_static("a"));
        h.append(&KEY_HEADER, HeaderValue::from_static("b"));
        assert!(key_of(&h, &KEY_HEADER).is_err());
    }

    #[test]
    fn a_stored_answer_replays_byte_for_byte_text_or_binary() {
        for body in [
            Bytes::from_static(b"{\"a\":\"\xc3\xa9\"}"),
            Bytes::from_static(&[0, 159, 255, 10]),
        ] {
            let mut res = Response::new(body.clone());
            *res.status_mut() = StatusCode::CREATED;
            res.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            res.headers_mut()
                .insert("x-trace", HeaderValue::from_static("t1"));
            let stored = StoredResponse {
                status: 201,
                body: serde_json::to_string(&Envelope::of(&res, &[CONTENT_TYPE])).unwrap(),
            };
            let back = Envelope::replay(&stored).unwrap();
            assert_eq!(back.status(), StatusCode::CREATED);
            assert_eq!(back.body(), &body);
            assert_eq!(back.headers().len(), 1, "{:?}", back.headers());
            assert_eq!(back.headers()[CONTENT_TYPE], "application/json");
        }
    }

    #[test]
    fn scopes_are_stored_as_digests_and_never_meet() {
        let a = stored_key("p#", "sk_live_secret", "k");
        assert!(a.starts_with("p#idem#") && a.ends_with("#k") && !a.contains("secret"));
        assert_ne!(a, stored_key("p#", "tenant-b", "k"));
    }

    #[test]
    fn final_answers_are_2xx_and_4xx_that_ask_no_retry() {
        for (status, stored) in [
            (200, true),
            (201, true),
            (400, true),
            (404, true),
            (422, true),
            (408, false),
            (409, false),
            (425, false),
            (429, false),
            (500, false),
            (503, false),
            (302, false),
            (101, false),
        ] {
            assert_eq!(
                default_storable(StatusCode::from_u16(status).unwrap()),
                stored,
                "{status}"
            );
        }
    }
}
