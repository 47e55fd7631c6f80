//! The operations function's entry: a scheduled event runs a reconciliation pass; a direct
//! invocation `{"action":"replay","filter":{…},"dry_run":true}` replays stored deliveries, so
//! an operator can re-drive inside AWS without a laptop.

use serde::Deserialize;
use serde_json::Value;

use super::{HttpProviderApi, ReconcileSettings, Reconciler};
use crate::domain::Reference;
use crate::eventlog::{LogFilter, Outcome};
use crate::metrics::MetricsSink;
use crate::pipeline::{Pipeline, Store};
use crate::providers::Providers;
use crate::replay::{replay, ReplayOptions};

/// The filter of a replay invocation, as JSON.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterJson {
    pub provider: Option<String>,
    pub reference: Option<String>,
    pub event_id: Option<String>,
    pub outcome: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

impl FilterJson {
    pub fn to_filter(&self) -> Result<LogFilter, String> {
        Ok(LogFilter {
            provider: self
                .provider
                .as_deref()
                .map(|p| crate::providers::registered(p).ok_or(format!("unknown provider {p}")))
                .transpose()?,
            reference: self
                .reference
                .as_deref()
                .map(|r| Reference::parse(r).map_err(|e| format!("reference: {e}")))
                .transpose()?,
            event_id: self.event_id.clone(),
            outcome: self
                .outcome
                .as_deref()
                .map(|o| Outcome::parse(o).ok_or(format!("unknown outcome {o}")))
                .transpose()?,
            since_ms: self.since_ms,
            until_ms: self.until_ms,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplayRequest {
    #[allow(dead_code)]
    action: String,
    #[serde(default)]
    filter: FilterJson,
    #[serde(default)]
    dry_run: bool,
    concurrency: Option<usize>,
    max: Option<usize>,
    #[serde(default)]
    include_replays: bool,
    started_by: Option<String>,
}

/// What the operations function needs, built once per process.
pub struct Ops<S> {
    pub pipeline: Pipeline<S>,
    pub providers: Providers,
    pub api: HttpProviderApi,
    pub settings: ReconcileSettings,
    /// Where a pass's EMF line goes: stdout inside Lambda; off outside unless asked, because
    /// there stdout carries the JSON report.
    pub metrics: MetricsSink,
}

/// Milliseconds kept free before the invocation's deadline: the pass stops starting work this
/// long before it, so its report is written and returned.
const DEADLINE_MARGIN_MS: i64 = 5_000;

/// Handles one invocation; `request_id` names who started a replay. `deadline_ms` (epoch ms,
/// inside Lambda) bounds a reconciliation pass.
pub async fn handle<S: Store>(
    ops: &Ops<S>,
    payload: Value,
    request_id: &str,
    deadline_ms: Option<i64>,
) -> Result<Value, String> {
    if payload.get("action").and_then(Value::as_str) == Some("replay") {
        let req: ReplayRequest =
            serde_json::from_value(payload).map_err(|e| format!("bad replay request: {e}"))?;
        let opts = ReplayOptions {
            dry_run: req.dry_run,
            concurrency: req.concurrency.unwrap_or(8).clamp(1, 64),
            started_by: req
                .started_by
                .unwrap_or_else(|| format!("lambda:{request_id}")),
            lease_ms: ops.settings.lease_ms,
            include_replays: req.include_replays,
            max: req.max.unwrap_or(10_000),
        };
        let summary = replay(
            &ops.pipeline,
            &ops.providers,
            &req.filter.to_filter()?,
            &opts,
            |_, _| {},
        )
        .await
        .map_err(|e| e.to_string())?;
        return serde_json::to_value(summary).map_err(|e| e.to_string());
    }
    // Anything else (the EventBridge schedule) runs one reconciliation pass.
    let mut settings = ops.settings;
    if let Some(deadline) = deadline_ms {
        settings.budget_ms = settings
            .budget_ms
            .min(deadline - crate::domain::now_ms() - DEADLINE_MARGIN_MS)
            .max(0);
    }
    let reconciler = Reconciler {
        pipeline: &ops.pipeline,
        providers: &ops.providers,
        api: &ops.api,
        settings,
    };
    let report = reconciler.run().await.map_err(|e| e.to_string())?;
    emit_report_metrics(&report, ops.metrics);
    serde_json::to_value(report).map_err(|e| e.to_string())
}

/// One EMF line with the pass's counts, namespace `payhook`, so alarms can watch
/// `ReconcileNeedsHuman`; to `sink` (nothing is formatted when it is off).
fn emit_report_metrics(report: &super::Report, sink: MetricsSink) {
    if sink == MetricsSink::Off {
        return;
    }
    let line = serde_json::json!({
        "_aws": {
            "Timestamp": crate::domain::now_ms(),
            "CloudWatchMetrics": [{
                "Namespace": "payhook",
                "Dimensions": [[]],
                "Metrics": [
                    {"Name": "ReconcileCompleted", "Unit": "Count"},
                    {"Name": "ReconcileStillUnknown", "Unit": "Count"},
                    {"Name": "ReconcileNeedsHuman", "Unit": "Count"},
                    {"Name": "ReconcileWaiting", "Unit": "Count"},
                    {"Name": "ReconcileAbandoned", "Unit": "Count"},
                    {"Name": "ReconcileDeferred", "Unit": "Count"}
                ]
            }]
        },
        "ReconcileCompleted": report.completed.len(),
        "ReconcileStillUnknown": report.still_unknown.len(),
        "ReconcileNeedsHuman": report.needs_human.len(),
        "ReconcileWaiting": report.waiting.len(),
        "ReconcileAbandoned": report.abandoned.len(),
        "ReconcileDeferred": report.deferred.len(),
    });
    sink.write_line(line.to_string());
}
