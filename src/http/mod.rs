//! HTTP adaptation: the axum router that both `payhook serve` and the Lambda runtime run.
//! Webhooks: request -> provider adapter (verify, normalise) -> pipeline -> response. Reads
//! ([`read`]): authorize -> [`crate::read`] -> JSON. No domain logic here.

pub mod events;
pub mod live;
pub mod payouts;
pub mod read;
pub mod source;

pub use read::{ReadAccess, ReadToken};

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::json;

use crate::domain::{now_ms, ProviderId, MAX_BODY_BYTES};
use crate::metrics::{self, Disposition, MetricsSink, Rejection};
use crate::pipeline::{Answer, Delivered, Pipeline, Store};

/// Time kept back from the Lambda deadline when sizing a lease, so our finalize lands before
/// the runtime kills us and a successor cannot take over while we still write.
const DEADLINE_MARGIN_MS: i64 = 1_000;

/// What the router needs, built once per process.
pub struct App<S> {
    pub pipeline: Pipeline<S>,
    /// The adapters deliveries are verified with ([`live`]: replaced when secrets are read again).
    pub providers: live::LiveProviders,
    pub lease_ms: i64,
    pub max_lease_ms: i64,
    /// Where the one CloudWatch EMF line per delivery goes ([`crate::metrics`]): stdout inside
    /// Lambda; off outside unless `payhook serve --metrics` asks, since stdout carries results.
    pub metrics: MetricsSink,
    /// Who may use the read routes ([`read`]).
    pub read_access: ReadAccess,
    /// Where each provider's webhooks may come from ([`source`]); absent: any source.
    pub source_allowlists: std::collections::BTreeMap<ProviderId, source::SourceAllowlist>,
    /// The payout routes' client and access ([`payouts`]); `None`: they answer 503.
    pub payouts: Option<payouts::PayoutService>,
    /// Providers whose events also arrive through Amazon EventBridge ([`events`]).
    pub event_doors: Vec<crate::providers::EventDoor>,
}

impl<S> App<S> {
    fn count(&self, provider: ProviderId, disposition: Disposition, request_id: Option<&str>) {
        metrics::emit(self.metrics, provider, disposition, now_ms(), request_id);
    }
}

pub fn router<S: Store>(app: Arc<App<S>>) -> Router {
    Router::new()
        .route("/webhooks/{provider}", post(webhook::<S>))
        .merge(read::routes(app.clone()))
        .merge(payouts::routes())
        .route(events::PATH, post(events::event::<S>))
        .with_state(app)
}

pub(crate) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({ "error": code, "message": message.into() });
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The lease for this invocation: inside Lambda, until shortly before its deadline (bounded by
/// the configured maximum); outside, the configured length.
pub(crate) fn lease_ms<S>(app: &App<S>, req: &Request<Body>, now: i64) -> i64 {
    match req.extensions().get::<lambda_http::Context>() {
        Some(ctx) => {
            let deadline = i64::try_from(ctx.deadline).unwrap_or(i64::MAX);
            (deadline - now - DEADLINE_MARGIN_MS).clamp(1_000, app.max_lease_ms)
        }
        None => app.lease_ms.min(app.max_lease_ms),
    }
}

async fn webhook<S: Store>(
    State(app): State<Arc<App<S>>>,
    Path(provider): Path<String>,
    req: Request<Body>,
) -> Response {
    let received_at_ms = now_ms();
    // No metric for an unknown name: it is caller input, and would become a dimension value.
    let Some(provider_id) = crate::providers::registered(&provider) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_provider",
            format!("no provider named {provider:?}"),
        );
    };
    let ctx = Ctx {
        app: &app,
        provider: provider_id,
        // Lambda's request id, for every line about this delivery; "-" outside Lambda.
        request_id: req
            .extensions()
            .get::<lambda_http::Context>()
            .map(|c| c.request_id.clone()),
    };
    // Before anything that may read a secret: a request from outside a provider's addresses
    // costs no Secrets Manager call, whatever its provider's state.
    if let Some(allowed) = app.source_allowlists.get(&provider_id) {
        if !source::source_ip(&req).is_some_and(|ip| allowed.allows(ip)) {
            tracing::warn!(request_id = ctx.rid(), provider = %provider_id,
                source = ?source::source_ip(&req), "source not in the provider's allowlist");
            return ctx.reject(
                Rejection::Source,
                error(
                    StatusCode::FORBIDDEN,
                    "source_not_allowed",
                    format!("requests to /webhooks/{provider} are accepted only from {provider}'s addresses"),
                ),
            );
        }
    }
    app.providers.refresh_if_due().await;
    let mut providers = app.providers.current();
    if providers.get(provider_id).is_none() && app.providers.refresh_after_failure().await {
        providers = app.providers.current();
    }
    let Some(adapter) = providers.get(provider_id) else {
        tracing::warn!(request_id = ctx.rid(), provider = %provider_id, "provider not configured");
        return ctx.reject(
            Rejection::NotConfigured,
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "provider_not_configured",
                format!("{provider} has no secret configured"),
            ),
        );
    };
    let lease = lease_ms(&app, &req, received_at_ms);
    let (parts, body) = req.into_parts();
    let Some(bytes) = read_body(&parts.headers, body).await else {
        tracing::info!(request_id = ctx.rid(), provider = %provider_id, "body too large");
        return ctx.reject(Rejection::TooLarge, too_large());
    };
    // A signature no known secret verifies may be signed with a secret rotated in since the
    // last read: read them again (rate-limited) and verify once more.
    if app.providers.refreshes()
        && !verifies(adapter, &parts.headers, &bytes, received_at_ms / 1_000)
        && app.providers.refresh_after_failure().await
    {
        providers = app.providers.current();
    }
    let Some(adapter) = providers.get(provider_id) else {
        return ctx.reject(
            Rejection::NotConfigured,
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "provider_not_configured",
                format!("{provider} has no secret configured"),
            ),
        );
    };
    if let Some(items) = adapter.batch(&bytes) {
        return ctx
            .batch(adapter, &parts.headers, items, received_at_ms, lease)
            .await;
    }
    match ctx.verified_event(adapter, &parts.headers, &bytes, received_at_ms) {
        Ok(event) => {
            let shown = shown_headers(provider_id, &parts.headers);
            ctx.process(&event, &bytes, received_at_ms, lease, shown)
                .await
        }
        Err(rejected) => *rejected,
    }
}

/// Whether any known secret verifies the delivery: for a batch (Adyen), whether any of its
/// items verifies, each on its own bytes, since the batch as a whole is never signed; a genuine
/// batch must not look like a rotation and force a read of the secrets. A batch that does not
/// split is left to the batch path's own refusal (no read).
fn verifies(
    adapter: &dyn crate::providers::Provider,
    headers: &HeaderMap,
    body: &[u8],
    now_s: i64,
) -> bool {
    match adapter.batch(body) {
        Some(Ok(items)) => items
            .iter()
            .any(|item| adapter.verify(headers, item, now_s).is_ok()),
        Some(Err(_)) => true,
        None => adapter.verify(headers, body, now_s).is_ok(),
    }
}

/// The body, unless it is larger than [`MAX_BODY_BYTES`] (by its declared length, before
/// reading, or as read).
async fn read_body(headers: &HeaderMap, body: Body) -> Option<bytes::Bytes> {
    let declared = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return None;
    }
    axum::body::to_bytes(body, MAX_BODY_BYTES).await.ok()
}

/// One delivery's provider and request id: what every log line and metric about it carries.
struct Ctx<'a, S> {
    app: &'a App<S>,
    provider: ProviderId,
    request_id: Option<String>,
}

impl<S: Store> Ctx<'_, S> {
    fn rid(&self) -> &str {
        self.request_id.as_deref().unwrap_or("-")
    }

    /// Counts a rejection (nothing was written) and answers `response`.
    fn reject(&self, why: Rejection, response: Response) -> Response {
        self.app.count(
            self.provider,
            Disposition::Rejected(why),
            self.request_id.as_deref(),
        );
        response
    }

    /// A batch (Adyen): each item verified, mapped and processed on its own. `[accepted]` once
    /// every verified item is decided; 500 (the sender retries the batch, and only what is
    /// missing applies) when one could not be; 401 when no item verifies. A forged item is
    /// refused alone: nothing is written for it, the rest are processed.
    async fn batch(
        &self,
        adapter: &dyn crate::providers::Provider,
        headers: &HeaderMap,
        items: Result<Vec<Vec<u8>>, crate::providers::PayloadError>,
        received_at_ms: i64,
        lease_ms: i64,
    ) -> Response {
        let items = match items {
            Ok(items) => items,
            Err(e) => return self.reject(Rejection::Payload, bad_payload(&e)),
        };
        let (mut verified, mut forged, mut undecided) = (0, 0, 0);
        for item in &items {
            match self.verified_event(adapter, headers, item, received_at_ms) {
                Ok(event) => {
                    verified += 1;
                    let shown = shown_headers(self.provider, headers);
                    let res = self
                        .process(&event, item, received_at_ms, lease_ms, shown)
                        .await;
                    let status = res.status();
                    if status.is_server_error() || status == StatusCode::CONFLICT {
                        undecided += 1;
                    }
                }
                Err(rejected) if rejected.status() == StatusCode::UNAUTHORIZED => forged += 1,
                // A verified item that does not map: refused for good (400 logged), not retried.
                Err(_) => verified += 1,
            }
        }
        if verified == 0 && forged > 0 {
            return error(
                StatusCode::UNAUTHORIZED,
                "invalid_signature",
                "no item of the batch verifies",
            );
        }
        if forged > 0 {
            tracing::warn!(request_id = self.rid(), provider = %self.provider, forged, verified,
                "forged items refused; the rest of the batch processed");
        }
        if undecided > 0 {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "retry",
                format!(
                    "{undecided} of {} items could not be decided; retry the batch",
                    items.len()
                ),
            );
        }
        (
            StatusCode::OK,
            [("content-type", "text/plain")],
            "[accepted]",
        )
            .into_response()
    }

    /// The signature checked on the raw bytes, then the payload mapped; a refusal is answered.
    fn verified_event(
        &self,
        adapter: &dyn crate::providers::Provider,
        headers: &HeaderMap,
        bytes: &[u8],
        received_at_ms: i64,
    ) -> Result<crate::domain::NormalisedEvent, Box<Response>> {
        let (rid, provider) = (self.rid(), self.provider);
        if let Err(e) = adapter.verify(headers, bytes, received_at_ms / 1_000) {
            tracing::info!(request_id = rid, %provider, reason = %e, "signature rejected");
            let response = error(StatusCode::UNAUTHORIZED, "invalid_signature", e.to_string());
            return Err(Box::new(self.reject(Rejection::Signature, response)));
        }
        adapter.normalise(bytes).map_err(|e| {
            // The field name only: a reason may quote the payload.
            let field = match &e {
                crate::providers::PayloadError::Invalid { field, .. } => field.as_str(),
                _ => "body",
            };
            tracing::info!(request_id = rid, %provider, field, "payload rejected");
            Box::new(self.reject(Rejection::Payload, bad_payload(&e)))
        })
    }

    /// Runs the pipeline and answers: its answer, or 503 when the store could not decide (the
    /// provider retries; any claim taken is kept for that retry).
    async fn process(
        &self,
        event: &crate::domain::NormalisedEvent,
        bytes: &[u8],
        received_at_ms: i64,
        lease_ms: i64,
        headers: Vec<(String, String)>,
    ) -> Response {
        // verified_event's strict parse accepted the body, so it is UTF-8.
        let raw_body = String::from_utf8_lossy(bytes);
        let delivered = Delivered {
            event,
            raw_body: &raw_body,
            received_at_ms,
            lease_ms,
            replay_of: None,
            started_by: None,
            headers,
        };
        let key = event.key();
        let key = key.as_ref().map_or("-", |k| k.as_str());
        let (rid, provider, event_id) = (self.rid(), self.provider, &event.event_id);
        let (outcome, took_over, response) = match self.app.pipeline.process(delivered).await {
            Ok(answer) => {
                tracing::info!(
                    request_id = rid, %provider, %event_id, key,
                    outcome = %answer.outcome, status = answer.status, "delivery"
                );
                (answer.outcome, answer.took_over, respond(answer))
            }
            Err(e) => {
                let outcome = crate::eventlog::Outcome::Failed;
                tracing::error!(
                    request_id = rid, %provider, %event_id, key, %outcome, error = ?e,
                    "delivery failed; provider will retry"
                );
                let response = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "temporarily unable to record this delivery; retry",
                );
                (outcome, false, response)
            }
        };
        let disposition = Disposition::Processed { outcome, took_over };
        self.app
            .count(provider, disposition, self.request_id.as_deref());
        response
    }
}

/// The headers `provider`'s signature check read, masked, for the delivery's log record.
fn shown_headers(provider: ProviderId, headers: &HeaderMap) -> Vec<(String, String)> {
    crate::providers::def(provider)
        .map(|def| crate::providers::masked_headers(def, headers))
        .unwrap_or_default()
}

fn too_large() -> Response {
    let body = json!({ "error": "payload_too_large", "limit_bytes": MAX_BODY_BYTES });
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn bad_payload(e: &crate::providers::PayloadError) -> Response {
    use crate::providers::PayloadError;
    let body = match e {
        PayloadError::Invalid { field, reason } => {
            json!({ "error": "invalid_field", "field": field, "message": format!("{field} {reason}") })
        }
        PayloadError::Malformed(m) => json!({ "error": "malformed_json", "message": m }),
        PayloadError::NotUtf8 => {
            json!({ "error": "malformed_json", "message": "body is not UTF-8" })
        }
    };
    (
        StatusCode::BAD_REQUEST,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Sends an answer: the stored body byte for byte, with the replay and retry headers.
pub fn respond(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if answer.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Some(s) = answer.retry_after_s {
        headers.insert("retry-after", HeaderValue::from(s));
    }
    (status, headers, answer.body).into_response()
}
