//! HTTP adaptation: the axum router that both `payhook serve` and the Lambda runtime run.
//! Webhooks: request -> provider adapter (verify, normalise) -> pipeline -> response. Reads
//! ([`read`]): authorize -> [`crate::read`] -> JSON. No domain logic here.

pub mod read;

pub use read::{ReadAccess, ReadToken};

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::json;

use crate::config::MAX_BODY_BYTES;
use crate::domain::{now_ms, ProviderId};
use crate::metrics::{self, Disposition, MetricsSink, Rejection};
use crate::pipeline::{Answer, Delivered, Pipeline, Store};
use crate::providers::Providers;

/// Time kept back from the Lambda deadline when sizing a lease, so our finalize lands before
/// the runtime kills us and a successor cannot take over while we still write.
const DEADLINE_MARGIN_MS: i64 = 1_000;

/// What the router needs, built once per process.
pub struct App<S> {
    pub pipeline: Pipeline<S>,
    pub providers: Providers,
    pub lease_ms: i64,
    pub max_lease_ms: i64,
    /// Where the one CloudWatch EMF line per delivery goes ([`crate::metrics`]): stdout inside
    /// Lambda; off outside unless `payhook serve --metrics` asks, since stdout carries results.
    pub metrics: MetricsSink,
    /// Who may use the read routes ([`read`]).
    pub read_access: ReadAccess,
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
        .with_state(app)
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
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
fn lease_ms<S>(app: &App<S>, req: &Request<Body>, now: i64) -> i64 {
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
    // Lambda's request id, for every line about this delivery; "-" outside Lambda.
    let request_id = req
        .extensions()
        .get::<lambda_http::Context>()
        .map(|c| c.request_id.clone());
    let rid = request_id.as_deref().unwrap_or("-");
    // No metric for an unknown name: it is caller input, and would become a dimension value.
    let Some(provider_id) = crate::providers::registered(&provider) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_provider",
            format!("no provider named {provider:?}"),
        );
    };
    let Some(adapter) = app.providers.get(provider_id) else {
        tracing::warn!(request_id = rid, provider = %provider_id, "provider not configured");
        app.count(
            provider_id,
            Disposition::Rejected(Rejection::NotConfigured),
            request_id.as_deref(),
        );
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_not_configured",
            format!("{provider} has no secret configured"),
        );
    };
    let lease = lease_ms(&app, &req, received_at_ms);
    let (parts, body) = req.into_parts();
    if parts
        .headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES)
    {
        tracing::info!(request_id = rid, provider = %provider_id, "body too large");
        app.count(
            provider_id,
            Disposition::Rejected(Rejection::TooLarge),
            request_id.as_deref(),
        );
        return too_large();
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        tracing::info!(request_id = rid, provider = %provider_id, "body too large");
        app.count(
            provider_id,
            Disposition::Rejected(Rejection::TooLarge),
            request_id.as_deref(),
        );
        return too_large();
    };
    if let Err(e) = adapter.verify(&parts.headers, &bytes, received_at_ms / 1_000) {
        tracing::info!(request_id = rid, provider = %provider_id, reason = %e, "signature rejected");
        app.count(
            provider_id,
            Disposition::Rejected(Rejection::Signature),
            request_id.as_deref(),
        );
        return error(StatusCode::UNAUTHORIZED, "invalid_signature", e.to_string());
    }
    let event = match adapter.normalise(&bytes) {
        Ok(ev) => ev,
        Err(e) => {
            // The field name only: a reason may quote the payload.
            let field = match &e {
                crate::providers::PayloadError::Invalid { field, .. } => field.as_str(),
                _ => "body",
            };
            tracing::info!(request_id = rid, provider = %provider_id, field, "payload rejected");
            app.count(
                provider_id,
                Disposition::Rejected(Rejection::Payload),
                request_id.as_deref(),
            );
            return bad_payload(&e);
        }
    };
    // parse_strict accepted the body, so it is UTF-8.
    let raw_body = String::from_utf8_lossy(&bytes);
    let delivered = Delivered {
        event: &event,
        raw_body: &raw_body,
        received_at_ms,
        lease_ms: lease,
        replay_of: None,
        started_by: None,
    };
    let key = event.key();
    let key = key.as_ref().map_or("-", |k| k.as_str());
    match app.pipeline.process(delivered).await {
        Ok(answer) => {
            tracing::info!(
                request_id = rid, provider = %provider_id, event_id = %event.event_id, key,
                outcome = %answer.outcome, status = answer.status, "delivery"
            );
            // The pipeline does not report takeovers in its answer yet (it logs them).
            let disposition = Disposition::Processed {
                outcome: answer.outcome,
                took_over: answer.took_over,
            };
            app.count(provider_id, disposition, request_id.as_deref());
            respond(answer)
        }
        Err(e) => {
            tracing::error!(
                request_id = rid, provider = %provider_id, event_id = %event.event_id, key,
                outcome = %crate::eventlog::Outcome::Failed, error = ?e, "delivery failed; provider will retry"
            );
            let disposition = Disposition::Processed {
                outcome: crate::eventlog::Outcome::Failed,
                took_over: false,
            };
            app.count(provider_id, disposition, request_id.as_deref());
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "temporarily unable to record this delivery; retry",
            )
        }
    }
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
