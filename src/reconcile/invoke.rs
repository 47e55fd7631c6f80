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
            order_id: None,
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

/// Handles one invocation for `caller` (`lambda:{request id}`, `cli:{user}`): who started a
/// replay (unless the request names one) and who is written in the audit line. `deadline_ms`
/// (epoch ms, inside Lambda) bounds a reconciliation pass.
pub async fn handle<S: Store + Clone>(
    ops: &Ops<S>,
    payload: Value,
    caller: &str,
    deadline_ms: Option<i64>,
) -> Result<Value, String> {
    if payload.get("action").and_then(Value::as_str) == Some("replay") {
        return replay_invocation(ops, payload, caller).await;
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
    let detail = serde_json::json!({ "budget_ms": settings.budget_ms });
    let report = match reconciler.run().await {
        Ok(report) => report,
        Err(e) => {
            crate::audit::record(caller, "reconcile", &detail, Err(&e.to_string()));
            return Err(e.to_string());
        }
    };
    emit_report_metrics(&report, ops.metrics);
    let counts = serde_json::json!({
        "completed": report.completed.len(), "needs_human": report.needs_human.len(),
        "still_unknown": report.still_unknown.len(), "waiting": report.waiting.len(),
        "abandoned": report.abandoned.len(), "deferred": report.deferred,
    });
    crate::audit::record(caller, "reconcile", &detail, Ok(&counts));
    serde_json::to_value(report).map_err(|e| e.to_string())
}

/// `{"action":"replay",…}`: replays the selected deliveries, audited.
async fn replay_invocation<S: Store + Clone>(
    ops: &Ops<S>,
    payload: Value,
    caller: &str,
) -> Result<Value, String> {
    let req: ReplayRequest =
        serde_json::from_value(payload).map_err(|e| format!("bad replay request: {e}"))?;
    let opts = ReplayOptions {
        dry_run: req.dry_run,
        concurrency: req.concurrency.unwrap_or(8).clamp(1, 64),
        started_by: req.started_by.clone().unwrap_or_else(|| caller.to_owned()),
        lease_ms: ops.settings.lease_ms,
        include_replays: req.include_replays,
        max: req.max.unwrap_or(10_000),
    };
    let filter = req.filter.to_filter()?;
    let detail = serde_json::json!({ "filter": format!("{filter:?}"), "dry_run": opts.dry_run, "max": opts.max });
    let summary = replay(&ops.pipeline, &ops.providers, &filter, &opts, |_, _| {})
        .await
        .map_err(|e| e.to_string());
    let summary = match summary.and_then(|s| serde_json::to_value(s).map_err(|e| e.to_string())) {
        Ok(s) => s,
        Err(e) => {
            crate::audit::record(&opts.started_by, "replay", &detail, Err(&e));
            return Err(e);
        }
    };
    crate::audit::record(&opts.started_by, "replay", &detail, Ok(&summary));
    Ok(summary)
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
