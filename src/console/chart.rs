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
        let i = (at_ms - self.start_ms).div_euclid(self.width_ms.max(1));
        if let Some(bucket) = usize::try_from(i).ok().and_then(|i| self.counts.get_mut(i)) {
            *bucket.entry(outcome.to_owned()).or_default() += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().flat_map(|b| b.values()).sum()
    }
}

const HEIGHT: u64 = 160;
const BAR_PX: usize = 8;

/// The stacked bar chart of `b` (outcomes in `order`, bottom first).
pub fn stacked(b: &Buckets, order: &[&str]) -> String {
    let max = b
        .counts
        .iter()
        .map(|c| c.values().sum::<u64>())
        .max()
        .unwrap_or(0)
        .max(1);
    let width = b.counts.len() * BAR_PX;
    let mut svg = format!(
        r#"<svg id="traffic-chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img" aria-label="deliveries per bucket by outcome"><rect class="frame" x="0" y="0" width="{width}" height="{h}"/>"#,
        h = HEIGHT + 1
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
    svg.push_str("</svg>");
    svg
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
    }
}
