//! Timestamps are stored as milliseconds since the Unix epoch (portable across SQLite and
//! Postgres) and shown as ISO 8601 UTC with milliseconds and `Z` (CONTRACT: Conventions).

use chrono::{DateTime, Duration, NaiveDate, SecondsFormat, Utc, Weekday};

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The span of time an ISO 8601 date or date-time names, in milliseconds: a date (`2024-05`,
/// `2024-05-01`, `2024-122`, `2024-W18-3`, basic forms too) names the whole of it; a date-time
/// names one instant (its `first` and `last` are equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub first_ms: i64,
    pub last_ms: i64,
}

/// Parses any ISO 8601 calendar, ordinal or week date, in extended or basic form, alone or
/// followed by `T` (or a space) and a time of day: `hh`, `hh:mm`, `hh:mm:ss`, their basic forms,
/// a decimal fraction (`.` or `,`) on the last part, `24:00` as the end of the day, and an
/// offset `Z`, `±hh`, `±hh:mm` or `±hhmm`. A time without an offset is taken as UTC.
pub fn parse_iso8601(text: &str) -> Result<Span, String> {
    const WHAT: &str = "must be an ISO 8601 date or date-time, e.g. 2024-05-01 or 2024-05-01T12:00:00Z";
    let text = text.trim();
    let split = text.find(['T', 't', ' ']);
    let (date, time) = match split {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let (first, next) = parse_date(date).ok_or(WHAT)?;
    let Some(time) = time else {
        return Ok(Span { first_ms: ms(first), last_ms: ms(next) - 1 });
    };
    // A time of day needs a complete date.
    if next - first != Duration::days(1) {
        return Err(WHAT.into());
    }
    let at = parse_time(time).ok_or(WHAT)?;
    let instant = first.and_hms_opt(0, 0, 0).ok_or(WHAT)?.and_utc().timestamp_millis() + at;
    Ok(Span { first_ms: instant, last_ms: instant })
}

fn ms(date: NaiveDate) -> i64 {
    date.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp_millis()).unwrap_or(0)
}

/// `n` ASCII digits as a number, and the rest.
fn digits(s: &str, n: usize) -> Option<(u32, &str)> {
    let head = s.get(..n)?;
    if !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, &s[n..]))
}

/// A date and the day after the period it names.
fn parse_date(s: &str) -> Option<(NaiveDate, NaiveDate)> {
    let (year, rest) = digits(s, 4)?;
    let year = i32::try_from(year).ok()?;
    let day = |d: NaiveDate| Some((d, d.succ_opt()?));
    if rest.is_empty() {
        return Some((NaiveDate::from_ymd_opt(year, 1, 1)?, NaiveDate::from_ymd_opt(year + 1, 1, 1)?));
    }
    let extended = rest.starts_with('-');
    let rest = if extended { &rest[1..] } else { rest };
    if let Some(week) = rest.strip_prefix('W') {
        let (w, rest) = digits(week, 2)?;
        let rest = if extended { rest.strip_prefix('-').unwrap_or(rest) } else { rest };
        if rest.is_empty() && !(extended && week.len() > 2) {
            let monday = NaiveDate::from_isoywd_opt(year, w, Weekday::Mon)?;
            return Some((monday, monday + Duration::days(7)));
        }
        let (d, rest) = digits(rest, 1)?;
        if !rest.is_empty() || !(1..=7).contains(&d) {
            return None;
        }
        return day(NaiveDate::from_isoywd_opt(year, w, Weekday::try_from(d as u8 - 1).ok()?)?);
    }
    match (rest.len(), extended) {
        (2, true) => {
            let (m, _) = digits(rest, 2)?;
            let first = NaiveDate::from_ymd_opt(year, m, 1)?;
            let next = if m == 12 {
                NaiveDate::from_ymd_opt(year + 1, 1, 1)?
            } else {
                NaiveDate::from_ymd_opt(year, m + 1, 1)?
            };
            Some((first, next))
        }
        (3, _) => day(NaiveDate::from_yo_opt(year, digits(rest, 3)?.0)?),
        (4, false) | (5, true) => {
            let (m, rest) = digits(rest, 2)?;
            let rest = if extended { rest.strip_prefix('-')? } else { rest };
            let (d, _) = digits(rest, 2)?;
            day(NaiveDate::from_ymd_opt(year, m, d)?)
        }
        _ => None,
    }
}

/// Milliseconds after midnight UTC of a time of day with an optional offset.
fn parse_time(s: &str) -> Option<i64> {
    let offset_at = s.find(['Z', 'z', '+', '-']).unwrap_or(s.len());
    let (clock, offset) = s.split_at(offset_at);
    let offset_ms = parse_offset(offset)?;
    // The fraction belongs to the last part given.
    let (whole, fraction) = match clock.find(['.', ',']) {
        Some(i) => (&clock[..i], Some(&clock[i + 1..])),
        None => (clock, None),
    };
    let extended = whole.contains(':');
    let parts: Vec<&str> = if extended {
        whole.split(':').collect()
    } else {
        (0..whole.len()).step_by(2).filter_map(|i| whole.get(i..i + 2)).collect()
    };
    if parts.is_empty() || parts.len() > 3 || (!extended && whole.len() % 2 != 0) {
        return None;
    }
    let mut values = Vec::with_capacity(3);
    for part in &parts {
        let (v, rest) = digits(part, 2)?;
        if !rest.is_empty() {
            return None;
        }
        values.push(i64::from(v));
    }
    let (h, m, sec) = (values[0], values.get(1).copied().unwrap_or(0), values.get(2).copied().unwrap_or(0));
    // 60 is a leap second, taken as the last moment of its minute.
    if h > 24 || m > 59 || sec > 60 || (h == 24 && (m, sec) != (0, 0)) {
        return None;
    }
    let unit_ms: i64 = match parts.len() {
        1 => 3_600_000,
        2 => 60_000,
        _ => 1_000,
    };
    let fraction_ms = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 18 && f.bytes().all(|b| b.is_ascii_digit()) => {
            if h == 24 && f.bytes().any(|b| b != b'0') {
                return None;
            }
            let value: f64 = format!("0.{f}").parse().ok()?;
            (value * unit_ms as f64).floor() as i64
        }
        Some(_) => return None,
    };
    let (sec, fraction_ms) = if sec == 60 { (59, 999) } else { (sec, fraction_ms) };
    Some(h * 3_600_000 + m * 60_000 + sec * 1_000 + fraction_ms - offset_ms)
}

/// An offset from UTC in milliseconds: none, `Z`, `±hh`, `±hh:mm` or `±hhmm`.
fn parse_offset(s: &str) -> Option<i64> {
    match s {
        "" | "Z" | "z" => return Some(0),
        _ => {}
    }
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &s[1..];
    let (h, rest) = digits(rest, 2)?;
    let rest = rest.strip_prefix(':').filter(|_| rest.len() == 3).unwrap_or(rest);
    let m = match rest.len() {
        0 => 0,
        2 => digits(rest, 2)?.0,
        _ => return None,
    };
    if h > 23 || m > 59 {
        return None;
    }
    Some(sign * (i64::from(h) * 3_600_000 + i64::from(m) * 60_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(super::iso(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    fn span(s: &str) -> (String, String) {
        let span = parse_iso8601(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (iso(span.first_ms), iso(span.last_ms))
    }

    fn instant(s: &str) -> String {
        let (first, last) = span(s);
        assert_eq!(first, last, "{s} is an instant");
        first
    }

    #[test]
    fn dates_name_their_whole_period() {
        let day = ("2024-05-01T00:00:00.000Z".to_string(), "2024-05-01T23:59:59.999Z".to_string());
        for s in ["2024-05-01", "20240501", "2024-122", "2024122", "2024-W18-3", "2024W183"] {
            assert_eq!(span(s), day, "{s}");
        }
        assert_eq!(span("2024-02"), ("2024-02-01T00:00:00.000Z".into(), "2024-02-29T23:59:59.999Z".into()));
        assert_eq!(span("2024"), ("2024-01-01T00:00:00.000Z".into(), "2024-12-31T23:59:59.999Z".into()));
        assert_eq!(span("2024-W18"), ("2024-04-29T00:00:00.000Z".into(), "2024-05-05T23:59:59.999Z".into()));
        assert_eq!(span("2024-12"), ("2024-12-01T00:00:00.000Z".into(), "2024-12-31T23:59:59.999Z".into()));
    }

    #[test]
    fn date_times_name_an_instant_in_utc() {
        for s in [
            "2024-05-01T12:30:00Z",
            "2024-05-01T12:30:00.000Z",
            "2024-05-01t12:30:00z",
            "2024-05-01 12:30:00Z",
            "2024-05-01T12:30Z",
            "2024-05-01T12:30",
            "2024-05-01T14:30:00+02:00",
            "2024-05-01T14:30:00+0200",
            "2024-05-01T14:30+02",
            "2024-05-01T07:30-05:00",
            "20240501T123000Z",
            "20240501T1230",
            "2024-05-01T12,5Z",
            "2024-05-01T12:30:00,000Z",
            "2024-122T12:30Z",
            "2024-W18-3T12:30Z",
        ] {
            assert_eq!(instant(s), "2024-05-01T12:30:00.000Z", "{s}");
        }
        assert_eq!(instant("2024-05-01T12:30:00.1234Z"), "2024-05-01T12:30:00.123Z");
        assert_eq!(instant("2024-05-01T24:00"), "2024-05-02T00:00:00.000Z");
        assert_eq!(instant("2016-12-31T23:59:60Z"), "2016-12-31T23:59:59.999Z");
        assert_eq!(instant("0001-01-01T00:00:00Z"), "0001-01-01T00:00:00.000Z");
    }

    proptest::proptest! {
        /// A query parameter is anybody's text: any string gets an answer, never a panic.
        #[test]
        fn any_text_is_answered(text in ".{0,40}", digits in "[0-9T:.,+-Zz W]{0,30}") {
            let _ = parse_iso8601(&text);
            let _ = parse_iso8601(&digits);
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for s in [
            "",
            "yesterday",
            "2024-13-01",
            "2024-02-30",
            "2023-366",
            "2024-W54-1",
            "2024-W18-8",
            "2024-05-01T25:00Z",
            "2024-05-01T24:30",
            "2024-05-01T12:60",
            "2024-05T12:00",
            "2024T12",
            "2024-05-01T12:30:00+24:00",
            "2024-05-01T12:30:00+02:0",
            "2024-05-01T",
            "2024-05-01T12:3",
            "2024-05-01T12:30:00.Z",
            "2024-5-1",
            "240501",
            "2024-05-01T12:30:00ZZ",
            "+002024-05-01",
        ] {
            assert!(parse_iso8601(s).is_err(), "{s} should be refused");
        }
    }
}
