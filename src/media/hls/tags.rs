//! The tags a media playlist writes the same way live and VOD (RFC 8216bis 4.4.4).

use std::fmt::Write;

use chrono::{DateTime, SecondsFormat, Utc};

/// `EXT-X-MAP` where the initialization section changes (4.4.4.5): before the first segment and
/// after a reconnect. With a key the section stays clear (a `METHOD=NONE` key before every map
/// after the first) and the media after it is encrypted: the `EXT-X-KEY` follows each map, so it
/// is present after a live delta update's `EXT-X-SKIP` too.
pub fn write_map<'a>(out: &mut String, current: &mut Option<&'a str>, uri: &'a str, key: Option<&str>) {
    if *current != Some(uri) {
        if key.is_some() && current.is_some() {
            let _ = writeln!(out, "#EXT-X-KEY:METHOD=NONE");
        }
        let _ = writeln!(out, "#EXT-X-MAP:URI=\"{uri}\"");
        if let Some(key) = key {
            let _ = writeln!(out, "#EXT-X-KEY:METHOD=AES-128,URI=\"{key}\"");
        }
        *current = Some(uri);
    }
}

/// `EXT-X-PROGRAM-DATE-TIME` (4.4.4.6), in milliseconds.
pub fn write_pdt(out: &mut String, pdt: Option<DateTime<Utc>>) {
    if let Some(pdt) = pdt {
        let _ =
            writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", pdt.to_rfc3339_opts(SecondsFormat::Millis, true));
    }
}

/// An LL-HLS `EXT-X-PART` (4.4.4.9).
pub fn write_part(out: &mut String, duration: f64, uri: &str, independent: bool) {
    let independent = if independent { ",INDEPENDENT=YES" } else { "" };
    let _ = writeln!(out, "#EXT-X-PART:DURATION={duration:.5},URI=\"{uri}\"{independent}");
}

/// A segment: its `EXTINF` (4.4.4.1, five decimals) and its URI.
pub fn write_segment(out: &mut String, duration: f64, uri: &str) {
    let _ = writeln!(out, "#EXTINF:{duration:.5},\n{uri}");
}
