//! Times the way operators type them (`--since 24h`, `--since 2026-12-01`), turned into the
//! epoch milliseconds the log's filters use. Hand-written: three small forms need one civil
//! date conversion, not a date crate.

use crate::domain::now_ms;

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

const FORMS: &str = "expected a date (2026-12-01, UTC midnight), an RFC 3339 time \
                     (2026-12-01T10:00:00Z, 2026-12-01T11:00:00+01:00) or a duration back \
                     from now (30s, 90m, 24h, 7d)";

/// The clap value parser of `--since` / `--until`: [`parse_time`] against the clock now, so a
/// relative time means "back from when the command started".
pub(crate) fn time_arg(text: &str) -> Result<i64, String> {
    parse_time(text, now_ms())
}

/// Epoch milliseconds of `text`: `YYYY-MM-DD` (midnight UTC), an RFC 3339 date-time (`T` or a
/// space between date and time, fractional seconds and any offset allowed), or a duration of
/// whole seconds, minutes, hours or days (`30s`, `90m`, `24h`, `7d`) back from `now_ms`.
pub fn parse_time(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    let bad = |why: &str| format!("{why}; {FORMS}");
    if let Some(back_ms) = duration_ms(text) {
        return back_ms
            .and_then(|ms| now_ms.checked_sub(ms))
            .ok_or_else(|| bad("duration too long"));
    }
    let date = text.get(..10).ok_or_else(|| bad("not a time"))?;
    let day_ms = date_ms(date).map_err(bad)?;
    match text.get(10..) {
        Some("") => Ok(day_ms),
        Some(rest) if rest.starts_with(['T', 't', ' ']) => {
            let (time_ms, offset_ms) = time_of_day_ms(&rest[1..]).map_err(bad)?;
            Ok(day_ms + time_ms - offset_ms)
        }
        _ => Err(bad("not a time")),
    }
}

/// `Some(Some(ms))` for `<digits><s|m|h|d>`, `Some(None)` when it overflows, `None` when
/// `text` is not a duration at all.
fn duration_ms(text: &str) -> Option<Option<i64>> {
    let unit_ms = match text.chars().last()? {
        's' => SECOND_MS,
        'm' => MINUTE_MS,
        'h' => HOUR_MS,
        'd' => DAY_MS,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        digits
            .parse::<i64>()
            .ok()
            .and_then(|n| n.checked_mul(unit_ms)),
    )
}

/// A fixed-width unsigned number: `digits` ASCII digits, nothing else.
fn number(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Midnight UTC of `YYYY-MM-DD`, in epoch ms.
fn date_ms(date: &str) -> Result<i64, &'static str> {
    let b = date.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return Err("not a time");
    }
    let (Some(y), Some(m), Some(d)) = (number(&date[..4]), number(&date[5..7]), number(&date[8..]))
    else {
        return Err("not a time");
    };
    if !(1..=12).contains(&m) {
        return Err("month out of range");
    }
    if d < 1 || d > days_in_month(y, m) {
        return Err("day out of range");
    }
    Ok(days_from_civil(y, m, d) * DAY_MS)
}

/// `HH:MM:SS[.fraction](Z|±HH:MM)` as (ms since midnight, offset ms east of UTC).
fn time_of_day_ms(text: &str) -> Result<(i64, i64), &'static str> {
    let offset_at = text
        .find(['Z', 'z', '+', '-'])
        .ok_or("an RFC 3339 time needs Z or an offset")?;
    let (clock, offset) = text.split_at(offset_at);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let parts: Vec<&str> = hms.split(':').collect();
    let [h, m, s] = parts.as_slice() else {
        return Err("time must be HH:MM:SS");
    };
    let (Some(h), Some(m), Some(s)) = (two(h), two(m), two(s)) else {
        return Err("time must be HH:MM:SS");
    };
    if h > 23 || m > 59 || s > 59 {
        return Err("time out of range");
    }
    // Milliseconds: the first three fraction digits; finer ones are dropped.
    let fraction_ms = match fraction {
        "" if !clock.contains('.') => 0,
        f if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            let padded = format!("{:0<3}", &f[..f.len().min(3)]);
            number(&padded).ok_or("bad fraction")?
        }
        _ => return Err("bad fraction of a second"),
    };
    let offset_ms = match offset {
        "Z" | "z" => 0,
        _ => {
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let (oh, om) = offset[1..].split_once(':').ok_or("offset must be ±HH:MM")?;
            let (Some(oh), Some(om)) = (two(oh), two(om)) else {
                return Err("offset must be ±HH:MM");
            };
            if oh > 23 || om > 59 {
                return Err("offset out of range");
            }
            sign * (oh * HOUR_MS + om * MINUTE_MS)
        }
    };
    Ok((
        h * HOUR_MS + m * MINUTE_MS + s * SECOND_MS + fraction_ms,
        offset_ms,
    ))
}

/// Exactly two ASCII digits.
fn two(text: &str) -> Option<i64> {
    (text.len() == 2).then(|| number(text)).flatten()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of epoch ms, as tables print times: whole seconds, so a
/// column keeps one width.
pub fn format_utc(ms: i64) -> String {
    let (y, m, d) = crate::domain::civil_from_days(ms.div_euclid(DAY_MS));
    let s = ms.rem_euclid(DAY_MS) / SECOND_MS;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        s / 3_600,
        s / 60 % 60,
        s % 60
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: i64 = 1_796_126_400_000; // 2026-12-01T12:00:00Z

    #[test]
    fn a_date_is_midnight_utc() {
        assert_eq!(parse_time("2026-12-01", NOW_MS), Ok(1_796_083_200_000));
        assert_eq!(parse_time("1970-01-01", NOW_MS), Ok(0));
        assert_eq!(parse_time("2000-02-29", NOW_MS), Ok(951_782_400_000));
        assert_eq!(parse_time("1969-12-31", NOW_MS), Ok(-DAY_MS));
    }

    #[test]
    fn rfc3339_times_honour_offsets_and_fractions() {
        assert_eq!(parse_time("2026-12-01T12:00:00Z", NOW_MS), Ok(NOW_MS));
        assert_eq!(parse_time("2026-12-01t12:00:00z", NOW_MS), Ok(NOW_MS));
        assert_eq!(parse_time("2026-12-01 12:00:00Z", NOW_MS), Ok(NOW_MS));
        assert_eq!(parse_time("2026-12-01T13:30:00+01:30", NOW_MS), Ok(NOW_MS));
        assert_eq!(parse_time("2026-12-01T07:00:00-05:00", NOW_MS), Ok(NOW_MS));
        assert_eq!(
            parse_time("2026-12-01T12:00:00.25Z", NOW_MS),
            Ok(NOW_MS + 250)
        );
        assert_eq!(
            parse_time("2026-12-01T12:00:00.123456789Z", NOW_MS),
            Ok(NOW_MS + 123)
        );
    }

    #[test]
    fn durations_count_back_from_now() {
        assert_eq!(parse_time("30s", NOW_MS), Ok(NOW_MS - 30_000));
        assert_eq!(parse_time("90m", NOW_MS), Ok(NOW_MS - 5_400_000));
        assert_eq!(parse_time("24h", NOW_MS), Ok(NOW_MS - DAY_MS));
        assert_eq!(parse_time("7d", NOW_MS), Ok(NOW_MS - 7 * DAY_MS));
        assert_eq!(parse_time("0s", NOW_MS), Ok(NOW_MS));
    }

    #[test]
    fn malformed_or_impossible_times_are_refused_with_the_forms_named() {
        for text in [
            "",
            "yesterday",
            "24",
            "h",
            "-5h",
            "1.5h",
            "24 h",
            "2026-13-01",
            "2026-02-29",
            "2026-04-31",
            "2026-00-10",
            "2026-12-1",
            "26-12-01",
            "2026-12-01T10:00:00",
            "2026-12-01T24:00:00Z",
            "2026-12-01T10:60:00Z",
            "2026-12-01T10:00Z",
            "2026-12-01T10:00:00.Z",
            "2026-12-01T10:00:00+1:00",
            "2026-12-01T10:00:00+01",
            "2026-12-01X10:00:00Z",
            "99999999999999999999d",
        ] {
            let err = parse_time(text, NOW_MS).expect_err(text);
            assert!(err.contains("expected a date (2026-12-01"), "{text}: {err}");
        }
    }

    #[test]
    fn tables_print_the_times_the_parser_reads() {
        assert_eq!(format_utc(NOW_MS + 999), "2026-12-01 12:00:00");
        assert_eq!(format_utc(0), "1970-01-01 00:00:00");
        assert_eq!(format_utc(-1), "1969-12-31 23:59:59");
        for text in [
            "2000-02-29T23:59:59Z",
            "2026-12-31T00:00:01Z",
            "1600-03-01T10:11:12Z",
        ] {
            let ms = parse_time(text, NOW_MS).unwrap();
            assert_eq!(format_utc(ms), text.replace('T', " ").replace('Z', ""));
        }
    }

    #[test]
    fn civil_days_match_known_dates_across_eras() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1600, 1, 1), -135_140);
        // Consecutive days are consecutive numbers across month and leap-year ends.
        let mut expected = days_from_civil(1999, 1, 1);
        for y in 1999..=2001 {
            for m in 1..=12 {
                for d in 1..=days_in_month(y, m) {
                    assert_eq!(days_from_civil(y, m, d), expected, "{y}-{m}-{d}");
                    assert_eq!(crate::domain::civil_from_days(expected), (y, m, d));
                    expected += 1;
                }
            }
        }
    }
}
