//! The traffic chart: deliveries per time bucket, stacked by outcome, drawn as inline SVG on the
//! server (no chart library, no script: the page's CSP forbids scripts). Each bar segment is a
//! `rect` with its outcome as class and a `title` with its count, so the picture is testable.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::html::esc;

/// Counts per bucket (oldest first), each by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buckets {
    pub start_ms: i64,
    pub width_ms: i64,
    pub counts: Vec<BTreeMap<String, u64>>,
}

impl Buckets {
    pub fn new(start_ms: i64, width_ms: i64, n: usize) -> Self {
        Buckets {
            start_ms,
            width_ms,
            counts: vec![BTreeMap::new(); n],
        }
    }

    /// Counts one delivery received at `at_ms`; outside the window it is not counted.
    pub fn add(&mut self, at_ms: i64, outcome: &str) {
        self.add_n(at_ms, outcome, 1);
    }

    /// Counts `n` deliveries received at `at_ms` (a minute's rollup).
    pub fn add_n(&mut self, at_ms: i64, outcome: &str, n: u64) {
        let i = (at_ms - self.start_ms).div_euclid(self.width_ms.max(1));
        if let Some(bucket) = usize::try_from(i).ok().and_then(|i| self.counts.get_mut(i)) {
            *bucket.entry(outcome.to_owned()).or_default() += n;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().flat_map(|b| b.values()).sum()
    }
}

const HEIGHT: u64 = 160;
const BAR_PX: usize = 8;
/// Room left of the bars for the y axis' labels, and under them for the x axis'.
const AXIS_PX: usize = 40;
const LABEL_PX: u64 = 16;

/// The stacked bar chart of `b` (outcomes in `order`, bottom first).
pub fn stacked(b: &Buckets, order: &[&str]) -> String {
    let max = b
        .counts
        .iter()
        .map(|c| c.values().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let bars = b.counts.len() * BAR_PX;
    let width = AXIS_PX + bars;
    let mut svg = format!(
        r#"<svg id="traffic-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img" aria-label="deliveries per bucket by outcome, 0 to {max}"><g class="axis"><text class="y-max" x="{tx}" y="10" text-anchor="end">{max}</text><text class="y-zero" x="{tx}" y="{HEIGHT}" text-anchor="end">0</text><text class="x-start" x="{AXIS_PX}" y="{lx}">{start}</text><text class="x-end" x="{width}" y="{lx}" text-anchor="end">now</text><line x1="{AXIS_PX}" y1="0" x2="{AXIS_PX}" y2="{HEIGHT}"/></g><g transform="translate({AXIS_PX},0)"><rect class="frame" x="0" y="0" width="{bars}" height="{h1}"/>"#,
        h = HEIGHT + LABEL_PX,
        h1 = HEIGHT + 1,
        tx = AXIS_PX - 4,
        lx = HEIGHT + LABEL_PX - 4,
        start = esc(&start_label(b.start_ms)),
    );
    for (i, counts) in b.counts.iter().enumerate() {
        let mut y = HEIGHT;
        for outcome in order {
            let Some(&count) = counts.get(*outcome) else {
                continue;
            };
            let h = (count * HEIGHT).div_ceil(max).max(1);
            y = y.saturating_sub(h);
            let _ = write!(
                svg,
                r#"<rect class="bar {o}" x="{x}" y="{y}" width="{w}" height="{h}"><title>{o}: {count}</title></rect>"#,
                o = esc(outcome),
                x = i * BAR_PX,
                w = BAR_PX - 1,
            );
        }
    }
    svg.push_str("</g></svg>");
    svg
}

/// The x axis' first label: the window's start, UTC, to the minute.
fn start_label(start_ms: i64) -> String {
    let of_day = start_ms.rem_euclid(86_400_000);
    format!("{:02}:{:02} UTC", of_day / 3_600_000, of_day / 60_000 % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_inside_the_window_and_bars_stack() {
        let mut b = Buckets::new(1_000, 100, 3);
        b.add(1_000, "applied");
        b.add(1_099, "replayed");
        b.add(1_250, "applied");
        b.add(999, "applied");
        b.add(1_300, "applied");
        assert_eq!(b.total(), 3);
        let svg = stacked(&b, &["applied", "replayed"]);
        assert_eq!(svg.matches(r#"class="bar applied""#).count(), 2);
        assert_eq!(svg.matches(r#"class="bar replayed""#).count(), 1);
        assert!(svg.contains("<title>replayed: 1</title>"));
        // A scale: 0 and the tallest bar's count on the y axis, the start and now on the x axis
        assert!(svg.contains(r#"class="y-max" x="36" y="10" text-anchor="end">2</text>"#));
        assert!(svg.contains(r#"class="x-start""#) && svg.contains(">now</text>"));
    }
}
