//! The read routes: `GET /accounts/{account}/balance`, `GET /payments/{provider}/{reference}`
//! and `GET /deliveries`, answering what [`crate::read`] returns, as JSON. Errors have the
//! webhook answers' shape (`{"error": code, "message": …}`).
//!
//! Every read is authorized before it reaches a handler (a layer over exactly these routes, so a
//! route added here cannot forget it), by the process's [`ReadAccess`]:
//!
//! * Lambda: API Gateway's `AWS_IAM` authorizer has checked the caller's SigV4 signature and
//!   `execute-api:Invoke` permission, and puts the caller in the request context. A read without
//!   that identity is refused (403): a route deployed without `AWS_IAM` fails closed.
//! * `payhook serve` on a loopback address: anyone who can reach it.
//! * `payhook serve --read-api`: `Authorization: Bearer <PAYHOOK_READ_TOKEN>`, compared in
//!   constant time; missing 401, wrong 403.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use lambda_http::request::RequestContext;
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{error, App};
use crate::domain::{AccountId, Reference};
use crate::eventlog::{LogFilter, Outcome};
use crate::pipeline::Store;
use crate::read::{self, DeliveryQuery, ReadError};
use crate::store::StoreError;

/// Who may read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadAccess {
    /// Callers API Gateway authenticated with IAM (SigV4): the Lambda's mode, and the default.
    Iam,
    /// Anyone who reaches the server: `payhook serve` bound to a loopback address.
    Loopback,
    /// Bearers of this token: `payhook serve --read-api`.
    Token(ReadToken),
    /// Nobody: `payhook serve` on a non-loopback address without `--read-api`.
    Off,
}

impl ReadAccess {
    pub fn describe(&self) -> &'static str {
        match self {
            ReadAccess::Iam => "IAM caller identity required",
            ReadAccess::Loopback => "loopback: local callers, addressed to a loopback Host",
            ReadAccess::Token(_) => "bearer token required",
            ReadAccess::Off => "read routes off (not loopback; see --read-api)",
        }
    }
}

/// The read API's bearer token. Only its SHA-256 is kept, and a presented token is hashed and
/// compared in constant time, so neither its bytes nor its length leak through timing.
#[derive(Clone, PartialEq, Eq)]
pub struct ReadToken {
    digest: [u8; 32],
}

impl ReadToken {
    /// Shorter tokens are guessable; refused at start-up.
    pub const MIN_LEN: usize = 24;

    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (token.len() >= Self::MIN_LEN).then(|| ReadToken {
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }

    /// A short public name of the token (hex of its digest's first bytes): the caller a
    /// payout's key is scoped to locally, so two tokens are two callers.
    pub fn id(&self) -> String {
        self.digest
            .iter()
            .take(6)
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    pub fn matches(&self, presented: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        bool::from(d.ct_eq(&self.digest))
    }
}

impl std::fmt::Debug for ReadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReadToken(<redacted>)")
    }
}

/// The read routes (all `GET`), as template.yaml must declare them with `AWS_IAM`
/// (tests/it/template.rs checks it from this list).
pub const READ_ROUTES: [&str; 3] = [
    "/accounts/{account}/balance",
    "/payments/{provider}/{reference}",
    "/deliveries",
];

pub fn routes<S: Store>(app: Arc<App<S>>) -> Router<Arc<App<S>>> {
    let [balance_path, payment_path, deliveries_path] = READ_ROUTES;
    Router::new()
        .route(balance_path, get(balance::<S>))
        .route(payment_path, get(payment::<S>))
        .route(deliveries_path, get(deliveries::<S>))
        .route_layer(middleware::from_fn_with_state(app, authorize::<S>))
}

/// The IAM caller API Gateway put in the request context, if any.
pub(crate) fn iam_caller(req: &Request<Body>) -> Option<String> {
    let Some(RequestContext::ApiGatewayV2(ctx)) = req.extensions().get::<RequestContext>() else {
        return None;
    };
    let iam = ctx.authorizer.as_ref()?.iam.as_ref()?;
    [&iam.user_arn, &iam.caller_id]
        .into_iter()
        .flatten()
        .find(|v| !v.trim().is_empty())
        .cloned()
}

async fn authorize<S: Store>(
    State(app): State<Arc<App<S>>>,
    req: Request<Body>,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let caller = match &app.read_access {
        ReadAccess::Iam => {
            match iam_caller(&req) {
                Some(arn) => arn,
                None => {
                    tracing::warn!(path, "read refused: no IAM caller identity (is the route's authorization AWS_IAM?)");
                    return error(
                        StatusCode::FORBIDDEN,
                        "forbidden",
                        "reads need an IAM-authorized (SigV4-signed) request",
                    );
                }
            }
        }
        ReadAccess::Loopback => {
            if let Err(why) = loopback_request(&req) {
                tracing::warn!(path, why, "read refused: not a local caller's request");
                return error(StatusCode::MISDIRECTED_REQUEST, "misdirected", why);
            }
            "loopback".to_owned()
        }
        ReadAccess::Token(token) => {
            let presented = req
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.split_once(' '))
                // The scheme is case-insensitive (RFC 9110); the token is not.
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, token)| token.trim());
            match presented {
                None => {
                    let mut res = error(
                        StatusCode::UNAUTHORIZED,
                        "unauthorized",
                        "reads need Authorization: Bearer <token>",
                    );
                    res.headers_mut().insert(
                        "www-authenticate",
                        axum::http::HeaderValue::from_static("Bearer"),
                    );
                    return res;
                }
                Some(t) if token.matches(t) => "bearer".to_owned(),
                Some(_) => {
                    tracing::warn!(path, "read refused: wrong bearer token");
                    return error(StatusCode::FORBIDDEN, "forbidden", "wrong bearer token");
                }
            }
        }
        ReadAccess::Off => {
            return error(StatusCode::FORBIDDEN, "forbidden", "the read API is off: serve on a loopback address, or pass --read-api with PAYHOOK_READ_TOKEN");
        }
    };
    let res = next.run(req).await;
    tracing::info!(caller, path, status = res.status().as_u16(), "read");
    res
}

/// A loopback server is reachable by any page the operator's browser opens: a page elsewhere
/// can resolve its own name to 127.0.0.1 (DNS rebinding) and read the answers, or fire
/// requests at it (`<img>` tags). So `Host` must name a loopback address or `localhost`, as
/// the console requires, and a browser's cross-site or same-site fetch is refused before any
/// read.
fn loopback_request(req: &Request<Body>) -> Result<(), &'static str> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let Some(host) = header("host") else {
        return Err("no Host header");
    };
    if !is_loopback_host(host) {
        return Err("Host is not a loopback address or localhost");
    }
    match header("sec-fetch-site") {
        Some("cross-site" | "same-site") => Err("a request from another site"),
        _ => Ok(()),
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn ok(value: &impl Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(body) => (StatusCode::OK, [("content-type", "application/json")], body).into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

fn invalid(field: &str, message: impl Into<String>) -> Response {
    let body = json!({ "error": "invalid_field", "field": field, "message": message.into() });
    (
        StatusCode::BAD_REQUEST,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn failed(e: ReadError) -> Response {
    match e {
        ReadError::NotFound { what } => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        ),
        ReadError::Invalid { field, reason } => invalid(field, format!("{field} {reason}")),
        ReadError::Store(e @ (StoreError::Unavailable { .. } | StoreError::Contended { .. })) => {
            tracing::error!(error = ?e, "read failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "temporarily unable to read; retry",
            )
        }
        // Refused for good (no table, no access): a deployment fault, not "retry".
        ReadError::Store(e @ StoreError::Rejected { .. }) => {
            tracing::error!(error = ?e, "read refused by DynamoDB");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_refused",
                "the store refused the read; an operator must look",
            )
        }
        ReadError::Store(e @ (StoreError::Corrupt { .. } | StoreError::ReadOnly { .. })) => {
            tracing::error!(error = ?e, "read found a malformed item");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "a stored item could not be read",
            )
        }
    }
}

async fn balance<S: Store>(
    State(app): State<Arc<App<S>>>,
    Path(account): Path<String>,
) -> Response {
    let Ok(account) = AccountId::parse(&account) else {
        return invalid("account", "account is not an account id");
    };
    match read::balance(app.pipeline.store(), &account, false).await {
        Ok(view) => ok(&view),
        Err(e) => failed(e),
    }
}

async fn payment<S: Store>(
    State(app): State<Arc<App<S>>>,
    Path((provider, reference)): Path<(String, String)>,
) -> Response {
    let Some(provider_id) = crate::providers::registered(&provider) else {
        return error(
            StatusCode::NOT_FOUND,
            "unknown_provider",
            format!("no provider named {provider:?}"),
        );
    };
    let Ok(reference) = Reference::parse(&reference) else {
        return invalid("reference", "reference is not a payment reference");
    };
    match read::payment(app.pipeline.store(), provider_id, &reference).await {
        Ok(view) => ok(&view),
        Err(e) => failed(e),
    }
}

/// The parameters `GET /deliveries` reads; any other is refused, so a typo (`since=`) is a 400,
/// not a silently unfiltered listing.
const DELIVERY_PARAMS: [&str; 9] = [
    "provider",
    "reference",
    "event_id",
    "order_id",
    "outcome",
    "since_ms",
    "until_ms",
    "limit",
    "cursor",
];

/// A listing by time or outcome (no `reference`, no `event_id`) reads every index shard of
/// every day it spans, so one request must name its window (`since_ms`, which also keeps the
/// filter the same from page to page) and span at most this; older history is another window.
pub const MAX_WINDOW_MS: i64 = 7 * 86_400_000;

/// Parses the query string of `GET /deliveries` into the query [`read::deliveries`] runs.
pub fn delivery_query(raw: Option<&str>, now_ms: i64) -> Result<DeliveryQuery, (String, String)> {
    let params = delivery_params(raw)?;
    let filter = log_filter(&params)?;
    let limit = match params.get("limit") {
        None => read::DEFAULT_PAGE,
        Some(v) => v
            .parse::<usize>()
            .map_err(|_| bad("limit", format!("limit must be 1 to {}", read::MAX_PAGE)))?,
    };
    if filter.reference.is_none() && filter.event_id.is_none() && filter.order_id.is_none() {
        check_window(&filter, now_ms)?;
    }
    Ok(DeliveryQuery {
        filter,
        limit,
        cursor: params.get("cursor").cloned(),
        with_bodies: false,
        with_details: true,
    })
}

/// A refusal of one parameter: the field, and why (the 400's message).
fn bad(field: &str, why: String) -> (String, String) {
    (field.to_owned(), why)
}

/// The query's parameters by name, refusing unknown and repeated ones: a typo or a repeat
/// would otherwise silently widen or change the listing.
fn delivery_params(raw: Option<&str>) -> Result<BTreeMap<&'static str, String>, (String, String)> {
    let pairs: Vec<(String, String)> =
        serde_urlencoded_pairs(raw.unwrap_or("")).map_err(|m| ("query".to_owned(), m))?;
    let mut params: BTreeMap<&'static str, String> = BTreeMap::new();
    for (k, v) in &pairs {
        let Some(name) = DELIVERY_PARAMS.iter().find(|p| **p == k.as_str()) else {
            return Err((
                k.clone(),
                format!(
                    "unknown parameter {k:?}; known: {}",
                    DELIVERY_PARAMS.join(", ")
                ),
            ));
        };
        if params.insert(name, v.clone()).is_some() {
            return Err((k.clone(), format!("{k} given twice")));
        }
    }
    Ok(params)
}

/// The filter the parameters name, each value parsed into its domain type here, so a bad
/// value is a 400 naming its field rather than an empty listing.
fn log_filter(params: &BTreeMap<&'static str, String>) -> Result<LogFilter, (String, String)> {
    let int = |field: &'static str| -> Result<Option<i64>, (String, String)> {
        params
            .get(field)
            .map(|v| {
                v.parse::<i64>()
                    .map_err(|_| bad(field, format!("{field} must be an integer (epoch ms)")))
            })
            .transpose()
    };
    Ok(LogFilter {
        provider: params
            .get("provider")
            .map(|p| {
                crate::providers::registered(p)
                    .ok_or_else(|| bad("provider", format!("unknown provider {p:?}")))
            })
            .transpose()?,
        reference: params
            .get("reference")
            .map(|r| Reference::parse(r).map_err(|e| bad("reference", format!("reference {e}"))))
            .transpose()?,
        event_id: params.get("event_id").filter(|e| !e.is_empty()).cloned(),
        order_id: params.get("order_id").filter(|e| !e.is_empty()).cloned(),
        outcome: params
            .get("outcome")
            .map(|o| {
                Outcome::parse(o).ok_or_else(|| bad("outcome", format!("unknown outcome {o:?}")))
            })
            .transpose()?,
        since_ms: int("since_ms")?,
        until_ms: int("until_ms")?,
    })
}

/// A listing by time or outcome reads every index shard of every day it spans, so it must
/// name its window and keep it within [`MAX_WINDOW_MS`] (an open `until_ms` ends at `now_ms`).
fn check_window(filter: &LogFilter, now_ms: i64) -> Result<(), (String, String)> {
    let Some(since) = filter.since_ms else {
        return Err(bad(
            "since_ms",
            "since_ms is required unless reference or event_id is given".to_owned(),
        ));
    };
    if filter.until_ms.unwrap_or(now_ms).saturating_sub(since) > MAX_WINDOW_MS {
        return Err(bad(
            "since_ms",
            format!(
                "a listing by time or outcome spans at most {} days: set until_ms, or page through older windows",
                MAX_WINDOW_MS / 86_400_000
            ),
        ));
    }
    Ok(())
}

/// `application/x-www-form-urlencoded` pairs, in order (repeats kept, so they can be refused).
fn serde_urlencoded_pairs(raw: &str) -> Result<Vec<(String, String)>, String> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(
        &format!("/?{raw}")
            .parse::<axum::http::Uri>()
            .map_err(|e| e.to_string())?,
    )
    .map(|q| q.0)
    .map_err(|e| e.body_text())
}

async fn deliveries<S: Store>(State(app): State<Arc<App<S>>>, RawQuery(raw): RawQuery) -> Response {
    let query = match delivery_query(raw.as_deref(), crate::domain::now_ms()) {
        Ok(q) => q,
        Err((field, message)) => return invalid(&field, message),
    };
    match read::deliveries(app.pipeline.store(), &query).await {
        Ok(page) => ok(&page),
        Err(e) => failed(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for ok in [
            "127.0.0.1:8080",
            "localhost:1",
            "[::1]:9",
            "127.9.9.9",
            "LOCALHOST",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "[::2]:9",
            "",
            "10.0.0.1:80",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn tokens_match_only_themselves_and_short_ones_are_refused() {
        let t = ReadToken::new("a-long-enough-read-token-0123").unwrap();
        assert!(t.matches("a-long-enough-read-token-0123"));
        assert!(!t.matches("a-long-enough-read-token-0124"));
        assert!(!t.matches(""));
        assert!(ReadToken::new("short").is_none());
        assert_eq!(format!("{t:?}"), "ReadToken(<redacted>)");
    }

    #[test]
    fn delivery_queries_parse_and_refuse_unknown_or_repeated_parameters() {
        let now = 1_764_670_000_000;
        let q = |raw: &str| delivery_query(Some(raw), now);
        let field = |raw: &str| q(raw).unwrap_err().0;
        let got = q("reference=pay_1&outcome=failed&since_ms=5&limit=7").unwrap();
        assert_eq!(
            got.filter.reference.as_ref().map(|r| r.as_str()),
            Some("pay_1")
        );
        assert_eq!(got.filter.outcome, Some(Outcome::Failed));
        assert_eq!((got.filter.since_ms, got.limit), (Some(5), 7));
        assert_eq!(q("reference=r").unwrap().limit, read::DEFAULT_PAGE);
        assert_eq!(field("since=5"), "since");
        assert_eq!(field("reference=r&limit=1&limit=2"), "limit");
        assert_eq!(field("limit=x"), "limit");
        assert_eq!(field("outcome=nope"), "outcome");
        assert_eq!(field("provider=nope"), "provider");
        // By time or outcome: a named window of at most a week.
        assert_eq!(field("outcome=failed"), "since_ms");
        assert_eq!(delivery_query(None, now).unwrap_err().0, "since_ms");
        let week_ago = now - MAX_WINDOW_MS;
        assert!(q(&format!("outcome=failed&since_ms={week_ago}")).is_ok());
        assert_eq!(field(&format!("since_ms={}", week_ago - 1)), "since_ms");
        assert!(q(&format!(
            "since_ms={}&until_ms={}",
            week_ago - 5,
            week_ago + 5
        ))
        .is_ok());
        assert!(q("event_id=evt_1").is_ok());
    }
}
