//! Audit lines: one structured log line per operator action (a replay, a reconciliation pass
//! run by hand or by the schedule, ledger layout growth, a payment registration), saying who,
//! what, when and how it ended, at target `payhook::audit` (JSON inside Lambda, where
//! `LogFormat: JSON` is set; one line on stderr locally). Who is the local user for the command
//! line (`cli:$USER`) and the invocation inside Lambda (`lambda:{request id}`, or the
//! `started_by` a replay request names): Lambda does not tell a function who invoked it, so the
//! IAM principal of a manual invocation is in CloudTrail's `Invoke` record for that request id.

use serde_json::Value;

/// Writes the audit line of `action` done by `who` on `detail`, ended as `outcome`.
pub fn record(who: &str, action: &str, detail: &Value, outcome: Result<&Value, &str>) {
    let at_ms = crate::domain::now_ms();
    match outcome {
        Ok(result) => tracing::info!(
            target: "payhook::audit",
            who,
            action,
            at_ms,
            detail = %detail,
            outcome = "ok",
            result = %result,
            "audit"
        ),
        Err(error) => tracing::warn!(
            target: "payhook::audit",
            who,
            action,
            at_ms,
            detail = %detail,
            outcome = "error",
            error,
            "audit"
        ),
    }
}
