//! `--format table`: the listings as fixed-width text for a person at a terminal. Every line
//! fits [`MAX_WIDTH`] columns (a 100-column terminal never wraps a row): each column has a
//! width, and a longer value is cut in the middle with an ellipsis, which keeps both the
//! provider prefix of a key and the distinguishing tail of a reference. JSON stays the
//! default format, for scripts.

use std::fmt::Write as _;

use crate::read::{BalanceView, DeliveryView, PaymentView};

/// The widest line any table prints.
pub const MAX_WIDTH: usize = 100;

/// One column: header, width in characters, right-aligned (numbers) or not.
pub(crate) struct Column {
    pub name: &'static str,
    pub width: usize,
    pub right: bool,
}

const fn col(name: &'static str, width: usize) -> Column {
    Column {
        name,
        width,
        right: false,
    }
}

const fn num(name: &'static str, width: usize) -> Column {
    Column {
        name,
        width,
        right: true,
    }
}

/// `text` in at most `width` characters: cut in the middle with `…` when longer.
pub(crate) fn fit(text: &str, width: usize) -> String {
    let len = text.chars().count();
    if len <= width {
        return text.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let tail = (width - 1) / 2;
    let head = width - 1 - tail;
    let mut out: String = text.chars().take(head).collect();
    out.push('…');
    out.extend(text.chars().skip(len - tail));
    out
}

/// One line of `columns`, each cell fitted to its column, trailing spaces trimmed.
pub(crate) fn line(columns: &[Column], cells: &[&str]) -> String {
    let mut out = String::with_capacity(MAX_WIDTH);
    for (i, (c, cell)) in columns.iter().zip(cells).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let v = fit(cell, c.width);
        let _ = if c.right {
            write!(out, "{v:>w$}", w = c.width)
        } else {
            write!(out, "{v:<w$}", w = c.width)
        };
    }
    out.truncate(out.trim_end().len());
    out
}

fn header(columns: &[Column]) -> String {
    let names: Vec<&str> = columns.iter().map(|c| c.name).collect();
    line(columns, &names)
}

const DELIVERIES: [Column; 6] = [
    col("received (UTC)", 19),
    col("provider", 11),
    col("event", 16),
    col("outcome", 15),
    num("http", 4),
    col("key", 30),
];

/// The delivery log, one delivery per line, header first.
pub fn deliveries(list: &[DeliveryView]) -> Vec<String> {
    let mut lines = vec![header(&DELIVERIES)];
    for d in list {
        let received = super::time::format_utc(d.received_at_ms);
        let (provider, outcome, http) = (
            d.provider.to_string(),
            d.outcome.to_string(),
            d.http_status.to_string(),
        );
        let key = d.key.as_deref().unwrap_or("-");
        let cells: [&str; 6] = [&received, &provider, &d.event_id, &outcome, &http, key];
        lines.push(line(&DELIVERIES, &cells));
    }
    lines
}

const BALANCES: [Column; 2] = [col("currency", 8), num("balance (minor units)", 24)];

const POSTINGS: [Column; 6] = [
    col("at (UTC)", 19),
    col("currency", 8),
    num("amount", 14),
    num("shard", 5),
    col("reference", 20),
    col("key", 27),
];

/// An account's balances per currency, then its entries when they were read.
pub fn balance(view: &BalanceView) -> Vec<String> {
    let mut lines = vec![fit(
        &format!(
            "account {}  entries {}  as of {} UTC",
            view.account.as_str(),
            view.entries,
            super::time::format_utc(view.as_of_ms)
        ),
        MAX_WIDTH,
    )];
    lines.push(header(&BALANCES));
    for (currency, minor) in &view.balances {
        lines.push(line(&BALANCES, &[currency.as_str(), &minor.to_string()]));
    }
    if let Some(postings) = &view.postings {
        lines.push(String::new());
        lines.push(header(&POSTINGS));
        for p in postings {
            let at = super::time::format_utc(p.at_ms.unwrap_or(p.posted_at_ms));
            let (amount, shard) = (p.amount_minor.to_string(), p.shard.to_string());
            let cells = [
                at.as_str(),
                p.currency.as_str(),
                &amount,
                &shard,
                p.reference.as_str(),
                p.key.as_str(),
            ];
            lines.push(line(&POSTINGS, &cells));
        }
    }
    lines
}

const HISTORY: [Column; 3] = [col("at (UTC)", 19), col("status", 12), col("note", 67)];

/// A payment: its state and money, its history, then its latest deliveries.
pub fn payment(view: &PaymentView) -> Vec<String> {
    let p = &view.payment;
    let money = match (p.amount_minor, &p.currency) {
        (Some(a), Some(c)) => format!("{a} {c}"),
        _ => "-".to_owned(),
    };
    let account = p.account.as_ref().map_or("-", |a| a.as_str());
    let mut lines: Vec<String> = [
        format!("payment   {}/{}", p.provider, p.reference),
        format!("status    {}", p.status),
        format!("account   {account}"),
        format!(
            "amount    {money}  (refunded {}, disputed {})",
            p.refunded_minor, p.disputed_minor
        ),
        format!(
            "created   {} UTC  updated {} UTC",
            super::time::format_utc(p.created_at_ms),
            super::time::format_utc(p.updated_at_ms)
        ),
    ]
    .iter()
    .map(|l| fit(l, MAX_WIDTH))
    .collect();
    for d in &p.disputes {
        lines.push(fit(
            &format!(
                "dispute   {}  {}  withdrawn {}  reinstated {}",
                d.dispute, d.status, d.withdrawn_minor, d.reinstated_minor
            ),
            MAX_WIDTH,
        ));
    }
    lines.push(String::new());
    lines.push(header(&HISTORY));
    for h in &p.history {
        let (at, status) = (super::time::format_utc(h.at_ms), h.status.to_string());
        lines.push(line(&HISTORY, &[&at, &status, &h.note]));
    }
    lines.push(String::new());
    lines.extend(deliveries(&view.deliveries));
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ProviderId;
    use crate::eventlog::Outcome;

    #[test]
    fn long_values_are_cut_in_the_middle_to_their_width() {
        assert_eq!(fit("generic:payment:pay_1", 30), "generic:payment:pay_1");
        assert_eq!(fit("abcdefghij", 5), "ab…ij");
        assert_eq!(fit("abcdefghij", 6), "abc…ij");
        assert_eq!(fit("abcdefghij", 1), "…");
        assert_eq!(fit("abcdefghij", 0), "");
        assert_eq!(fit("ééééééé", 4).chars().count(), 4);
    }

    fn delivery(long: &str) -> DeliveryView {
        DeliveryView {
            id: format!("1796126400000-{long}"),
            provider: ProviderId::FLUTTERWAVE,
            event_id: format!("evt_{long}"),
            event_type: "payment.succeeded".into(),
            key: Some(format!("flutterwave:payment:{long}")),
            reference: None,
            outcome: Outcome::AlreadyApplied,
            http_status: 200,
            received_at_ms: 1_796_126_400_000,
            replay_of: None,
            started_by: None,
            redriven: None,
            raw_body: None,
            details: Default::default(),
        }
    }

    #[test]
    fn every_delivery_row_fits_a_100_column_terminal() {
        let long = "x".repeat(300);
        let lines = deliveries(&[delivery(&long), delivery("pay_1")]);
        assert_eq!(lines.len(), 3);
        for l in &lines {
            assert!(l.chars().count() <= MAX_WIDTH, "{} > 100: {l}", l.len());
        }
        // The widest row is exactly the table's width: the columns add up to 100.
        assert_eq!(lines[1].chars().count(), MAX_WIDTH);
        assert!(lines[1].starts_with("2026-12-01 12:00:00 flutterwave evt_xxxx…xxxxxxx already_applied  200 flutterwave:pay…"));
        assert!(
            lines[2].ends_with(" 200 flutterwave:payment:pay_1"),
            "{}",
            lines[2]
        );
    }

    #[test]
    fn every_table_is_at_most_100_columns_wide() {
        for columns in [&DELIVERIES[..], &BALANCES[..], &POSTINGS[..], &HISTORY[..]] {
            let width: usize = columns.iter().map(|c| c.width).sum::<usize>() + columns.len() - 1;
            assert!(width <= MAX_WIDTH, "{width}");
        }
    }
}
