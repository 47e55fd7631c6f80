//! The function-level entry: make one async function idempotent by a key taken from its event.
//!
//! ```text
//! event ──key──▶ claim ──Claimed──▶ handler ──Ok──────────▶ finalize DONE(value) ─▶ Ran(value)
//!                 │                          ├─Err(Before)──▶ release (owner-fenced) ─▶ Err
//!                 │                          └─Err(Unknown)─▶ keep the claim ─────────▶ Err
//!                 ├─Done, same payload ───────────────────────────────────────────────▶ Replayed(value)
//!                 ├─held by a live lease ─────────────────────────────────────────────▶ InProgress
//!                 └─same key, other payload (any path, ALL_OLD included) ─────────────▶ Conflict
//! ```

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cache::LocalCache;
use crate::clock::local_now_ms;
use crate::protocol::{ClaimOutcome, FinalizeOutcome, Fingerprint, StoredResponse};
use crate::store::Store;
use crate::{ClaimTable, StoreError};

/// What a call came to. Every outcome a duplicate can meet is a value, not an error: the
/// caller decides what "in progress" means for its trigger (409 + `Retry-After` over HTTP, a
/// batch item failure for SQS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer<R> {
    /// This attempt ran the handler; its value is stored for every duplicate.
    Ran(R),
    /// The stored value of the attempt that finished this key, replayed: the handler did not
    /// run now, or ran in an attempt whose lease had run out and a successor's value stands.
    Replayed(R),
    /// Another attempt holds the key under a live lease: retry after this long.
    InProgress {
        /// Until the holder's lease runs out.
        retry_after_ms: i64,
    },
    /// The key was used for another payload: never replayed, the handler did not run.
    Conflict,
    /// The handler ran for this key in an earlier attempt, but its value was too large to
    /// store (a DynamoDB item holds 400 KB): it is not run again, and its value cannot be
    /// given back. Over HTTP: the status, with a header saying the answer was not recorded.
    DoneUnrecorded,
}

impl<R> Answer<R> {
    /// The value, if the handler ran now or before.
    pub fn value(self) -> Option<R> {
        match self {
            Answer::Ran(r) | Answer::Replayed(r) => Some(r),
            Answer::InProgress { .. } | Answer::Conflict | Answer::DoneUnrecorded => None,
        }
    }
}

/// What [`Idempotency::run_stored`] came to: an [`Answer`] whose stored answer is not decoded
/// yet (each entry decodes its own: a value's JSON, an HTTP response).
#[derive(Debug)]
pub(crate) enum Stored<T> {
    /// This attempt ran the handler (its answer is stored, or finished as not recorded).
    Ran(T),
    /// The answer stored for the key.
    Replayed(StoredResponse),
    /// The handler ran before; its answer, with this status, was too large to keep.
    Unrecorded {
        /// The status the answer had (the HTTP door answers with it).
        #[cfg_attr(not(feature = "http"), allow(dead_code))]
        status: u16,
    },
    /// Another attempt holds the key under a live lease.
    InProgress {
        /// Until the holder's lease runs out.
        retry_after_ms: i64,
    },
    /// The key was used for another payload.
    Conflict,
}

/// How a handler failed, which decides what happens to its claim.
#[derive(Debug)]
pub enum Failed<X> {
    /// This attempt did nothing (a validation, a refusal before any effect): the claim is
    /// released, conditioned on our ownership, and a retry runs the handler afresh. After a
    /// takeover an earlier attempt may have done something, so the claim is kept and only its
    /// lease given up: the next attempt takes over at once, told so.
    Before(X),
    /// Something may have happened (a call that timed out, a crash half way). The claim stays
    /// IN_PROGRESS: no duplicate runs the handler until its lease runs out; then a retry takes
    /// over with [`Attempt::took_over`] set, and must find its own earlier effect by the key.
    Unknown(X),
}

/// What the handler is told about its attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// An earlier attempt held this key and its lease ran out: some of its effects may exist.
    pub took_over: bool,
}

/// Why a call gave no [`Answer`].
#[derive(Debug, thiserror::Error)]
pub enum Error<X> {
    /// The event has no key (the closure said `None`, or the path is missing or not a string
    /// or number). Nothing ran: an unguarded run is never the fallback.
    #[error("the event has no idempotency key")]
    NoKey,
    /// The claim table did not answer; nothing ran, or what ran is recoverable by the key.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The handler failed (its claim released or kept as [`Failed`] said).
    #[error("the handler failed: {0}")]
    Handler(X),
    /// The handler's value could not be stored as JSON. Its effect happened, so the claim is
    /// kept, never released.
    #[error("the handler's value could not be stored")]
    Encode(#[source] serde_json::Error),
    /// A stored value does not read as this handler's value type.
    #[error("the stored value does not read as the handler's type")]
    Decode(#[source] serde_json::Error),
    /// ([`crate::IdempotencyLayer`] only.) Another attempt holds the key under a live lease:
    /// an error, so an SQS trigger or an asynchronous invocation retries the duplicate rather
    /// than deleting it while the first attempt may still fail.
    #[error("the key is being processed by another attempt; retry after {retry_after_ms} ms")]
    InProgress {
        /// Until the holder's lease runs out.
        retry_after_ms: i64,
    },
    /// ([`crate::IdempotencyLayer`] only.) The key was used for another payload.
    #[error("the idempotency key was used for another payload")]
    Conflict,
    /// ([`crate::IdempotencyLayer`] only.) The handler ran for this key before, and its value
    /// was too large to store: it is not run again, and there is no value to return.
    #[error("the handler ran for this key before; its value was too large to store")]
    NotRecorded,
}

type KeyFn<E> = dyn Fn(&E) -> Option<String> + Send + Sync;
type PayloadFn<E> = dyn Fn(&E) -> Option<Fingerprint> + Send + Sync;
type ReplayFn = dyn Fn(&mut serde_json::Value) + Send + Sync;

/// The environment variable that turns idempotency off (`true` or `1`), as Powertools'
/// `POWERTOOLS_IDEMPOTENCY_DISABLED`: handlers run plainly, every call, and a warning says so
/// once per [`Idempotency`]. For local runs and tests, never for production.
pub const DISABLED_VAR: &str = "DYNAMO_CLAIM_DISABLED";

/// The separator between a key's prefix and the key itself.
pub const PREFIX_SEPARATOR: &str = "#";

/// Makes calls idempotent by a key taken from their event, with claims kept in `S` (a
/// DynamoDB [`ClaimTable`] by default; [`crate::MemoryStore`] in a user's unit tests).
pub struct Idempotency<E, S = ClaimTable> {
    table: S,
    key: Arc<KeyFn<E>>,
    payload: Arc<PayloadFn<E>>,
    prefix: String,
    lease_ms: i64,
    cache: Option<Arc<LocalCache>>,
    disabled: bool,
    on_replay: Option<Arc<ReplayFn>>,
}

impl<E, S: Clone> Clone for Idempotency<E, S> {
    fn clone(&self) -> Self {
        Idempotency {
            table: self.table.clone(),
            key: Arc::clone(&self.key),
            payload: Arc::clone(&self.payload),
            prefix: self.prefix.clone(),
            lease_ms: self.lease_ms,
            cache: self.cache.clone(),
            disabled: self.disabled,
            on_replay: self.on_replay.clone(),
        }
    }
}

/// The value at JSON pointer `pointer` (`/body/order_id`) of `event`, as key text: strings as
/// they are, numbers as written; anything else is no key.
fn pointed(event: &impl Serialize, pointer: &str) -> Option<String> {
    let value = serde_json::to_value(event).ok()?;
    match value.pointer(pointer)? {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// SHA-256 of the canonical JSON of `value` (object keys sorted at every depth), so a map
/// whose order differs between processes (a `HashMap` of headers or attributes) fingerprints
/// the same in each.
fn fingerprint_of(value: &impl Serialize) -> Option<Fingerprint> {
    let canonical = canonical(serde_json::to_value(value).ok()?);
    serde_json::to_vec(&canonical)
        .ok()
        .map(|b| Fingerprint::of_bytes(&b))
}

/// What differs between two deliveries of one API Gateway or ALB request (a client's retry, a
/// redelivery): its request id, its times, its trace header. Left out of the default
/// fingerprint, so a retry replays instead of being a conflict.
const DELIVERY_FIELDS: &[&str] = &[
    "/requestContext/requestId",
    "/requestContext/extendedRequestId",
    "/requestContext/requestTime",
    "/requestContext/requestTimeEpoch",
    "/requestContext/time",
    "/requestContext/timeEpoch",
];
const DELIVERY_HEADERS: &[&str] = &["x-amzn-trace-id", "x-amzn-requestid", "x-request-id"];

/// The default fingerprint: the whole event, less what differs between deliveries of one
/// request ([`DELIVERY_FIELDS`] and trace headers, in `headers` and `multiValueHeaders`).
fn event_fingerprint(value: &impl Serialize) -> Option<Fingerprint> {
    let mut value = serde_json::to_value(value).ok()?;
    for pointer in DELIVERY_FIELDS {
        let (parent, field) = pointer.rsplit_once('/')?;
        if let Some(serde_json::Value::Object(map)) = value.pointer_mut(parent) {
            map.remove(field);
        }
    }
    for headers in ["headers", "multiValueHeaders"] {
        if let Some(serde_json::Value::Object(map)) = value.get_mut(headers) {
            map.retain(|name, _| !DELIVERY_HEADERS.contains(&name.to_ascii_lowercase().as_str()));
        }
    }
    let canonical = canonical(value);
    serde_json::to_vec(&canonical)
        .ok()
        .map(|b| Fingerprint::of_bytes(&b))
}

/// `value` with every object's keys in sorted order (whatever order the map type keeps).
pub(crate) fn canonical(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

impl<E: Serialize + 'static, S: Store> Idempotency<E, S> {
    /// Keys each event by `key` (`None`: the event has no key, and nothing runs). The whole
    /// event is the payload a duplicate must match, which is safe (nothing is ever replayed for
    /// other data) but strict: narrow it with [`Idempotency::validate`] or
    /// [`Idempotency::validate_path`] for triggers that add delivery metadata.
    pub fn new(table: S, key: impl Fn(&E) -> Option<String> + Send + Sync + 'static) -> Self {
        let disabled = std::env::var(DISABLED_VAR)
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "TRUE" | "True"));
        Idempotency {
            table,
            key: Arc::new(key),
            payload: Arc::new(|e: &E| event_fingerprint(e)),
            prefix: default_prefix(),
            lease_ms: 60_000,
            cache: None,
            disabled,
            on_replay: None,
        }
        .warn_if_disabled()
    }

    fn warn_if_disabled(self) -> Self {
        if self.disabled {
            tracing::warn!(
                "{DISABLED_VAR} is set: handlers run without idempotency (every call runs)"
            );
        }
        self
    }

    /// Turns idempotency off (or back on) whatever [`DISABLED_VAR`] says.
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.disabled = disabled;
        self.warn_if_disabled()
    }

    /// Changes every replayed value before it is decoded (its JSON): to mark it as a replay,
    /// say, or to drop what only the first caller may see. The stored value is not changed.
    pub fn on_replay(
        mut self,
        hook: impl Fn(&mut serde_json::Value) + Send + Sync + 'static,
    ) -> Self {
        self.on_replay = Some(Arc::new(hook));
        self
    }

    /// Keys each event by the value at JSON pointer `pointer` of its serde form
    /// (`"/messageId"`, `"/body/order_id"`).
    pub fn key_path(table: S, pointer: &str) -> Self {
        let pointer = pointer.to_owned();
        Self::new(table, move |e: &E| pointed(e, &pointer))
    }

    /// Compares only the part of the event at JSON pointer `pointer` (say the amount and
    /// currency), so fields that differ between honest retries (a timestamp, a trace id) do not
    /// make a retry a conflict. A missing part fingerprints as JSON `null`.
    pub fn validate_path(mut self, pointer: &str) -> Self {
        let pointer = pointer.to_owned();
        self.payload = Arc::new(move |e: &E| {
            let value = serde_json::to_value(e).ok()?;
            fingerprint_of(value.pointer(&pointer).unwrap_or(&serde_json::Value::Null))
        });
        self
    }

    /// Compares only `part(event)` (its JSON), for events whose delivery metadata changes
    /// between honest redeliveries (an SQS receipt handle and receive count): the order a
    /// message carries, say.
    pub fn validate<P: Serialize>(
        mut self,
        part: impl Fn(&E) -> P + Send + Sync + 'static,
    ) -> Self {
        self.payload = Arc::new(move |e: &E| fingerprint_of(&part(e)));
        self
    }

    /// Prefixes every key, so two functions sharing a table never share a key. By default the
    /// function's name (`AWS_LAMBDA_FUNCTION_NAME`) and [`PREFIX_SEPARATOR`]; empty outside
    /// Lambda. The separator is added here too (`prefix("orders")` keys `orders#{key}`); an
    /// empty prefix keys the key alone, as 0.1 did.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.prefix = if prefix.is_empty() {
            prefix
        } else {
            format!("{prefix}{PREFIX_SEPARATOR}")
        };
        self
    }

    /// The lease of a call that is given no [`Deadline`] (60 s by default): how long a crashed
    /// attempt holds its key before a retry may take over. Nothing renews it, so it must be
    /// longer than the handler can run: a handler still running when it ends can be taken over.
    pub fn lease_ms(mut self, lease_ms: i64) -> Self {
        self.lease_ms = lease_ms.max(1);
        self
    }

    /// Keeps the last `max_items` finished answers in this process, so a duplicate that meets a
    /// warm instance is answered without a request. Only DONE answers are cached; the payload
    /// is still compared.
    pub fn local_cache(mut self, max_items: usize) -> Self {
        self.cache = (max_items > 0).then(|| Arc::new(LocalCache::new(max_items)));
        self
    }

    /// Runs `handler` at most once per key (until the claim's retention ends): the first call
    /// runs it and stores its value; every later call with the same key and payload gets that
    /// value back; a call while another attempt holds the key gets [`Answer::InProgress`].
    /// `deadline` ties the lease to the invocation's remaining time (see [`Deadline`]).
    pub async fn run<R, X, F, Fut>(
        &self,
        event: &E,
        deadline: Option<Deadline>,
        handler: F,
    ) -> Result<Answer<R>, Error<X>>
    where
        R: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<R, Failed<X>>>,
    {
        let (key, fingerprint) = self.identify(event).ok_or(Error::NoKey)?;
        self.run_as(key, fingerprint, deadline, handler).await
    }

    /// The prefix keys get, its separator included (empty: none).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether handlers run plainly ([`DISABLED_VAR`], [`Idempotency::disabled`]).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn is_disabled(&self) -> bool {
        self.disabled
    }

    /// The event's prefixed key and the fingerprint of its payload.
    pub(crate) fn identify(&self, event: &E) -> Option<(String, Fingerprint)> {
        let key = (self.key)(event).filter(|k| !k.is_empty())?;
        Some((format!("{}{key}", self.prefix), (self.payload)(event)?))
    }

    /// [`Idempotency::run`] for an event already identified (the layer moves the event into
    /// the handler).
    pub(crate) async fn run_as<R, X, F, Fut>(
        &self,
        key: String,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        handler: F,
    ) -> Result<Answer<R>, Error<X>>
    where
        R: Serialize + DeserializeOwned,
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<R, Failed<X>>>,
    {
        let stored_as = |value: &R| {
            Ok(StoredResponse {
                status: 200,
                body: serde_json::to_string(value).map_err(Error::Encode)?,
            })
        };
        match self
            .run_stored(key, fingerprint, deadline, handler, stored_as)
            .await?
        {
            Stored::Ran(value) => Ok(Answer::Ran(value)),
            Stored::Replayed(stored) => self.decode(&stored).map(Answer::Replayed),
            Stored::Unrecorded { .. } => Ok(Answer::DoneUnrecorded),
            Stored::InProgress { retry_after_ms } => Ok(Answer::InProgress { retry_after_ms }),
            Stored::Conflict => Ok(Answer::Conflict),
        }
    }

    /// The protocol's one path, for every entry: claim, run `handler` once, store what
    /// `stored_as` makes of its value (or release the claim, or keep it, as [`Failed`] says),
    /// and answer a duplicate with the stored answer undecoded. [`Idempotency::run_as`] stores a
    /// value's JSON; the HTTP layer stores a response (its status, marked headers and body).
    pub(crate) async fn run_stored<T, X, F, Fut>(
        &self,
        key: String,
        fingerprint: Fingerprint,
        deadline: Option<Deadline>,
        handler: F,
        stored_as: impl FnOnce(&T) -> Result<StoredResponse, Error<X>>,
    ) -> Result<Stored<T>, Error<X>>
    where
        F: FnOnce(Attempt) -> Fut,
        Fut: Future<Output = Result<T, Failed<X>>>,
    {
        if self.disabled {
            return match handler(Attempt { took_over: false }).await {
                Ok(value) => Ok(Stored::Ran(value)),
                Err(Failed::Before(x) | Failed::Unknown(x)) => Err(Error::Handler(x)),
            };
        }
        if let Some(cache) = &self.cache {
            match cache.get(&key, &fingerprint) {
                Some(Ok(stored)) => return Ok(Stored::Replayed(stored)),
                Some(Err(())) => return Ok(Stored::Conflict),
                None => {}
            }
        }
        let lease_ms = deadline.map_or(self.lease_ms, Deadline::lease_ms);
        let (token, took_over) = match self.table.claim(&key, &fingerprint, lease_ms).await? {
            ClaimOutcome::Claimed { token, took_over } => (token, took_over),
            ClaimOutcome::Replay(stored) => {
                self.remember(&key, &fingerprint, &stored);
                return Ok(Stored::Replayed(stored));
            }
            ClaimOutcome::ReplayUnrecorded { status } => return Ok(Stored::Unrecorded { status }),
            ClaimOutcome::InFlight { retry_after_ms } => {
                return Ok(Stored::InProgress { retry_after_ms })
            }
            ClaimOutcome::Conflict { .. } => return Ok(Stored::Conflict),
        };
        let value = match handler(Attempt { took_over }).await {
            Ok(value) => value,
            // This attempt did nothing; after a takeover an earlier one may have, so the claim
            // stays (its lease given up: the next attempt takes over at once, told so).
            Err(Failed::Before(x)) if took_over => {
                self.table.abandon(&key, &token).await?;
                return Err(Error::Handler(x));
            }
            Err(Failed::Before(x)) => {
                self.table.release(&key, &token).await?;
                return Err(Error::Handler(x));
            }
            Err(Failed::Unknown(x)) => return Err(Error::Handler(x)),
        };
        let stored = stored_as(&value)?;
        match self
            .table
            .finalize(&key, &fingerprint, &token, &stored)
            .await?
        {
            FinalizeOutcome::Done => {
                self.remember(&key, &fingerprint, &stored);
                Ok(Stored::Ran(value))
            }
            // Our lease ran out and a successor finished first: its value is the one stored, if
            // it was for this payload.
            FinalizeOutcome::Superseded(Some(theirs)) => {
                let same = self.table.get(&key).await?.map(|c| c.fingerprint);
                if same.as_ref() == Some(&fingerprint) {
                    Ok(Stored::Replayed(theirs))
                } else {
                    Ok(Stored::Conflict)
                }
            }
            // A successor holds the key and has not finished: it will store its own value.
            FinalizeOutcome::Superseded(None) => Ok(Stored::InProgress {
                retry_after_ms: 1_000,
            }),
        }
    }

    fn remember(&self, key: &str, fingerprint: &Fingerprint, stored: &StoredResponse) {
        if let Some(cache) = &self.cache {
            cache.put(key, fingerprint, stored);
        }
    }

    /// A stored value as the handler's type, through the replay hook if there is one.
    fn decode<R: DeserializeOwned, X>(&self, stored: &StoredResponse) -> Result<R, Error<X>> {
        match &self.on_replay {
            None => serde_json::from_str(&stored.body).map_err(Error::Decode),
            Some(hook) => {
                let mut value: serde_json::Value =
                    serde_json::from_str(&stored.body).map_err(Error::Decode)?;
                hook(&mut value);
                serde_json::from_value(value).map_err(Error::Decode)
            }
        }
    }
}

/// The function's name and the separator inside Lambda, so two functions sharing a table
/// never share a key; nothing outside it.
fn default_prefix() -> String {
    std::env::var("AWS_LAMBDA_FUNCTION_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .map(|n| format!("{n}{PREFIX_SEPARATOR}"))
        .unwrap_or_default()
}

/// When the invocation ends, so that its claim's lease ends with it: a duplicate is "in
/// progress" while this attempt can still be running, and may take over as soon as it cannot.
/// Only a duration is taken from this process's clock; the lease's end is written in the
/// store's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    at_local_ms: i64,
}

impl Deadline {
    /// A margin past the deadline: for the runtime to stop the invocation, and for the store's
    /// clock as two processes read it (the `Date` header's whole second, a second of latency,
    /// and the two seconds a clock may read ahead before an answer corrects it).
    const MARGIN_MS: i64 = 5_000;

    /// `remaining_ms` from now.
    pub fn in_ms(remaining_ms: i64) -> Self {
        Deadline {
            at_local_ms: local_now_ms().saturating_add(remaining_ms),
        }
    }

    /// The Lambda invocation's deadline; `None` when the context carries none (a zero
    /// deadline: a default context, some emulators), so the call takes the configured lease.
    #[cfg(feature = "lambda")]
    pub fn of(context: &lambda_runtime::Context) -> Option<Self> {
        (context.deadline > 0).then(|| Deadline {
            at_local_ms: i64::try_from(context.deadline).unwrap_or(i64::MAX),
        })
    }

    /// The lease a claim taken now should have.
    pub fn lease_ms(self) -> i64 {
        self.at_local_ms
            .saturating_sub(local_now_ms())
            .max(0)
            .saturating_add(Self::MARGIN_MS)
    }
}

/// The in-memory store under `Idempotency`: what a user's unit tests meet.
#[cfg(test)]
mod memory_store {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::protocol::{ClaimOutcome, FinalizeOutcome};
    use crate::store::{MemoryStore, Store};

    #[derive(serde::Serialize)]
    struct Order {
        id: String,
        amount_minor: i64,
    }

    fn order(id: &str, amount_minor: i64) -> Order {
        Order {
            id: id.into(),
            amount_minor,
        }
    }

    async fn charge(
        once: &Idempotency<Order, MemoryStore>,
        o: &Order,
        charges: &AtomicUsize,
        size: usize,
    ) -> Answer<String> {
        once.run(o, None, |_| async {
            charges.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Failed<String>>("c".repeat(size))
        })
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn the_memory_store_keeps_the_protocol_without_dynamodb() {
        let store = MemoryStore::new();
        let once = Idempotency::key_path(store.clone(), "/id").prefix("");
        let charges = AtomicUsize::new(0);
        let o = order("ord_1", 100);
        assert_eq!(
            charge(&once, &o, &charges, 2).await,
            Answer::Ran("cc".into())
        );
        assert_eq!(
            charge(&once, &o, &charges, 2).await,
            Answer::Replayed("cc".into())
        );
        assert_eq!(
            charge(&once, &order("ord_1", 999), &charges, 2).await,
            Answer::Conflict
        );
        // An answer too large for DynamoDB is not recorded here either: the tests a user
        // writes against memory meet what the table would do.
        let big = order("ord_2", 1);
        assert!(matches!(
            charge(&once, &big, &charges, 600 * 1024).await,
            Answer::Ran(_)
        ));
        assert_eq!(
            charge(&once, &big, &charges, 1).await,
            Answer::DoneUnrecorded
        );
        assert_eq!(charges.load(Ordering::SeqCst), 2);
        assert_eq!(store.claims().len(), 2);
    }

    #[tokio::test]
    async fn a_live_claim_is_in_progress_and_an_expired_one_is_taken_over_and_told() {
        let store = MemoryStore::new();
        let fp = Fingerprint::new("fp");
        let ClaimOutcome::Claimed { token, .. } = store.claim("k", &fp, 1).await.unwrap() else {
            panic!()
        };
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let next = store.claim("k", &fp, 60_000).await.unwrap();
        assert!(
            matches!(
                next,
                ClaimOutcome::Claimed {
                    took_over: true,
                    ..
                }
            ),
            "{next:?}"
        );
        assert!(matches!(
            store.claim("k", &fp, 60_000).await.unwrap(),
            ClaimOutcome::InFlight { .. }
        ));
        // The zombie's finalize and release do nothing to its successor's claim.
        let r = StoredResponse {
            status: 200,
            body: "{}".into(),
        };
        assert_eq!(
            store.finalize("k", &fp, &token, &r).await.unwrap(),
            FinalizeOutcome::Superseded(None)
        );
        assert!(!store.release("k", &token).await.unwrap());
        assert!(store.get("k").await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_done_claim_past_its_retention_is_absent() {
        let store = MemoryStore::new().retention_ms(0);
        let once = Idempotency::key_path(store.clone(), "/id").prefix("");
        let charges = AtomicUsize::new(0);
        let o = order("ord_3", 1);
        charge(&once, &o, &charges, 1).await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        assert!(store.get("ord_3").await.unwrap().is_none());
        assert!(matches!(
            charge(&once, &o, &charges, 1).await,
            Answer::Ran(_)
        ));
        assert_eq!(charges.load(Ordering::SeqCst), 2);
    }
}
