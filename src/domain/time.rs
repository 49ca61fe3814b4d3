//! Timestamps are stored as milliseconds since the Unix epoch (portable across SQLite and
//! Postgres) and shown as ISO 8601 UTC with milliseconds and `Z` (CONTRACT: Conventions).

use chrono::{DateTime, SecondsFormat, Utc};

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

pub fn iso(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_with_millis_and_z() {
        assert_eq!(super::iso(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
