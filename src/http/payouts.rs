//! The payout routes: `POST /payouts` (with `Idempotency-Key`) and `GET /payouts/{payout}`.
//!
//! Money leaves through these, so they never run open: in Lambda the caller is the IAM
//! principal API Gateway's `AWS_IAM` authorizer put in the request context (a request without
//! one is refused, 403); outside Lambda every request needs `Authorization: Bearer <token>` of
//! a configured caller (compared in constant time; missing 401, wrong 403), and without one the
//! routes are off.
//!
//! Keys are the caller's, and a caller is never a credential: the payout id is derived from the
//! caller's scope and the key, so two callers' equal keys are two payouts, and one caller's
//! retry names the same payout after its token rotated (several tokens may name one caller) or
//! from another session of the same IAM role (the role is the caller; the assumed-role session
//! name is dropped). Under `payhook serve` the scope is what the caller's tokens are bound to in
//! the store, decided at start ([`crate::payouts::callers`]), so a rename or moving a token
//! between `PAYHOOK_PAYOUT_TOKEN` and `PAYHOOK_PAYOUT_CALLERS` re-scopes nothing.

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use std::collections::BTreeMap;

use super::read::iam_caller;
use super::{error, App, ReadToken};
use crate::payouts::callers::{valid_name, Configured, Resolved, Scope, TokenId};
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
    /// Named callers, each with its bearer tokens and its recorded scope (`payhook serve`).
    Callers(Vec<ScopedCaller>),
    /// Nobody (`payhook serve` without a payout token).
    Off,
}

impl PayoutAccess {
    /// One caller, `local`, with one token, scoped `caller:local` (in-process tests; `payhook
    /// serve` builds its callers from the recorded bindings, [`ScopedCaller::new`]).
    pub fn token(token: ReadToken) -> Self {
        let caller = PayoutCaller {
            name: LOCAL_CALLER.to_owned(),
            tokens: vec![token],
            declared: None,
        };
        PayoutAccess::Callers(vec![ScopedCaller {
            scope: Scope::of_name(LOCAL_CALLER),
            earlier: BTreeMap::new(),
            caller,
        }])
    }
}

/// The caller `PAYHOOK_PAYOUT_TOKEN`'s tokens name.
pub const LOCAL_CALLER: &str = "local";

/// A caller of the payout routes under `payhook serve`, as configured: a name, the tokens that
/// name it (more than one while a token is rotated), and the scope declared for it, if any
/// (`name@caller:other=…`). Its keys' scope is decided at start from the store
/// ([`ScopedCaller`]), never from the name alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutCaller {
    pub name: String,
    pub tokens: Vec<ReadToken>,
    pub declared: Option<Scope>,
}

/// A configured caller with the scope its tokens are bound to (decided once at start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopedCaller {
    pub caller: PayoutCaller,
    /// What its payout ids are derived from.
    pub scope: Scope,
    /// Tokens bound to another scope (a declared merge): each one's earlier name.
    pub earlier: BTreeMap<TokenId, Scope>,
}

impl ScopedCaller {
    /// `caller` with the scope [`crate::payouts::callers::resolve`] gave it.
    pub fn new(caller: PayoutCaller, resolved: Resolved) -> Self {
        ScopedCaller {
            caller,
            scope: resolved.scope,
            earlier: resolved.earlier,
        }
    }
}

impl PayoutCaller {
    /// `PAYHOOK_PAYOUT_TOKEN` (space-separated tokens of `local`) and `PAYHOOK_PAYOUT_CALLERS`
    /// (`name[@scope]=token[,token]`, space-separated). `Err` names the variable and the reason.
    pub fn from_env(
        token: Option<&str>,
        callers: Option<&str>,
    ) -> Result<Vec<PayoutCaller>, (&'static str, &'static str)> {
        const SHORT: &str = "each token must be at least 24 characters";
        let tokens = |name: &'static str, list: &mut dyn Iterator<Item = &str>| {
            list.map(|t| ReadToken::new(t).ok_or((name, SHORT)))
                .collect::<Result<Vec<_>, _>>()
        };
        let mut out = Vec::new();
        if let Some(v) = token.filter(|v| !v.trim().is_empty()) {
            out.push(PayoutCaller {
                name: LOCAL_CALLER.to_owned(),
                tokens: tokens("PAYHOOK_PAYOUT_TOKEN", &mut v.split_whitespace())?,
                declared: None,
            });
        }
        const NAME: &str = "PAYHOOK_PAYOUT_CALLERS";
        for entry in callers.unwrap_or("").split_whitespace() {
            let (head, list) = entry
                .split_once('=')
                .ok_or((NAME, "each caller is name[@scope]=token[,token]"))?;
            let (name, declared) = match head.split_once('@') {
                None => (head, None),
                Some((name, scope)) => (
                    name,
                    Some(Scope::parse(scope).ok_or((
                        NAME,
                        "a declared scope is caller: and 1 to 64 letters, digits, - or _",
                    ))?),
                ),
            };
            if !valid_name(name) {
                return Err((NAME, "a caller's name is 1 to 64 letters, digits, - or _"));
            }
            if out.iter().any(|c: &PayoutCaller| c.name == name) {
                return Err((NAME, "a caller is named twice"));
            }
            out.push(PayoutCaller {
                name: name.to_owned(),
                tokens: tokens(NAME, &mut list.split(','))?,
                declared,
            });
        }
        Ok(out)
    }

    /// What [`crate::payouts::callers::resolve`] judges: the name, the tokens by digest id, the
    /// declaration.
    pub fn configured(&self) -> Configured {
        Configured {
            name: self.name.clone(),
            tokens: self.tokens.iter().map(|t| TokenId(t.id())).collect(),
            declared: self.declared.clone(),
        }
    }
}

/// Who a payout request is from: the name keys are scoped by, and the names the same caller had
/// before callers were named (a payout opened under one of them is found again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub aliases: Vec<String>,
}

/// The IAM caller a key is scoped by: an assumed role's session name is dropped (a retry from
/// a replacement task or instance is the same caller); anything else is the ARN itself.
pub fn iam_caller_name(arn: &str) -> String {
    match arn.split_once(":assumed-role/") {
        Some((prefix, rest)) => match rest.split_once('/') {
            Some((role, _session)) => format!("{prefix}:assumed-role/{role}"),
            None => arn.to_owned(),
        },
        None => arn.to_owned(),
    }
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

/// 422: the provider's API cannot be asked for this amount (its unit table, docs/payouts.md).
fn unrepresentable(
    request: &PayoutRequest,
    e: &crate::providers::units::Unrepresentable,
) -> Response {
    let body = json!({
        "error": "unrepresentable_amount",
        "field": "amount",
        "provider": request.provider.as_str(),
        "currency": request.money.currency.as_str(),
        "message": e.to_string(),
    });
    (
        StatusCode::UNPROCESSABLE_ENTITY,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The caller, or the refusal.
fn caller<S>(app: &App<S>, req: &Request<Body>) -> Result<Caller, Box<Response>> {
    let Some(service) = &app.payouts else {
        return Err(Box::new(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "payouts_not_configured",
            "this process does not send payouts",
        )));
    };
    match &service.access {
        PayoutAccess::Iam => match iam_caller(req) {
            Some(arn) => {
                let name = iam_caller_name(&arn);
                let aliases = if name == arn { vec![] } else { vec![arn] };
                Ok(Caller { name, aliases })
            }
            None => Err(Box::new(error(
                StatusCode::FORBIDDEN,
                "forbidden",
                "payouts need an IAM-authorized (SigV4-signed) request",
            ))),
        },
        PayoutAccess::Callers(callers) => {
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
                        "payouts need Authorization: Bearer <a payout caller's token>",
                    );
                    res.headers_mut()
                        .insert("www-authenticate", HeaderValue::from_static("Bearer"));
                    Err(Box::new(res))
                }
                Some(t) => match matching(callers, t) {
                    Some((c, presented)) => {
                        let presented = TokenId(presented.id());
                        // A token bound to another scope (a declared merge) finds what it made
                        // there; before callers were named, the scope was the token's own id.
                        let earlier = c.earlier.get(&presented).map(|s| s.to_string());
                        let legacy = c
                            .caller
                            .tokens
                            .iter()
                            .map(|tok| format!("token:{}", tok.id()));
                        Ok(Caller {
                            name: c.scope.to_string(),
                            aliases: earlier.into_iter().chain(legacy).collect(),
                        })
                    }
                    None => Err(Box::new(error(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        "wrong bearer token",
                    ))),
                },
            }
        }
        PayoutAccess::Off => Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "payouts are off: set PAYHOOK_PAYOUT_TOKEN to serve them locally",
        ))),
    }
}

/// The caller whose token `presented` is, and that token. Every token is compared (in constant
/// time), so the time taken says nothing about which caller or token came close.
fn matching<'a>(
    callers: &'a [ScopedCaller],
    presented: &str,
) -> Option<(&'a ScopedCaller, &'a ReadToken)> {
    let mut found = None;
    for c in callers {
        for t in &c.caller.tokens {
            if t.matches(presented) && found.is_none() {
                found = Some((c, t));
            }
        }
    }
    found
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
    // The provider client is set up on the first payout (not at start): when no call could
    // ever leave, refuse before anything is reserved.
    if let Err(why) = service.api.ready() {
        tracing::error!(error = %why, "payouts refused: no provider call can leave this process");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "payouts_unavailable",
            "this process cannot reach payout providers",
        );
    }
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
        caller: &who.name,
        key: &key,
        request: &request,
        lease_ms,
        aliases: &who.aliases,
    };
    // Before anything is written: an amount the provider's API cannot carry exactly is the
    // caller's to change (rounding a payout is not ours to do), never a debit sent wrongly.
    // A retry of a payout opened before the table refused its amount is answered as it is.
    if let Err(e) = crate::providers::units_of(request.provider).to_api(request.money) {
        match app.pipeline.names_a_payout(&call).await {
            Ok(true) => {}
            Ok(false) => return unrepresentable(&request, &e),
            Err(e) => return store_unavailable(&e),
        }
    }
    match app.pipeline.payout(&service.api, call).await {
        Ok(answer) => {
            crate::audit::record(
                &who.name,
                "payout",
                &json!({
                    "payout": answer.payout.as_ref().map(PayoutId::as_str),
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
        Err(e) => store_unavailable(&e),
    }
}

/// 503: the store failed under the request; the key's retry resumes it.
fn store_unavailable(e: &crate::pipeline::PipelineError) -> Response {
    tracing::error!(error = ?e, "payout failed; the key's retry resumes it");
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "retry later with the same Idempotency-Key",
    )
}

/// A payout's record as `GET /payouts/{payout}` and `payhook payouts show` give it: with the
/// `reference` its transfer was sent under, as the POST answer names it.
pub fn payout_json(record: &crate::payouts::PayoutRecord) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(record)?;
    if let Some(obj) = value.as_object_mut() {
        obj.insert("reference".into(), json!(record.payout.as_str()));
    }
    serde_json::to_string(&value)
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
        Ok(Some(record)) => match payout_json(&record) {
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
