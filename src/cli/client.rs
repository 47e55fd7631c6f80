//! Tooling for sending signed webhooks: re-signing sample events and a small HTTP client for the
//! demo. Signing lives here, in tooling, so the function never needs a tolerance bypass.

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::CliError;
use crate::config::Config;
use crate::domain::{now_ms, ProviderId};

/// Headers that sign `body` for `provider` at `now_s` with its first configured secret, as that
/// provider would send them (the adapter signs: [`crate::providers::Provider::sign`]).
/// `event_id` is used only where the scheme signs one (Standard Webhooks).
pub fn sign_headers(
    provider: ProviderId,
    config: &Config,
    body: &[u8],
    event_id: &str,
    now_s: i64,
) -> Result<Vec<(String, String)>, CliError> {
    let (providers, problems) = config.providers();
    if let Some(adapter) = providers.get(provider) {
        return Ok(adapter.sign(body, event_id, now_s));
    }
    Err(match problems.into_iter().find(|(p, _)| *p == provider) {
        Some((_, e)) => CliError::Usage(format!("{provider}: {e}")),
        None => CliError::Usage(format!("no secret configured for {provider}")),
    })
}

/// The provider named by an API Gateway event's path (`/webhooks/{provider}`).
pub fn provider_of(event: &Value) -> Result<ProviderId, CliError> {
    let path = event
        .get("rawPath")
        .and_then(Value::as_str)
        .unwrap_or_default();
    path.strip_prefix("/webhooks/")
        .and_then(crate::providers::registered)
        .ok_or_else(|| {
            CliError::Usage(format!("event path {path:?} is not /webhooks/{{provider}}"))
        })
}

/// A sample API Gateway v2 event under events/, read for sending: the event, the provider its
/// path names, its body, and the body's own `id` (if it has one).
pub struct Sample {
    pub event: Value,
    pub provider: ProviderId,
    pub body: String,
    pub event_id: Option<String>,
}

impl Sample {
    pub fn read(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path)?;
        let event: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))?;
        let provider = provider_of(&event)?;
        let body = event
            .get("body")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let event_id = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|b| b.get("id").and_then(Value::as_str).map(str::to_owned));
        Ok(Sample {
            event,
            provider,
            body,
            event_id,
        })
    }
}

/// Reads an API Gateway v2 event and returns it with fresh signature headers.
pub fn resign_file(path: &Path, config: &Config) -> Result<Value, CliError> {
    let Sample {
        mut event,
        provider,
        body,
        event_id,
    } = Sample::read(path)?;
    let event_id = event_id.unwrap_or_else(|| "msg_sample".to_owned());
    // Signatures inside the body (Adyen's items) first, then the headers over that body.
    let body = match config.providers().0.get(provider) {
        Some(adapter) => adapter
            .sign_body(body.as_bytes())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or(body),
        None => body,
    };
    if let Some(map) = event.as_object_mut() {
        map.insert("body".into(), Value::String(body.clone()));
    }
    let headers = sign_headers(
        provider,
        config,
        body.as_bytes(),
        &event_id,
        now_ms() / 1_000,
    )?;
    if let Some(map) = event.get_mut("headers").and_then(Value::as_object_mut) {
        for (k, v) in headers {
            map.insert(k, Value::String(v));
        }
    }
    Ok(event)
}

/// A response as the demo sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Reply {
    pub status: u16,
    pub replayed: bool,
    pub body: String,
}

/// POSTs `body` with `headers` to `url` over plain HTTP (loopback).
pub async fn post(
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Result<Reply, CliError> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let mut req = http::Request::post(url).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| CliError::Other(e.to_string()))?;
    let res = client
        .request(req)
        .await
        .map_err(|e| CliError::Other(format!("POST {url}: {e}")))?;
    let status = res.status().as_u16();
    let replayed = res
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| CliError::Other(e.to_string()))?
        .to_bytes();
    Ok(Reply {
        status,
        replayed,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}
