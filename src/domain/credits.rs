//! Credits: each project's balance of live seconds (CONTRACT: Recording and credits). A live
//! session draws one second per second; the balance is kept in milliseconds and shown in whole
//! seconds.

/// The most one `--add`/`--set` may say: a century of live time, far below what milliseconds in
/// an `i64` can hold, so sums of a few of them cannot overflow.
pub const MAX_SECONDS: i64 = 100 * 366 * 24 * 3600;

/// A duration as the `admin credits` command takes it: a whole number with a unit, `s`, `m` or
/// `h` (`90s`, `10m`, `2h`), or several of them (`1h30m`). Returns seconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a duration like 90s, 10m, 2h or 1h30m");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: i64 = rest[..digits].parse().map_err(|_| bad())?;
        let mut units = rest[digits..].chars();
        let unit = match units.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            _ => return Err(bad()),
        };
        total = number.checked_mul(unit).and_then(|s| total.checked_add(s)).ok_or_else(bad)?;
        if total > MAX_SECONDS {
            return Err(format!("{text:?} is more than a century"));
        }
        rest = units.as_str();
    }
    Ok(total)
}

/// A balance in milliseconds as whole seconds, rounded up: a balance shown as 0 or less is one
/// that refuses pushes, and one shown above 0 allows them.
pub fn seconds_of(balance_ms: i64) -> i64 {
    balance_ms.div_euclid(1000) + i64::from(balance_ms.rem_euclid(1000) > 0)
}

/// Whether a balance lets a push start (or a stream be re-enabled).
pub fn allows_push(balance_ms: i64) -> bool {
    balance_ms > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("10m"), Ok(600));
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration(" 0s "), Ok(0));
        for bad in ["", "90", "s", "-5s", "1.5h", "10d", "10 m", "m10", "1h30", "+4s", "4S", "٣s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(parse_duration("99999999999999999999s").is_err(), "overflow");
        assert!(parse_duration(&format!("{}s", MAX_SECONDS + 1)).is_err());
        assert_eq!(parse_duration(&format!("{MAX_SECONDS}s")), Ok(MAX_SECONDS));
    }

    #[test]
    fn balances_round_up_to_whole_seconds() {
        assert_eq!(seconds_of(4000), 4);
        assert_eq!(seconds_of(3001), 4);
        assert_eq!(seconds_of(1), 1);
        assert_eq!(seconds_of(0), 0);
        assert_eq!(seconds_of(-1), 0);
        assert_eq!(seconds_of(-1000), -1);
        assert_eq!(seconds_of(-2500), -2);
        for ms in [-2500, -1, 0, 1, 999, 1000] {
            assert_eq!(allows_push(ms), seconds_of(ms) > 0, "shown and applied agree at {ms} ms");
        }
    }
}
