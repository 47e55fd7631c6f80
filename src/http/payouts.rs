//! The payout routes: `POST /payouts` (with `Idempotency-Key`) and `GET /payouts/{payout}`.
//!
//! Money leaves through these, so they never run open: in Lambda the caller is the IAM
//! principal API Gateway's `AWS_IAM` authorizer put in the request context (a request without
//! one is refused, 403); outside Lambda every request needs `Authorization: Bearer
//! <PAYHOOK_PAYOUT_TOKEN>` (compared in constant time; missing 401, wrong 403), and without a
//! token set the routes are off. Keys are the caller's: the payout id is derived from the
//! caller and the key, so two callers' equal keys are two payouts.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use super::read::iam_caller;
use super::{error, App, ReadToken};
use crate::payouts::{FieldError, Limits, PayoutId, PayoutRequest, RequestKey, Transfers};
use crate::pipeline::{PayoutAnswer, PayoutCall, Store};
use crate::reconcile::HttpProviderApi;

/// The payout routes, as template.yaml must declare them with `AWS_IAM`.
pub const PAYOUT_ROUTES: [(&str, &str); 2] = [("POST", "/payouts"), ("GET", "/payouts/{payout}")];

/// Who may pay out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PayoutAccess {
    /// IAM principals (Lambda, the default).
    Iam,
    /// Bearers of `PAYHOOK_PAYOUT_TOKEN` (`payhook serve`).
    Token(ReadToken),
    /// Nobody (`payhook serve` without a payout token).
    Off,
}

/// What the payout routes need besides the pipeline.
pub struct PayoutService {
    pub api: HttpProviderApi,
    pub access: PayoutAccess,
    /// The largest payout accepted, in minor units (`PAYHOOK_PAYOUT_MAX_MINOR`).
    pub max_amount_minor: i64,
}

pub fn routes<S: Store>() -> Router<Arc<App<S>>> {
    let [(_, create_path), (_, show_path)] = PAYOUT_ROUTES;
    Router::new()
        .route(create_path, post(create::<S>))
        .route(show_path, get(show::<S>))
}

fn invalid(e: &FieldError) -> Response {
    let body = json!({ "error": "invalid_field", "field": e.field, "message": e.to_string() });
    (
        StatusCode::BAD_REQUEST,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The caller, or the refusal.
fn caller<S>(app: &App<S>, req: &Request<Body>) -> Result<String, Box<Response>> {
    let Some(service) = &app.payouts else {
        return Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "payouts_not_configured",
            "this process does not send payouts",
        )));
    };
    match &service.access {
        PayoutAccess::Iam => iam_caller(req).ok_or_else(|| {
            Box::new(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                "payouts need an IAM-authorized (SigV4-signed) request",
            ))
        }),
        PayoutAccess::Token(token) => {
            let presented = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim());
            match presented {
                None => {
                    let mut res = error(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "payouts need Authorization: Bearer <PAYHOOK_PAYOUT_TOKEN>",
                    );
                    res.headers_mut()
                        .insert("www-authenticate", HeaderValue::from_static("Bearer"));
                    Err(Box::new(res))
                }
                Some(t) if token.matches(t) => Ok(format!("token:{}", token.id())),
                Some(_) => Err(Box::new(error(
                    StatusCode::FORBIDDEN,
                    "forbidden",
                    "wrong bearer token",
                ))),
            }
        }
        PayoutAccess::Off => Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "payouts are off: set PAYHOOK_PAYOUT_TOKEN to serve them locally",
        ))),
    }
}

async fn create<S: Store>(State(app): State<Arc<App<S>>>, req: Request<Body>) -> Response {
    let who = match caller(&app, &req) {
        Ok(c) => c,
        Err(res) => return *res,
    };
    let Some(service) = &app.payouts else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "payouts_not_configured",
            "",
        );
    };
    let key = match req.headers().get("idempotency-key").map(|v| {
        v.to_str()
            .map_err(|_| FieldError::new("Idempotency-Key", "must be visible ASCII"))
    }) {
        None => return invalid(&FieldError::new("Idempotency-Key", "header is required")),
        Some(Err(e)) => return invalid(&e),
        Some(Ok(v)) => match RequestKey::parse(v) {
            Ok(k) => k,
            Err(e) => return invalid(&e),
        },
    };
    let lease_ms = super::lease_ms(&app, &req, crate::domain::now_ms());
    let Ok(body) = to_bytes(req.into_body(), crate::payouts::MAX_REQUEST_BYTES + 1).await else {
        return invalid(&FieldError::new("body", "is larger than 8 KB"));
    };
    let supports = |p| service.api.supports(p);
    let request = match PayoutRequest::parse(
        &body,
        Limits {
            max_amount_minor: service.max_amount_minor,
            supports: &supports,
        },
    ) {
        Ok(r) => r,
        Err(e) => return invalid(&e),
    };
    let call = PayoutCall {
        caller: &who,
        key: &key,
        request: &request,
        lease_ms,
    };
    match app.pipeline.payout(&service.api, call).await {
        Ok(answer) => {
            crate::audit::record(
                &who,
                "payout",
                &json!({
                    "payout": PayoutId::derive(&who, &key).as_str(),
                    "provider": request.provider.as_str(),
                    "account": request.account.as_str(),
                    "amount": request.money.amount.get(),
                    "currency": request.money.currency.as_str(),
                }),
                Ok(&json!({
                    "http_status": answer.status,
                    "payout_status": answer.payout_status.map(|s| s.as_str()),
                    "replayed": answer.replayed,
                })),
            );
            respond(answer)
        }
        Err(e) => {
            tracing::error!(error = ?e, "payout failed; the key's retry resumes it");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "retry later with the same Idempotency-Key",
            )
        }
    }
}

fn respond(a: PayoutAnswer) -> Response {
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = (status, [("content-type", "application/json")], a.body).into_response();
    let h = res.headers_mut();
    if a.replayed {
        h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if let Some(s) = a.payout_status {
        h.insert("payout-status", HeaderValue::from_static(s.as_str()));
    }
    if let Some(s) = a.retry_after_s {
        if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
            h.insert("retry-after", v);
        }
    }
    res
}

async fn show<S: Store>(
    State(app): State<Arc<App<S>>>,
    Path(payout): Path<String>,
    req: Request<Body>,
) -> Response {
    if let Err(res) = caller(&app, &req) {
        return *res;
    }
    let Some(id) = PayoutId::parse(&payout) else {
        return invalid(&FieldError::new(
            "payout",
            "is not a payout id (po_ and 32 hex digits)",
        ));
    };
    match app.pipeline.store().payout(&id).await {
        Ok(Some(record)) => match serde_json::to_string(&record) {
            Ok(body) => {
                (StatusCode::OK, [("content-type", "application/json")], body).into_response()
            }
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        },
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("payout {id} not found"),
        ),
        Err(e) => {
            tracing::error!(error = ?e, "payout read failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "retry",
            )
        }
    }
}
