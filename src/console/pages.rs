//! The console's pages, each rendered from read-layer views (JSON, whichever the source) into
//! one HTML string. Pure functions: the handlers in `mod.rs` fetch, these draw.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use super::chart::{stacked, Buckets};
use super::html::{badge, enc, esc, money, n, note, payment_link, query, s, table, time};
use crate::eventlog::Outcome;

/// The deliveries listing's filter as typed, with its window pinned to absolute times so every
/// page of one listing asks the same question (paging never skips or repeats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub provider: String,
    pub outcome: String,
    pub reference: String,
    pub event_id: String,
    /// The merchant's order id, as logged with each delivery.
    pub order_id: String,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub limit: usize,
}

impl Filter {
    /// The pairs of this filter in the console's own URLs.
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let t = |v: Option<i64>| v.map(|t| t.to_string()).unwrap_or_default();
        vec![
            ("provider", self.provider.clone()),
            ("outcome", self.outcome.clone()),
            ("reference", self.reference.clone()),
            ("event_id", self.event_id.clone()),
            ("order_id", self.order_id.clone()),
            ("since_ms", t(self.since_ms)),
            ("until_ms", t(self.until_ms)),
            ("limit", self.limit.to_string()),
        ]
    }

    /// The query string the read API (`GET /deliveries`) takes for this filter.
    pub fn api_query(&self, cursor: Option<&str>) -> String {
        let mut pairs = self.pairs();
        pairs.push(("cursor", cursor.unwrap_or_default().to_owned()));
        query(&pairs)
    }

    /// The filter in words, for the replay pages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (name, value) in [
            ("provider", &self.provider),
            ("outcome", &self.outcome),
            ("reference", &self.reference),
            ("event id", &self.event_id),
            ("order id", &self.order_id),
        ] {
            if !value.is_empty() {
                parts.push(format!("{name} {value}"));
            }
        }
        match (self.since_ms, self.until_ms) {
            (Some(a), Some(b)) => parts.push(format!("received {} to {}", time(a), time(b))),
            (Some(a), None) => parts.push(format!("received since {}", time(a))),
            (None, Some(b)) => parts.push(format!("received until {}", time(b))),
            (None, None) => {}
        }
        if parts.is_empty() {
            "every delivery".to_owned()
        } else {
            format!("every delivery with {}", parts.join(", "))
        }
    }

    /// The same filter without its outcome (the window's counts are over every outcome).
    pub fn any_outcome(&self) -> Filter {
        Filter {
            outcome: String::new(),
            ..self.clone()
        }
    }
}

fn input(name: &str, label: &str, value: &str, placeholder: &str) -> String {
    format!(
        r#"<label>{label} <input name="{name}" value="{}" placeholder="{placeholder}"></label>"#,
        esc(value)
    )
}

/// The filter form as the operator filled it in (an error page shows it too, so nothing typed
/// is lost): a window the URL pins by `since_ms`/`until_ms` (a later page) is shown as a time.
pub fn filter_form(asked: &BTreeMap<String, String>) -> String {
    let get = |k: &str| asked.get(k).map(String::as_str).unwrap_or_default();
    let when = |typed: &str, ms: &str| match (get(typed), get(ms).parse::<i64>()) {
        ("", Ok(ms)) => time(ms),
        (text, _) => text.to_owned(),
    };
    let mut body = String::from(r#"<form method="get" action="/deliveries" class="filters">"#);
    body.push_str(&input("provider", "provider", get("provider"), "any"));
    body.push_str(&outcome_select(get("outcome")));
    body.push_str(&input("reference", "reference", get("reference"), "any"));
    body.push_str(&input("event_id", "event id", get("event_id"), "any"));
    body.push_str(&input("order_id", "order id", get("order_id"), "any"));
    let since = when("since", "since_ms");
    body.push_str(&input(
        "since",
        "since",
        &since,
        "24h, 2026-12-01, RFC 3339",
    ));
    body.push_str(&input("until", "until", &when("until", "until_ms"), "now"));
    body.push_str(r#"<button type="submit">Filter</button></form>"#);
    body
}

fn outcome_select(current: &str) -> String {
    let mut out =
        String::from(r#"<label>outcome <select name="outcome"><option value="">any</option>"#);
    for o in Outcome::ALL {
        let sel = if o.as_str() == current {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, r#"<option value="{0}"{sel}>{0}</option>"#, o.as_str());
    }
    out.push_str("</select></label>");
    out
}

/// The CSRF token as a hidden field of a form that writes.
pub fn csrf_field(token: &str) -> String {
    format!(
        r#"<input type="hidden" name="csrf" value="{}">"#,
        esc(token)
    )
}

fn hidden_filter(f: &Filter) -> String {
    f.pairs()
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!(r#"<input type="hidden" name="{k}" value="{}">"#, esc(v)))
        .collect()
}

/// One delivery as a table row.
fn delivery_row(d: &Value) -> Vec<String> {
    let reference = s(d, "reference");
    vec![
        format!(
            r#"<a class="delivery" href="/deliveries/{}">{}</a>"#,
            enc(s(d, "id")),
            esc(&time(n(d, "received_at_ms")))
        ),
        esc(s(d, "provider")),
        esc(s(d, "event_type")),
        esc(s(d, "event_id")),
        if reference.is_empty() {
            String::new()
        } else {
            payment_link(s(d, "provider"), reference)
        },
        amount_of(d),
        account_of(d),
        badge(s(d, "outcome")),
        n(d, "http_status").to_string(),
    ]
}

/// The money a delivery names, or nothing (a state change; a row logged before amounts were
/// kept).
fn amount_of(d: &Value) -> String {
    match d.get("money") {
        Some(m) => money(n(m, "amount"), s(m, "currency")),
        None => String::new(),
    }
}

fn account_of(d: &Value) -> String {
    match s(d, "account") {
        "" => String::new(),
        a => account_link(a),
    }
}

const DELIVERY_COLUMNS: [&str; 9] = [
    "received",
    "provider",
    "type",
    "event id",
    "reference",
    "amount",
    "account",
    "outcome",
    "HTTP",
];

/// The deliveries listing: filters, the window's counts per outcome, one page, paging links, and
/// (with a store) the filtered replay's dry run.
pub fn deliveries(
    f: &Filter,
    page: &Value,
    counts: &BTreeMap<String, u64>,
    counted_all: bool,
    csrf: Option<&str>,
    asked: &BTreeMap<String, String>,
) -> String {
    let mut body = filter_form(asked);
    let window = match (f.since_ms, f.until_ms) {
        (Some(a), Some(b)) => format!("{} to {}", time(a), time(b)),
        (Some(a), None) => format!("since {}", time(a)),
        _ => "all time".to_owned(),
    };
    let _ = write!(body, r#"<p class="window">window: {}</p>"#, esc(&window));
    body.push_str(r#"<ul id="counts" class="counts">"#);
    for (outcome, count) in counts {
        let _ = write!(
            body,
            r#"<li>{} <span class="count" data-outcome="{}">{count}</span></li>"#,
            badge(outcome),
            esc(outcome)
        );
    }
    let total: u64 = counts.values().sum();
    let _ = write!(
        body,
        r#"<li>total <span class="count" id="total">{total}</span>{}</li></ul>"#,
        if counted_all {
            ""
        } else {
            " (counted the first ones only)"
        }
    );
    let rows: Vec<Vec<String>> = page["deliveries"]
        .as_array()
        .map(|l| l.iter().map(delivery_row).collect())
        .unwrap_or_default();
    if rows.is_empty() {
        body.push_str(&note("empty", "no delivery matches"));
    }
    body.push_str(&table("deliveries", &DELIVERY_COLUMNS, &rows));
    body.push_str(r#"<nav class="paging">"#);
    let _ = write!(
        body,
        r#"<a id="first-page" href="/deliveries?{}">first page</a>"#,
        f.api_query(None)
    );
    if let Some(next) = page["next_cursor"].as_str() {
        let _ = write!(
            body,
            r#" <a id="next-page" href="/deliveries?{}">next page</a>"#,
            f.api_query(Some(next))
        );
    }
    body.push_str("</nav>");
    if let Some(token) = csrf {
        // The whole selection, not the page: said with its size.
        let selected: u64 = match f.outcome.as_str() {
            "" => counts.values().sum(),
            o => counts.get(o).copied().unwrap_or(0),
        };
        let more = if counted_all { "" } else { "+" };
        let _ = write!(
            body,
            r#"<form method="post" action="/replay" class="replay">{}{}<input type="hidden" name="step" value="preview"><button id="replay-filtered" type="submit">Replay all {selected}{more} deliveries this filter selects, not only this page (dry run first)</button></form>"#,
            csrf_field(token),
            hidden_filter(f)
        );
    }
    body
}

fn pretty(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| body.to_owned())
}

fn facts(rows: &[(&str, String)]) -> String {
    let mut out = String::from(r#"<dl class="facts">"#);
    for (k, v) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    }
    out.push_str("</dl>");
    out
}

/// One delivery: its facts, the answer, the raw body, links, and (with a store) replay.
pub fn delivery(d: &Value, csrf: Option<&str>) -> String {
    let provider = s(d, "provider");
    let reference = s(d, "reference");
    let mut rows = vec![
        ("id", esc(s(d, "id"))),
        ("provider", esc(provider)),
        ("event id", esc(s(d, "event_id"))),
        ("event type", esc(s(d, "event_type"))),
        ("received", esc(&time(n(d, "received_at_ms")))),
        ("outcome", badge(s(d, "outcome"))),
        ("HTTP answer", n(d, "http_status").to_string()),
        ("key", esc(s(d, "key"))),
    ];
    if !reference.is_empty() {
        rows.push(("payment", payment_link(provider, reference)));
    }
    for (field, label) in [("replay_of", "replay of"), ("started_by", "started by")] {
        if !s(d, field).is_empty() {
            rows.push((label, esc(s(d, field))));
        }
    }
    if let Some(r) = d.get("redriven").and_then(Value::as_str) {
        rows.push(("re-driven", badge(r)));
    }
    for (label, value) in [("amount", amount_of(d)), ("account", account_of(d))] {
        if !value.is_empty() {
            rows.push((label, value));
        }
    }
    if let Some(order) = d.get("order_id").and_then(Value::as_str) {
        let link = format!(
            r#"<a href="/search?{}">{}</a>"#,
            query(&[("q", order.to_owned())]),
            esc(order)
        );
        rows.push(("order id (as the payload names it)", link));
    }
    let mut body = facts(&rows);
    let _ = write!(
        body,
        r#"<p><a id="same-event" href="/deliveries?{}">deliveries of the same event</a></p>"#,
        query(&[
            ("provider", provider.to_owned()),
            ("event_id", s(d, "event_id").to_owned())
        ])
    );
    if let Some(answer) = d.get("answer").and_then(Value::as_str) {
        let _ = write!(
            body,
            r#"<h2>Answer</h2><p class="hint">HTTP {} with this body, as sent</p><pre id="answer-body">{}</pre>"#,
            n(d, "http_status"),
            esc(answer)
        );
    }
    if let Some(headers) = d.get("headers").and_then(Value::as_array) {
        let lines: Vec<String> = headers
            .iter()
            .filter_map(|h| Some(format!("{}: {}", h.get(0)?.as_str()?, h.get(1)?.as_str()?)))
            .collect();
        let _ = write!(
            body,
            r#"<h2>Verified headers</h2><p class="hint">what the signature check read; signature and secret values masked</p><pre id="verified-headers">{}</pre>"#,
            esc(&lines.join("\n"))
        );
    }
    match d.get("raw_body").and_then(Value::as_str) {
        Some(raw) => {
            // Exactly as received (the bytes its signature was checked on), and pretty beside.
            let _ = write!(
                body,
                r#"<h2>Raw body</h2><p class="hint">exactly as received: the bytes the signature was verified on</p><pre id="raw-body">{}</pre><details><summary>pretty</summary><pre id="pretty-body">{}</pre></details>"#,
                esc(raw),
                esc(&pretty(raw))
            );
        }
        None => body.push_str(&note(
            "nobody",
            "the read API never serves provider payloads: run the console on the store to see the body",
        )),
    }
    if let Some(token) = csrf {
        let _ = write!(
            body,
            r#"<form method="post" action="/replay" class="replay">{}<input type="hidden" name="delivery" value="{}"><input type="hidden" name="step" value="preview"><button id="replay-one" type="submit">Replay this delivery (dry run first)</button></form>"#,
            csrf_field(token),
            esc(s(d, "id"))
        );
    }
    body
}

/// A payment: money, the state timeline in order, refunds, disputes, its deliveries.
pub fn payment(v: &Value) -> String {
    let p = &v["payment"];
    let currency = s(p, "currency");
    let amount = p.get("amount_minor").and_then(Value::as_i64);
    let shown = |minor: i64| {
        if currency.is_empty() {
            minor.to_string()
        } else {
            money(minor, currency)
        }
    };
    let account = s(p, "account");
    let mut body = facts(&[
        ("provider", esc(s(p, "provider"))),
        ("reference", esc(s(p, "reference"))),
        (
            "status",
            format!(r#"<span id="status">{}</span>"#, esc(s(p, "status"))),
        ),
        (
            "account",
            if account.is_empty() {
                "none yet".into()
            } else {
                format!(
                    r#"<a href="/accounts/{}">{}</a>"#,
                    enc(account),
                    esc(account)
                )
            },
        ),
        (
            "amount",
            amount.map(shown).unwrap_or_else(|| "unknown".into()),
        ),
        ("refunded", shown(n(p, "refunded_minor"))),
        ("disputed", shown(n(p, "disputed_minor"))),
        ("paid by", esc(s(p, "paid_key"))),
    ]);
    body.push_str("<h2>Timeline</h2><ol id=\"timeline\">");
    for h in p["history"].as_array().into_iter().flatten() {
        let _ = write!(
            body,
            r#"<li><time>{}</time> <strong>{}</strong> {}</li>"#,
            esc(&time(n(h, "at_ms"))),
            esc(s(h, "status")),
            esc(s(h, "note"))
        );
    }
    body.push_str("</ol>");
    let keys = |field: &str| -> Vec<Vec<String>> {
        p[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(|k| vec![esc(k)])
            .collect()
    };
    body.push_str("<h2>Refunds</h2>");
    body.push_str(&table("refunds", &["refund key"], &keys("refund_keys")));
    let reversed = keys("reversed_refund_keys");
    if !reversed.is_empty() {
        body.push_str(&table("reversed", &["refund reversed"], &reversed));
    }
    let disputes: Vec<Vec<String>> = p["disputes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            vec![
                esc(s(d, "dispute")),
                esc(s(d, "status")),
                shown(n(d, "withdrawn_minor")),
                shown(n(d, "reinstated_minor")),
            ]
        })
        .collect();
    body.push_str("<h2>Disputes</h2>");
    body.push_str(&table(
        "disputes",
        &["dispute", "status", "withdrawn", "reinstated"],
        &disputes,
    ));
    body.push_str("<h2>Deliveries</h2>");
    let rows: Vec<Vec<String>> = v["deliveries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(delivery_row)
        .collect();
    body.push_str(&table("payment-deliveries", &DELIVERY_COLUMNS, &rows));
    if v["next_cursor"].is_string() {
        let _ = write!(
            body,
            r#"<p><a href="/deliveries?{}">all deliveries of this payment</a></p>"#,
            query(&[
                ("provider", s(p, "provider").to_owned()),
                ("reference", s(p, "reference").to_owned())
            ])
        );
    }
    body
}

/// The provider named by a movement key (`{provider}:{operation}:{reference}`).
fn provider_of_key(key: &str) -> &str {
    key.split(':').next().unwrap_or_default()
}

/// An account: balances per currency, and its entries with a running sum per currency.
/// Entries an account page lists; older ones are a link away.
pub const ENTRY_ROWS: usize = 100;

/// An entry's place in time order, as the account page's cursor: `{at_ms}:{key}`.
fn entry_position(p: &Value) -> (i64, String) {
    (
        p["at_ms"].as_i64().unwrap_or(n(p, "posted_at_ms")),
        s(p, "key").to_owned(),
    )
}

/// An account: balances, and its entries newest first, [`ENTRY_ROWS`] a page (`before`: the
/// position of the last entry of the page before), each with the running sum after it. The
/// sums start from the balance less every entry listed (zero when the two reads agree, which
/// [`crate::read::balance`] makes them), so they end at the balance shown.
pub fn account(v: &Value, before: Option<&str>) -> String {
    let mut body = String::from(
        r#"<table id="balances"><thead><tr><th>currency</th><th>balance</th></tr></thead><tbody>"#,
    );
    for (currency, minor) in v["balances"].as_object().into_iter().flatten() {
        let minor = minor.as_i64().unwrap_or_default();
        let _ = write!(
            body,
            r#"<tr><td>{}</td><td class="balance" data-currency="{0}" data-minor="{minor}">{}</td></tr>"#,
            esc(currency),
            esc(&money(minor, currency))
        );
    }
    let _ = write!(
        body,
        "</tbody></table><p>{} entries, as of {}</p>",
        n(v, "entries"),
        esc(&time(n(v, "as_of_ms")))
    );
    let Some(postings) = v["postings"].as_array() else {
        body.push_str(&note(
            "noentries",
            "the read API serves balances, not entries: run the console on the store to list them",
        ));
        return body;
    };
    let mut sorted: Vec<&Value> = postings.iter().collect();
    sorted.sort_by_key(|p| entry_position(p));
    // Opening sums: the balance less every entry listed.
    let mut running: BTreeMap<String, i64> = BTreeMap::new();
    for (currency, minor) in v["balances"].as_object().into_iter().flatten() {
        running.insert(currency.clone(), minor.as_i64().unwrap_or_default());
    }
    for p in &sorted {
        let sum = running.entry(s(p, "currency").to_owned()).or_default();
        *sum = sum.saturating_sub(n(p, "amount_minor"));
    }
    let mut rows: Vec<(String, Vec<String>)> = sorted
        .iter()
        .map(|p| {
            let currency = s(p, "currency");
            let amount = n(p, "amount_minor");
            let sum = running.entry(currency.to_owned()).or_default();
            *sum = sum.saturating_add(amount);
            let (at, key) = entry_position(p);
            let cells = vec![
                esc(&time(at)),
                esc(s(p, "key")),
                payment_link(provider_of_key(s(p, "key")), s(p, "reference")),
                esc(&money(amount, currency)),
                format!(
                    r#"<span class="running">{}</span>"#,
                    esc(&money(*sum, currency))
                ),
            ];
            (format!("{at:013}:{key}"), cells)
        })
        .collect();
    rows.reverse();
    let total = rows.len();
    let start = before.map_or(0, |b| {
        rows.iter().take_while(|(pos, _)| pos.as_str() >= b).count()
    });
    let page: Vec<(String, Vec<String>)> = rows.into_iter().skip(start).take(ENTRY_ROWS).collect();
    let _ = write!(
        body,
        r#"<h2>Entries</h2><p id="entries-shown">newest first: {} to {} of {total}</p>"#,
        (start + 1).min(total),
        start + page.len()
    );
    let older = page.last().map(|(pos, _)| pos.clone());
    let cells: Vec<Vec<String>> = page.into_iter().map(|(_, c)| c).collect();
    body.push_str(&table(
        "entries",
        &["at", "key", "payment", "amount", "running sum after"],
        &cells,
    ));
    if let (Some(pos), true) = (older, start + cells.len() < total) {
        let _ = write!(
            body,
            r#"<nav class="paging"><a id="older-entries" href="/accounts/{}?{}">older entries</a></nav>"#,
            enc(s(v, "account")),
            query(&[("before", pos)])
        );
    }
    body
}

/// What to run about a delivery that needs attention.
fn resolve_command(d: &Value) -> String {
    let (provider, reference) = (s(d, "provider"), s(d, "reference"));
    match s(d, "outcome") {
        "unassigned" => format!(
            "payhook payments expect --provider {provider} --reference {reference} --account <ACCOUNT> … && payhook replay --outcome unassigned"
        ),
        "parked" => format!(
            "waits for its payment; once {provider}/{reference} is PAID: payhook replay --outcome parked --reference {reference}"
        ),
        "failed" => "payhook reconcile (re-drives failed deliveries), or payhook replay --outcome failed".into(),
        _ => format!("payhook payments show --provider {provider} --reference {reference}"),
    }
}

/// Needs attention: deliveries reconciliation would hand a human (by outcome, each with the
/// command that resolves it), and payments open past the threshold.
/// One outcome's deliveries still waiting for a person.
pub struct Waiting {
    pub outcome: Outcome,
    pub list: Vec<Value>,
    /// Every delivery of the window was read (otherwise the count is a lower bound: "N+").
    pub complete: bool,
    /// How many read were left out because their key has since been finished; `None` when the
    /// source cannot tell (they are all listed).
    pub settled: Option<usize>,
}

pub fn attention(
    by_outcome: &[Waiting],
    open: Option<&[Value]>,
    threshold_s: i64,
    payouts: Option<&[Value]>,
) -> String {
    let mut body = String::new();
    for w in by_outcome {
        let (outcome, list) = (&w.outcome, &w.list);
        let more = if w.complete { "" } else { "+" };
        let _ = write!(
            body,
            r#"<h2>{} <span class="count" data-outcome="{}">{}{more}</span></h2>"#,
            badge(outcome.as_str()),
            outcome.as_str(),
            list.len()
        );
        if !w.complete {
            let _ = write!(
                body,
                r#"<p class="more">More than the first deliveries read: <a href="/deliveries?outcome={0}&amp;since=7d">page through every {0} delivery</a>.</p>"#,
                outcome.as_str()
            );
        }
        match w.settled {
            Some(0) => {}
            Some(n) => {
                let _ = write!(
                    body,
                    r#"<p class="settled" data-outcome="{}">{n} finished since (by a replay, a redelivery or reconciliation): not listed.</p>"#,
                    outcome.as_str()
                );
            }
            None => body.push_str(&note(
                "nosettled",
                "this source cannot tell which of these were finished since: run the console on the store",
            )),
        }
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|d| {
                let mut row = delivery_row(d);
                row.push(format!("<code>{}</code>", esc(&resolve_command(d))));
                row
            })
            .collect();
        let mut columns = DELIVERY_COLUMNS.to_vec();
        columns.push("resolve");
        body.push_str(&table(
            &format!("attention-{}", outcome.as_str()),
            &columns,
            &rows,
        ));
    }
    let _ = write!(body, "<h2>Payments open longer than {threshold_s} s</h2>");
    match open {
        None => body.push_str(&note(
            "noopen",
            "the read API does not list open payments: run the console on the store",
        )),
        Some(list) => {
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|p| {
                    vec![
                        payment_link(s(p, "provider"), s(p, "reference")),
                        esc(s(p, "provider")),
                        esc(s(p, "status")),
                        esc(&time(n(p, "updated_at_ms"))),
                        "<code>payhook reconcile</code> (asks the provider)".into(),
                    ]
                })
                .collect();
            body.push_str(&table(
                "open-payments",
                &["payment", "provider", "status", "last change", "resolve"],
                &rows,
            ));
        }
    }
    body.push_str("<h2>Payouts that need a person</h2>");
    match payouts {
        None => body.push_str(&note(
            "nopayouts",
            "the read API does not list payouts: run the console on the store",
        )),
        Some(list) => {
            let rows: Vec<Vec<String>> = list
                .iter()
                .map(|p| {
                    vec![
                        payout_link(s(p, "payout")),
                        esc(s(p, "provider")),
                        account_link(s(p, "account")),
                        esc(&money(n(p, "amount"), s(p, "currency"))),
                        esc(s(p, "status")),
                        n(p, "sends").to_string(),
                        esc(s(p, "why")),
                        format!(
                            "<code>ask {} about reference {}; payhook payouts show {}</code>",
                            esc(s(p, "provider")),
                            esc(s(p, "payout")),
                            esc(s(p, "payout"))
                        ),
                    ]
                })
                .collect();
            body.push_str(&table(
                "unsettled-payouts",
                &[
                    "payout", "provider", "account", "amount", "status", "sends", "why", "resolve",
                ],
                &rows,
            ));
        }
    }
    body
}

use crate::read::MoneyByDay;

/// Traffic: the stacked chart, the duplicate share, money in and out per day.
pub fn traffic(
    window: &str,
    buckets: &Buckets,
    counted_all: bool,
    money_by_day: Option<&(MoneyByDay, bool)>,
) -> String {
    let mut body = String::from(r#"<nav class="windows">"#);
    for w in ["hour", "day"] {
        let class = if w == window {
            r#" class="active""#
        } else {
            ""
        };
        let _ = write!(
            body,
            r#"<a href="/traffic?window={w}"{class}>last {w}</a> "#
        );
    }
    body.push_str("</nav>");
    let minutes = buckets.width_ms / 60_000;
    let _ = write!(
        body,
        "<p>deliveries per {minutes} minute{} by outcome, oldest left; from {}</p>",
        if minutes == 1 { "" } else { "s" },
        esc(&time(buckets.start_ms))
    );
    let order: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    body.push_str(&stacked(buckets, &order));
    body.push_str(r#"<ul class="legend">"#);
    for o in &order {
        let _ = write!(body, "<li>{}</li>", badge(o));
    }
    body.push_str("</ul>");
    let total = buckets.total();
    let duplicates: u64 = buckets
        .counts
        .iter()
        .filter_map(|b| b.get(Outcome::Replayed.as_str()))
        .sum();
    let share = if total == 0 {
        0.0
    } else {
        duplicates as f64 * 100.0 / total as f64
    };
    let _ = write!(
        body,
        r#"<p id="duplicates">duplicates (replayed): {duplicates} of {total} deliveries, {share:.1}%{}</p>"#,
        if counted_all {
            ""
        } else {
            " (counted the first ones only)"
        }
    );
    let _ = write!(
        body,
        "<h2>Money in and out in the last {}, by UTC day</h2>",
        esc(window)
    );
    match money_by_day {
        None => body.push_str(&note(
            "nomoney",
            "amounts are read from the deliveries' bodies, which the read API never serves: run the console on the store",
        )),
        Some((m, complete)) => {
            if !complete {
                body.push_str(&note(
                    "money-partial",
                    "partial: more applied deliveries than this page reads bodies for; the sums below count the first ones only (a currency may be missing)",
                ));
            }
            let rows: Vec<Vec<String>> = m
                .iter()
                .map(|((day, currency), (inflow, outflow))| {
                    vec![
                        esc(day),
                        esc(currency),
                        esc(&money(*inflow, currency)),
                        esc(&money(*outflow, currency)),
                    ]
                })
                .collect();
            body.push_str(&table("money", &["day (UTC)", "currency", "in", "out"], &rows));
        }
    }
    body
}

/// The replay's dry run, with the form that confirms it.
pub fn replay_preview(what: &str, prediction: &Value, confirm_fields: &str, csrf: &str) -> String {
    let pretty = serde_json::to_string_pretty(prediction).unwrap_or_default();
    format!(
        r#"<p>Dry run of a replay of {}: nothing was written.</p><pre id="prediction">{}</pre>
<form method="post" action="/replay">{}{confirm_fields}<input type="hidden" name="step" value="confirm"><button id="confirm" type="submit">Confirm replay</button></form>"#,
        esc(what),
        esc(&pretty),
        csrf_field(csrf)
    )
}

/// What the confirmed replay did: the outcomes (and money) first, the full record below.
pub fn replay_done(what: &str, result: &Value) -> String {
    let mut body = format!("<p>Replayed {}.</p>", esc(what));
    if let Some(outcome) = result.get("outcome").and_then(Value::as_str) {
        body.push_str(&facts(&[
            ("outcome", badge(outcome)),
            ("HTTP answer", n(result, "status").to_string()),
        ]));
    }
    if let Some(results) = result.get("results").and_then(Value::as_object) {
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|(o, count)| vec![badge(o), count.to_string()])
            .collect();
        body.push_str(&table("replay-results", &["outcome", "deliveries"], &rows));
    }
    if let Some(moves) = result.get("moves").and_then(Value::as_object) {
        let rows: Vec<Vec<String>> = moves
            .iter()
            .map(|(k, v)| vec![esc(k), v.as_i64().unwrap_or_default().to_string()])
            .collect();
        if !rows.is_empty() {
            body.push_str(&table(
                "replay-moves",
                &["account currency", "minor units"],
                &rows,
            ));
        }
    }
    let pretty = serde_json::to_string_pretty(result).unwrap_or_default();
    let _ = write!(
        body,
        r#"<details open><summary>the full record</summary><pre id="result" class="wrap">{}</pre></details><p><a href="/deliveries">back to the deliveries</a></p>"#,
        esc(&pretty)
    );
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    /// #33 item 3: sums cut short say so (a currency whose deliveries were not read is
    /// missing), and the title names the window it covers.
    #[test]
    fn money_counted_from_the_first_bodies_only_says_it_is_partial() {
        let mut m = MoneyByDay::new();
        m.insert(("2026-12-05".into(), "NGN".into()), (10_000, 0));
        let b = Buckets::new(0, 60_000, 60);
        let whole = traffic("hour", &b, true, Some(&(m.clone(), true)));
        let cut = traffic("hour", &b, true, Some(&(m, false)));
        assert!(!whole.contains("money-partial"));
        assert!(cut.contains("money-partial"), "{cut}");
        assert!(whole.contains("Money in and out in the last hour, by UTC day"));
    }
}

/// A payment reference with no payment item: why that happens, what to run, and what arrived.
pub fn no_payment(provider: &str, reference: &str, deliveries: &[Value]) -> String {
    let mut body = note(
        "no-payment",
        &format!("payhook has no payment {provider}/{reference}: neither its success nor a registration has arrived."),
    );
    let outcomes: Vec<&str> = deliveries.iter().map(|d| s(d, "outcome")).collect();
    let advice = if outcomes.contains(&"parked") {
        format!("A refund or dispute of it is parked: it applies when the payment is paid (its credit takes it first). If the provider says it is paid, `payhook reconcile` asks it; or `payhook replay --outcome parked --reference {reference}` once it is.")
    } else if outcomes.contains(&"unassigned") {
        format!("Its payment named no account: register it with `payhook payments expect --provider {provider} --reference {reference} --account <ACCOUNT> …`, then `payhook replay --outcome unassigned`.")
    } else if deliveries.is_empty() {
        "Nothing has arrived under this reference: check the provider's dashboard for the webhook's deliveries, and the reference the provider sends (PAYHOOK_*_REFERENCE).".to_owned()
    } else {
        "Deliveries below name it; open one to see its answer.".to_owned()
    };
    let _ = write!(body, r#"<p id="next-step">{}</p>"#, esc(&advice));
    if !deliveries.is_empty() {
        body.push_str("<h2>Deliveries naming this reference</h2>");
        let rows: Vec<Vec<String>> = deliveries.iter().map(delivery_row).collect();
        body.push_str(&table("deliveries", &DELIVERY_COLUMNS, &rows));
    }
    body
}

fn payout_link(id: &str) -> String {
    format!(
        r#"<a class="payout" href="/payouts/{}">{}</a>"#,
        enc(id),
        esc(id)
    )
}

/// What a payout in `status` waits for, in words, and what resolves it.
fn payout_next(p: &Value) -> String {
    let id = esc(s(p, "payout"));
    let flag = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
    match s(p, "status") {
        "new" => "opened; its reservation is not written yet: the caller's retry of the same request finishes it".to_owned(),
        "refused" => "refused before any money moved: the balance did not cover it".to_owned(),
        "reserved" => format!("reserved, not sent yet: the next `payhook payouts resolve {id}` or reconciliation pass sends it under the same reference"),
        "sent" if flag("ambiguous") => format!("the last send's outcome is unknown (a timeout or a 5xx): the next look asks the provider about this reference before anything else; the money stays reserved (`payhook payouts resolve {id}`)"),
        "sent" if flag("accepted") => "the provider has it: waiting for its final word (webhook or reconciliation); the money stays reserved".to_owned(),
        "sent" => "sent: waiting for the provider to confirm it has it; the money stays reserved".to_owned(),
        "failed" => "the provider said it failed: the reserved money was credited back".to_owned(),
        "reversed" => "the provider reversed it after paying: the money was credited back".to_owned(),
        "paid" => "the provider paid it: settled".to_owned(),
        other => esc(other),
    }
}

/// One payout: its facts, what it waits for, and its timeline in time order.
pub fn payout(p: &Value, deliveries: &[Value]) -> String {
    let id = s(p, "payout");
    let flag = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
    let mut rows = vec![
        ("payout", esc(id)),
        ("status", badge(s(p, "status"))),
        ("provider", esc(s(p, "provider"))),
        ("account", account_link(s(p, "account"))),
        ("amount", esc(&money(n(p, "amount"), s(p, "currency")))),
        ("sends", n(p, "sends").to_string()),
        ("provider words", esc(&p["words"].to_string())),
        ("provider status", esc(s(p, "provider_status"))),
        ("last send unknown", flag("ambiguous").to_string()),
        ("provider has it", flag("accepted").to_string()),
    ];
    if !s(p, "refused").is_empty() {
        rows.push(("provider refused", esc(s(p, "refused"))));
    }
    if let Some(available) = p.get("available_minor").and_then(Value::as_i64) {
        rows.push((
            "available when refused",
            esc(&money(available, s(p, "currency"))),
        ));
    }
    let mut body = facts(&rows);
    let _ = write!(
        body,
        r#"<p id="payout-next" class="hint">{}</p>"#,
        payout_next(p)
    );
    // Time order: opened, the reservation, each settlement movement, each delivery about it.
    let mut timeline: Vec<(i64, String, String)> = vec![(
        n(p, "created_at_ms"),
        "opened".to_owned(),
        format!(
            "{} requested for {}",
            esc(&money(n(p, "amount"), s(p, "currency"))),
            account_link(s(p, "account"))
        ),
    )];
    if !matches!(s(p, "status"), "new" | "refused") {
        timeline.push((
            n(p, "reserve_at_ms"),
            "reserved".to_owned(),
            format!(
                "{} debited from the balance until the provider's word",
                esc(&money(n(p, "amount"), s(p, "currency")))
            ),
        ));
    }
    if let Some(moves) = p.get("moves").and_then(Value::as_object) {
        for (operation, at) in moves {
            let what = match operation.as_str() {
                "payout_failed" => "credited back: the provider said it failed",
                "payout_reversed" => "credited back: the provider reversed it",
                "payout_paid" => "settled: the provider paid it",
                _ => "settled",
            };
            timeline.push((at.as_i64().unwrap_or(0), esc(operation), what.to_owned()));
        }
    }
    for d in deliveries {
        timeline.push((
            n(d, "received_at_ms"),
            format!(
                r#"<a class="delivery" href="/deliveries/{}">{}</a>"#,
                enc(s(d, "id")),
                esc(s(d, "event_type"))
            ),
            format!("{} {}", badge(s(d, "outcome")), n(d, "http_status")),
        ));
    }
    timeline.push((
        n(p, "updated_at_ms"),
        "last change".to_owned(),
        format!(
            "{} sends under reference {}; status {}",
            n(p, "sends"),
            esc(id),
            badge(s(p, "status"))
        ),
    ));
    timeline.sort_by_key(|(at, _, _)| *at);
    let rows: Vec<Vec<String>> = timeline
        .into_iter()
        .map(|(at, what, detail)| vec![esc(&time(at)), what, detail])
        .collect();
    body.push_str("<h2>Timeline</h2>");
    body.push_str(&table(
        "payout-timeline",
        &["when", "what", "detail"],
        &rows,
    ));
    let _ = write!(
        body,
        r#"<p><code>payhook payouts show {}</code> prints the stored record</p>"#,
        esc(id)
    );
    body
}

/// Open payouts: what each is waiting for, with the provider's words so far.
pub fn payouts(status: &str, account: &str, list: Option<&[Value]>, cap: usize) -> String {
    let mut body = String::from(r#"<form method="get" action="/payouts" class="filters">"#);
    body.push_str(&input("status", "status", status, "reserved, sent, new…"));
    body.push_str(&input("account", "account", account, "any"));
    body.push_str(r#"<button type="submit">Filter</button></form>"#);
    let Some(list) = list else {
        body.push_str(&note(
            "nopayouts",
            "the read API does not list payouts: run the console on the store",
        ));
        return body;
    };
    let _ = write!(
        body,
        r#"<p>Payouts not settled yet (their money stays reserved until the provider's word), oldest first: <span class="count" id="payout-count">{}</span>{}. Settled ones are found by id in the search box.</p>"#,
        list.len(),
        if list.len() >= cap { "+" } else { "" }
    );
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|p| {
            let id = s(p, "payout");
            vec![
                payout_link(id),
                badge(s(p, "status")),
                esc(s(p, "provider")),
                account_link(s(p, "account")),
                esc(&money(n(p, "amount"), s(p, "currency"))),
                n(p, "sends").to_string(),
                esc(&p["words"].to_string()),
                esc(s(p, "provider_status")),
                esc(&time(n(p, "updated_at_ms"))),
            ]
        })
        .collect();
    body.push_str(&table(
        "payouts",
        &[
            "payout",
            "status",
            "provider",
            "account",
            "amount",
            "sends",
            "provider words",
            "provider status",
            "last change",
        ],
        &rows,
    ));
    body
}

/// What one search found, reading by reading.
#[derive(Debug, Default)]
pub struct Found {
    pub by_reference: Vec<Value>,
    pub by_event: Vec<Value>,
    /// Deliveries whose payload carries this merchant order id.
    pub by_order: Vec<Value>,
    /// Why the order id could not be looked up (a read API or table from before order ids).
    pub order_failed: Option<String>,
    pub delivery: Option<Value>,
    pub payments: Vec<Value>,
    pub account: Option<Value>,
    /// Payouts and transaction bindings (the store only; `None` over the read API).
    pub more: Option<Vec<Value>>,
}

/// The search page: every reading of the text that found something, each linking onward.
pub fn search(text: &str, f: &Found) -> String {
    let mut body = format!(
        r#"<form method="get" action="/search" class="filters"><label>find <input name="q" value="{}" placeholder="order id, reference, event id, transaction id, payout id, account, delivery id"></label><button type="submit">Search</button></form>"#,
        esc(text)
    );
    if text.is_empty() {
        return body;
    }
    let mut any = false;
    if let Some(d) = &f.delivery {
        any = true;
        let _ = write!(body, "<h2>Delivery</h2>");
        body.push_str(&table(
            "found-delivery",
            &DELIVERY_COLUMNS,
            &[delivery_row(d)],
        ));
    }
    if !f.payments.is_empty() {
        any = true;
        body.push_str("<h2>Payments with this reference</h2>");
        let rows: Vec<Vec<String>> = f
            .payments
            .iter()
            .map(|p| {
                let pay = &p["payment"];
                let source = if pay.is_null() { p } else { pay };
                vec![
                    payment_link(s(source, "provider"), s(source, "reference")),
                    esc(s(source, "provider")),
                    esc(s(source, "status")),
                    account_link(s(source, "account")),
                ]
            })
            .collect();
        body.push_str(&table(
            "found-payments",
            &["payment", "provider", "status", "account"],
            &rows,
        ));
    }
    for (id, title, list, filter) in [
        (
            "found-by-reference",
            "Deliveries naming this reference",
            &f.by_reference,
            "reference",
        ),
        (
            "found-by-event",
            "Deliveries of this provider event id",
            &f.by_event,
            "event_id",
        ),
        (
            "found-by-order",
            "Deliveries whose payload names this merchant order id",
            &f.by_order,
            "order_id",
        ),
    ] {
        if list.is_empty() {
            continue;
        }
        any = true;
        let _ = write!(body, "<h2>{}</h2>", esc(title));
        let rows: Vec<Vec<String>> = list.iter().map(delivery_row).collect();
        body.push_str(&table(id, &DELIVERY_COLUMNS, &rows));
        let _ = write!(
            body,
            r#"<p><a href="/deliveries?{}">all of them, with counts and replay</a></p>"#,
            query(&[(filter, text.to_owned())])
        );
    }
    if let Some(a) = &f.account {
        any = true;
        let _ = write!(
            body,
            "<h2>Account</h2><p>{} ({} entries)</p>",
            account_link(s(a, "account")),
            n(a, "entries")
        );
    }
    for m in f.more.iter().flatten() {
        any = true;
        match s(m, "kind") {
            "payout" => {
                let p = &m["payout"];
                let _ = write!(body, "<h2>Payout</h2>");
                body.push_str(&facts(&[
                    ("payout", payout_link(s(p, "payout"))),
                    ("status", badge(s(p, "status"))),
                    ("provider", esc(s(p, "provider"))),
                    ("account", account_link(s(p, "account"))),
                    ("amount", esc(&money(n(p, "amount"), s(p, "currency")))),
                    ("provider words", esc(&p["words"].to_string())),
                    (
                        "resolve",
                        "<code>payhook payouts show ".to_owned() + &esc(s(p, "payout")) + "</code>",
                    ),
                ]));
            }
            _ => {
                let _ = write!(
                    body,
                    "<h2>Provider transaction</h2><p>bound to {} ({})</p>",
                    payment_link(s(m, "provider"), s(m, "reference")),
                    esc(s(m, "provider"))
                );
            }
        }
    }
    if let Some(why) = &f.order_failed {
        body.push_str(&note(
            "noorder",
            &format!("the merchant order id could not be looked up ({why}): the deployed read API or table may predate order ids; the other readings above are complete"),
        ));
    }
    if f.more.is_none() {
        body.push_str(&note(
            "nomore",
            "payouts and provider transaction ids are looked up on the store only: run the console on the store to find them",
        ));
    }
    if !any {
        body.push_str(&note(
            "nothing",
            "nothing has this as its merchant order id, reference, event id, transaction id, payout id, account or delivery id. An order id is found when the provider's payload carries it in the metadata key PAYHOOK_ORDER_KEYS names (order_id unless set), or when it is the payment's reference.",
        ));
    }
    body
}

fn account_link(account: &str) -> String {
    if account.is_empty() {
        return "<em>none</em>".to_owned();
    }
    format!(
        r#"<a href="/accounts/{}">{}</a>"#,
        enc(account),
        esc(account)
    )
}
