//! Delivery metrics in CloudWatch Embedded Metric Format (EMF): one JSON line on stdout per
//! delivery, which CloudWatch Logs turns into metrics with no API call and no agent.
//!
//! Namespace `payhook`, dimension `Provider`; each line carries the count `1` of the one metric
//! naming what became of the delivery (`Applied`, `Replayed`, `InFlight`, `Conflict`, `Stale`,
//! `Parked`, `Ignored`, `Failed`), or `Rejected` with a second dimension `Reason` (`signature`,
//! `payload`, `too_large`, `not_configured`), plus `Takeovers` when the attempt took over an
//! expired claim. Sum them per minute to count deliveries.
//!
//! Emitted by the http layer after the pipeline answered, never from the money path, to the
//! [`MetricsSink`] its [`crate::http::App`] names: stdout inside Lambda, where CloudWatch reads
//! it; outside Lambda nowhere unless asked (`payhook serve --metrics emf|stderr`), because
//! there stdout carries a command's results and a line per delivery would bury them.

use std::io::Write;

use crate::domain::ProviderId;
use crate::eventlog::Outcome;

pub const NAMESPACE: &str = "payhook";

/// Where EMF lines go. A process-wide choice, made once at start-up ([`MetricsSink::choose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsSink {
    /// Not written (and not formatted).
    Off,
    /// One line per metric record on stdout: what CloudWatch Logs reads inside Lambda.
    Stdout,
    /// On stderr, beside the logs: to watch them locally while stdout stays for results.
    Stderr,
}

impl MetricsSink {
    /// The sink of a process: what the operator asked for, else stdout inside Lambda (CloudWatch
    /// turns those lines into metrics) and off elsewhere (stdout carries results there).
    pub fn choose(in_lambda: bool, asked: Option<MetricsSink>) -> MetricsSink {
        match asked {
            Some(sink) => sink,
            None if in_lambda => MetricsSink::Stdout,
            None => MetricsSink::Off,
        }
    }

    /// Writes `line` and a newline in a single write, so concurrent deliveries never interleave
    /// within a line. A failed write is ignored: metrics never fail a delivery.
    pub fn write_line(self, mut line: String) {
        line.push('\n');
        let _ = match self {
            MetricsSink::Off => Ok(()),
            MetricsSink::Stdout => std::io::stdout().lock().write_all(line.as_bytes()),
            MetricsSink::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
        };
    }
}

impl std::str::FromStr for MetricsSink {
    type Err = String;

    /// `off`, `emf` (or `stdout`): CloudWatch EMF on stdout, `stderr`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(MetricsSink::Off),
            "emf" | "stdout" => Ok(MetricsSink::Stdout),
            "stderr" => Ok(MetricsSink::Stderr),
            other => Err(format!(
                "unknown metrics sink {other:?}: expected off, emf (stdout) or stderr"
            )),
        }
    }
}

impl std::fmt::Display for MetricsSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MetricsSink::Off => "off",
            MetricsSink::Stdout => "emf",
            MetricsSink::Stderr => "stderr",
        })
    }
}

/// Why a delivery was refused before reaching the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The signature did not verify (401).
    Signature,
    /// The verified body did not map to an event (400).
    Payload,
    /// Over the body limit (413).
    TooLarge,
    /// No secret configured for the provider (503).
    NotConfigured,
    /// The source address is not in the provider's allowlist (403).
    Source,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::Signature => "signature",
            Rejection::Payload => "payload",
            Rejection::TooLarge => "too_large",
            Rejection::NotConfigured => "not_configured",
            Rejection::Source => "source",
        }
    }
}

/// What became of one delivery, as a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The pipeline answered with this outcome; `took_over` when it resumed an expired claim.
    Processed {
        outcome: Outcome,
        took_over: bool,
    },
    Rejected(Rejection),
}

/// The metric name of a pipeline outcome.
pub fn metric_name(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Applied => "Applied",
        Outcome::Replayed => "Replayed",
        Outcome::InFlight => "InFlight",
        Outcome::Conflict => "Conflict",
        Outcome::Stale => "Stale",
        Outcome::Ignored => "Ignored",
        Outcome::Parked => "Parked",
        Outcome::Failed => "Failed",
        Outcome::AlreadyApplied => "AlreadyApplied",
        Outcome::Unassigned => "Unassigned",
    }
}

/// The EMF line for one delivery (no trailing newline). `request_id` is added as a plain
/// property (searchable in Logs Insights, not a dimension: it would explode cardinality).
///
/// Written directly into one string (every name here is a fixed ASCII identifier; only the
/// request id is escaped, by serde_json): building it through a `serde_json::Value` map cost
/// as much as the rest of the handler logic (docs/performance.md).
pub fn emf_line(
    provider: ProviderId,
    result: Disposition,
    timestamp_ms: i64,
    request_id: Option<&str>,
) -> String {
    use std::fmt::Write as _;
    let (names, reason): ([Option<&'static str>; 2], Option<&'static str>) = match result {
        Disposition::Processed { outcome, took_over } => (
            [Some(metric_name(outcome)), took_over.then_some("Takeovers")],
            None,
        ),
        Disposition::Rejected(reason) => ([Some("Rejected"), None], Some(reason.as_str())),
    };
    let mut line = String::with_capacity(256);
    let _ = write!(
        line,
        r#"{{"_aws":{{"Timestamp":{timestamp_ms},"CloudWatchMetrics":[{{"Namespace":"{NAMESPACE}","Dimensions":"#
    );
    line.push_str(if reason.is_some() {
        r#"[["Provider","Reason"]]"#
    } else {
        r#"[["Provider"]]"#
    });
    line.push_str(r#","Metrics":["#);
    for (i, name) in names.iter().flatten().enumerate() {
        if i > 0 {
            line.push(',');
        }
        let _ = write!(line, r#"{{"Name":"{name}","Unit":"Count"}}"#);
    }
    let _ = write!(line, r#"]}}]}},"Provider":"{}""#, provider.as_str());
    if let Some(reason) = reason {
        let _ = write!(line, r#","Reason":"{reason}""#);
    }
    for name in names.iter().flatten() {
        let _ = write!(line, r#","{name}":1"#);
    }
    if let Some(id) = request_id {
        line.push_str(r#","RequestId":"#);
        // A string always serialises; the fallback keeps the line valid JSON regardless.
        line.push_str(&serde_json::to_string(id).unwrap_or_else(|_| "null".to_owned()));
    }
    line.push('}');
    line
}

/// Writes one EMF line to `sink` in a single write; with the sink off, the line is not even
/// formatted. A failed write is ignored: metrics never fail a delivery.
pub fn emit(
    sink: MetricsSink,
    provider: ProviderId,
    result: Disposition,
    timestamp_ms: i64,
    request_id: Option<&str>,
) {
    if sink != MetricsSink::Off {
        sink.write_line(emf_line(provider, result, timestamp_ms, request_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(line: &str) -> Value {
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn metrics_go_to_stdout_in_lambda_and_nowhere_outside_unless_asked() {
        assert_eq!(MetricsSink::choose(true, None), MetricsSink::Stdout);
        assert_eq!(MetricsSink::choose(false, None), MetricsSink::Off);
        for asked in [MetricsSink::Off, MetricsSink::Stdout, MetricsSink::Stderr] {
            assert_eq!(MetricsSink::choose(false, Some(asked)), asked);
            assert_eq!(MetricsSink::choose(true, Some(asked)), asked);
        }
    }

    #[test]
    fn sinks_parse_from_their_flag_values_and_print_back() {
        for sink in [MetricsSink::Off, MetricsSink::Stdout, MetricsSink::Stderr] {
            assert_eq!(sink.to_string().parse::<MetricsSink>(), Ok(sink));
        }
        assert_eq!("emf".parse(), Ok(MetricsSink::Stdout));
        assert_eq!("stdout".parse(), Ok(MetricsSink::Stdout));
        let err = "cloudwatch".parse::<MetricsSink>().unwrap_err();
        assert!(err.contains("off, emf (stdout) or stderr"), "{err}");
    }

    #[test]
    fn an_applied_delivery_is_one_count_under_the_provider_dimension() {
        let v = parse(&emf_line(
            ProviderId::GENERIC,
            Disposition::Processed {
                outcome: Outcome::Applied,
                took_over: false,
            },
            1_764_670_000_123,
            Some("req-1"),
        ));
        assert_eq!(
            v,
            json!({
                "_aws": {
                    "Timestamp": 1_764_670_000_123_i64,
                    "CloudWatchMetrics": [{
                        "Namespace": "payhook",
                        "Dimensions": [["Provider"]],
                        "Metrics": [{ "Name": "Applied", "Unit": "Count" }],
                    }],
                },
                "Provider": "generic",
                "Applied": 1,
                "RequestId": "req-1",
            })
        );
    }

    #[test]
    fn every_outcome_has_its_metric_and_a_takeover_adds_one() {
        for outcome in Outcome::ALL {
            let v = parse(&emf_line(
                ProviderId::STRIPE,
                Disposition::Processed {
                    outcome,
                    took_over: true,
                },
                1,
                None,
            ));
            let name = metric_name(outcome);
            assert_eq!(v[name], 1, "{v}");
            assert_eq!(v["Takeovers"], 1);
            assert_eq!(v["Provider"], "stripe");
            assert!(v.get("RequestId").is_none());
            let metrics = &v["_aws"]["CloudWatchMetrics"][0]["Metrics"];
            assert_eq!(
                metrics,
                &json!([{ "Name": name, "Unit": "Count" }, { "Name": "Takeovers", "Unit": "Count" }])
            );
        }
        let names: std::collections::BTreeSet<_> =
            Outcome::ALL.into_iter().map(metric_name).collect();
        assert_eq!(names.len(), Outcome::ALL.len());
    }

    #[test]
    fn rejections_carry_their_reason_as_a_second_dimension() {
        for (reason, text) in [
            (Rejection::Signature, "signature"),
            (Rejection::Payload, "payload"),
            (Rejection::TooLarge, "too_large"),
            (Rejection::NotConfigured, "not_configured"),
            (Rejection::Source, "source"),
        ] {
            let line = emf_line(ProviderId::PAYSTACK, Disposition::Rejected(reason), 5, None);
            assert!(!line.contains('\n'));
            let v = parse(&line);
            assert_eq!(v["Rejected"], 1);
            assert_eq!(v["Reason"], text);
            let directive = &v["_aws"]["CloudWatchMetrics"][0];
            assert_eq!(directive["Namespace"], "payhook");
            assert_eq!(directive["Dimensions"], json!([["Provider", "Reason"]]));
            assert_eq!(
                directive["Metrics"],
                json!([{ "Name": "Rejected", "Unit": "Count" }])
            );
        }
    }

    #[test]
    fn a_request_id_is_escaped_and_every_line_is_one_json_object() {
        let id = "a\"b\\c\n\u{1}é";
        let line = emf_line(
            ProviderId::FLUTTERWAVE,
            Disposition::Processed {
                outcome: Outcome::Failed,
                took_over: false,
            },
            9,
            Some(id),
        );
        assert!(!line.contains('\n'));
        let v = parse(&line);
        assert_eq!(v["RequestId"], id);
        assert_eq!(v["Failed"], 1);
        assert_eq!(v.as_object().unwrap().len(), 4, "{v}"); // _aws, Provider, Failed, RequestId
    }
}
