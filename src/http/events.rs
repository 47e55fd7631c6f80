//! The Amazon EventBridge door: a provider's events delivered by an EventBridge rule on its
//! partner event bus (Stripe's event destinations), invoking the webhook function directly.
//!
//! `lambda_http`'s pass-through hands such an invocation (it is no HTTP event) to the router as
//! `POST /events` with the event as the body and [`RequestContext::PassThrough`]; the route
//! answers only those, so no HTTP client can reach it (404). The event's `source` must be a
//! configured partner source ([`crate::providers::EventDoor`]); its `detail` (the provider's own
//! event) is mapped by the provider's webhook code and goes through the same pipeline, so both
//! doors share keys. A failure the provider should retry (5xx) becomes a function error
//! ([`lambda_service`]), which Lambda retries and then sends to the dead-letter queue.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use lambda_http::request::RequestContext;
use serde_json::Value;
use tower::ServiceExt;

use super::{error, lease_ms, App, Ctx};
use crate::domain::{now_ms, MAX_BODY_BYTES};
use crate::metrics::Rejection;
use crate::pipeline::Store;

/// Where `lambda_http` puts a non-HTTP invocation.
pub const PATH: &str = "/events";

fn is_pass_through<B>(req: &Request<B>) -> bool {
    matches!(
        req.extensions().get::<RequestContext>(),
        Some(RequestContext::PassThrough)
    )
}

pub async fn event<S: Store>(State(app): State<Arc<App<S>>>, req: Request<Body>) -> Response {
    if !is_pass_through(&req) {
        return error(StatusCode::NOT_FOUND, "not_found", "no such route");
    }
    let received_at_ms = now_ms();
    let lease = lease_ms(&app, &req, received_at_ms);
    let request_id = req
        .extensions()
        .get::<lambda_http::Context>()
        .map(|c| c.request_id.clone());
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), MAX_BODY_BYTES).await else {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            "event too large",
        );
    };
    let Ok(envelope) = serde_json::from_slice::<Value>(&bytes) else {
        return error(StatusCode::BAD_REQUEST, "invalid_event", "not a JSON event");
    };
    let source = envelope.get("source").and_then(Value::as_str).unwrap_or("");
    let Some(door) = app.event_doors.iter().find(|d| d.source == source) else {
        // Acknowledged (no retry), nothing written: only the configured partner source is ours.
        tracing::warn!(
            request_id = request_id.as_deref().unwrap_or("-"),
            source,
            "EventBridge event from a source no door accepts: refused"
        );
        return error(
            StatusCode::FORBIDDEN,
            "source_not_allowed",
            format!("events from {source:?} are not accepted"),
        );
    };
    let ctx = Ctx {
        app: &app,
        provider: door.provider,
        request_id,
    };
    let Some(detail) = envelope.get("detail") else {
        return ctx.reject(
            Rejection::Payload,
            error(StatusCode::BAD_REQUEST, "invalid_event", "no detail"),
        );
    };
    // The provider's event, as the log keeps it and replay maps it again.
    let body = detail.to_string().into_bytes();
    match door.mapper.normalise(&body) {
        // Authenticated by AWS, not by headers: none to show.
        Ok(ev) => {
            ctx.process(&ev, &body, received_at_ms, lease, Vec::new())
                .await
        }
        Err(e) => {
            tracing::info!(provider = %door.provider, error = %e, "EventBridge detail rejected");
            ctx.reject(Rejection::Payload, super::bad_payload(&e))
        }
    }
}

/// The router as the Lambda runtime runs it: an EventBridge invocation answered 5xx (the store
/// was unavailable: nothing was decided) becomes a function error, so Lambda retries it and
/// then hands it to the function's dead-letter destination, instead of the event being
/// acknowledged and lost. HTTP requests keep their answers: API Gateway passes them on.
pub async fn lambda_call(
    router: axum::Router,
    req: lambda_http::Request,
) -> Result<Response, lambda_http::Error> {
    let pass_through = is_pass_through(&req);
    let res = router.oneshot(req.map(Body::new)).await?;
    if pass_through && res.status().is_server_error() {
        return Err(format!(
            "the event was not processed (HTTP {}); retry",
            res.status().as_u16()
        )
        .into());
    }
    Ok(res)
}
