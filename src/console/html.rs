//! The HTML the console's pages are made of: escaping, the page frame, badges, times and money.
//! Hand-written on purpose: every value that reaches a page passes through [`esc`] (text and
//! attributes alike), and a page is a plain `String`, so no template engine or script is needed
//! and the Content-Security-Policy can forbid scripts outright.

use std::fmt::Write;

use serde_json::Value;

/// Escapes text for an HTML element or a double-quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes one path segment or query value (everything but unreserved characters).
pub fn enc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A query string of the non-empty pairs, encoded.
pub fn query(pairs: &[(&str, String)]) -> String {
    pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A string field of a JSON view ("" when absent).
pub fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// A number field of a JSON view (0 when absent).
pub fn n(v: &Value, field: &str) -> i64 {
    v.get(field).and_then(Value::as_i64).unwrap_or_default()
}

/// `2026-12-04 10:00:00.123Z` of an epoch-ms instant (UTC).
pub fn time(ms: i64) -> String {
    let (y, m, d) = crate::domain::civil_from_days(ms.div_euclid(86_400_000));
    let of_day = ms.rem_euclid(86_400_000);
    let (h, min, sec, milli) = (
        of_day / 3_600_000,
        of_day / 60_000 % 60,
        of_day / 1_000 % 60,
        of_day % 1_000,
    );
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{sec:02}.{milli:03}Z")
}

/// Minor units shown in major units of their currency (`12.34 EUR`), exactly.
pub fn money(minor: i64, currency: &str) -> String {
    let exponent = crate::domain::Currency::parse(currency)
        .map(|c| u32::from(c.exponent()))
        .unwrap_or(0);
    // The code comes from stored data: escaped like any other text, whatever parsed it.
    let currency = esc(currency);
    if exponent == 0 {
        return format!("{minor} {currency}");
    }
    let unit = 10_i64.pow(exponent);
    let sign = if minor < 0 { "-" } else { "" };
    let abs = minor.unsigned_abs();
    let unit = unit.unsigned_abs();
    format!(
        "{sign}{}.{:0width$} {currency}",
        abs / unit,
        abs % unit,
        width = exponent as usize
    )
}

/// An outcome as a colour-coded badge (its class is the outcome's name).
pub fn badge(outcome: &str) -> String {
    format!(
        r#"<span class="badge {0}" data-outcome="{0}">{0}</span>"#,
        esc(outcome)
    )
}

/// The link to a payment's page.
pub fn payment_link(provider: &str, reference: &str) -> String {
    format!(
        r#"<a href="/payments/{}/{}">{}</a>"#,
        enc(provider),
        enc(reference),
        esc(reference)
    )
}

/// The navigation, with `active` marked.
fn nav(active: &str) -> String {
    let items = [
        ("deliveries", "/deliveries", "Deliveries"),
        ("attention", "/attention", "Needs attention"),
        ("traffic", "/traffic", "Traffic"),
        ("payouts", "/payouts", "Payouts"),
    ];
    items
        .iter()
        .map(|(id, href, label)| {
            let class = if *id == active {
                r#" class="active""#
            } else {
                ""
            };
            format!(r#"<a href="{href}"{class}>{label}</a>"#)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A whole page: the frame, the navigation, the data source named, and `body`.
pub fn page(title: &str, active: &str, source: &str, body: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title} · payhook console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/assets/console.css"></head>
<body><header><strong>payhook</strong> {nav}<form class="search" method="get" action="/search" role="search"><input name="q" aria-label="search" placeholder="order id, reference, event, payout, account"></form><span class="source">data: {source}</span></header>
<main><h1>{title}</h1>
{body}
</main></body></html>
"#,
        title = esc(title),
        nav = nav(active),
        source = esc(source),
    )
}

/// A table of `rows` (each cell already HTML) under `headers`.
pub fn table(id: &str, headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(r#"<table id="{id}"><thead><tr>"#);
    for h in headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A notice box.
pub fn note(class: &str, text: &str) -> String {
    format!(r#"<p class="note {class}">{}</p>"#, esc(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_escapes_its_currency() {
        assert_eq!(money(5, "<b>"), "5 &lt;b&gt;");
        assert_eq!(money(12_345, "NGN"), "123.45 NGN");
    }

    #[test]
    fn escapes_what_could_open_markup() {
        assert_eq!(
            esc(r#"<script>"a"&'b'</script>"#),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(enc("a b/c#d"), "a%20b%2Fc%23d");
    }

    #[test]
    fn money_is_exact_in_major_units() {
        assert_eq!(money(123_456, "EUR"), "1234.56 EUR");
        assert_eq!(money(-5, "USD"), "-0.05 USD");
        assert_eq!(money(1_500, "JPY"), "1500 JPY");
        assert_eq!(money(1_234, "KWD"), "1.234 KWD");
    }

    #[test]
    fn times_are_utc() {
        assert_eq!(time(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(time(1_796_385_600_123), "2026-12-04 12:00:00.123Z");
    }
}
