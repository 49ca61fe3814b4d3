//! The one writer of VOD media playlists (RFC 8216bis 4.4.3, 4.4.4), for transcoded VODs and for
//! recordings: fMP4 segments after an `EXT-X-MAP`, `EXT-X-PLAYLIST-TYPE:VOD`, `EXT-X-ENDLIST`;
//! an `EXT-X-DISCONTINUITY` and a new map where the initialization section changes (a
//! recording's reconnect), and `EXT-X-GAP` for a segment whose media is missing. The tags are
//! written as live writes them ([`crate::media::hls::tags`]); the master playlist is the live
//! one's ([`crate::media::hls::master`]).

use std::fmt::Write as _;

use crate::domain::time::iso;
use crate::media::hls::tags::{write_map, write_segment};

/// One segment of a rendition.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub uri: String,
    /// Seconds.
    pub duration: f64,
    pub bytes: u64,
}

/// Where a VOD media playlist (`/vod/<id>/<rendition>/index.m3u8`) finds the VOD's key.
pub const KEY_URI: &str = "../key";

/// One line of a VOD media playlist: the segment's initialization section, URI and length,
/// whether it is a gap, and the wall-clock time of its first frame (ms; a recording's, as its
/// live playlist's `EXT-X-PROGRAM-DATE-TIME` gave it).
#[derive(Debug, Clone, PartialEq)]
pub struct Listed<'a> {
    pub init: &'a str,
    pub uri: &'a str,
    pub duration: f64,
    pub gap: bool,
    pub date: Option<i64>,
}

/// How far a segment's date may be from the one its predecessor's date and length give before
/// the playlist states it again.
const DATE_SLACK_MS: i64 = 50;

/// The media playlist of a rendition. TARGETDURATION is the longest segment rounded to the
/// nearest second, as 4.4.3.1 asks (EXTINF rounded to an integer must not exceed it). With
/// `key_uri` the segments are AES-128 encrypted (IV: the sequence number); the `EXT-X-KEY`
/// follows each `EXT-X-MAP`, so the initialization sections are clear. `map` is written first
/// even when there are no segments (a transcoded rendition's one initialization section).
pub fn media_playlist<'a>(map: Option<&'a str>, segments: &[Listed<'a>], key_uri: Option<&str>) -> String {
    let target = segments.iter().map(|s| s.duration.round() as u64).max().unwrap_or(1).max(1);
    let mut out = format!(
        "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:{target}\n#EXT-X-MEDIA-SEQUENCE:0\n\
         #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    );
    let mut current = None;
    if let Some(map) = map {
        write_map(&mut out, &mut current, map, key_uri);
    }
    // The date a reader derives for the next segment (RFC 8216bis 4.4.4.6).
    let mut derived: Option<i64> = None;
    for (i, s) in segments.iter().enumerate() {
        let discontinuity = i > 0 && segments[i - 1].init != s.init;
        if discontinuity {
            out.push_str("#EXT-X-DISCONTINUITY\n");
        }
        write_map(&mut out, &mut current, s.init, key_uri);
        if let Some(date) = s.date {
            // Written where it does not follow from the one before: the first, after a
            // discontinuity, after a pause of the clock.
            if discontinuity || derived.is_none_or(|d| (d - date).abs() > DATE_SLACK_MS) {
                let _ = writeln!(out, "#EXT-X-PROGRAM-DATE-TIME:{}", iso(date));
            }
        }
        derived = s.date.or(derived).map(|d| d + (s.duration * 1000.0).round() as i64);
        if s.gap {
            out.push_str("#EXT-X-GAP\n");
        }
        write_segment(&mut out, s.duration, s.uri);
    }
    out.push_str("#EXT-X-ENDLIST\n");
    out
}

/// The segments of a VOD media playlist as [`media_playlist`] writes it, in order, each with
/// the initialization section before it; `None` when a segment has no `EXT-X-MAP` before it or
/// an `EXTINF` does not read.
pub fn read(text: &str) -> Option<Vec<Listed<'_>>> {
    let (mut init, mut duration, mut gap) = (None, None, false);
    // The next segment's date: stated, or the one before's plus its length.
    let mut date: Option<i64> = None;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(map) = line.strip_prefix("#EXT-X-MAP:URI=\"") {
            init = Some(map.split('"').next()?);
        } else if let Some(d) = line.strip_prefix("#EXTINF:") {
            duration = Some(d.split(',').next()?.parse::<f64>().ok().filter(|d| d.is_finite() && *d >= 0.0)?);
        } else if let Some(d) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            date = chrono::DateTime::parse_from_rfc3339(d).ok().map(|d| d.timestamp_millis());
        } else if line == "#EXT-X-DISCONTINUITY" {
            date = None;
        } else if line == "#EXT-X-GAP" {
            gap = true;
        } else if !line.is_empty() && !line.starts_with('#') {
            let duration = duration.take()?;
            out.push(Listed { init: init?, uri: line, duration, gap, date });
            date = date.map(|d| d + (duration * 1000.0).round() as i64);
            gap = false;
        }
    }
    Some(out)
}

/// The media playlist of a transcoded rendition: every segment after the one `init_uri`.
pub fn transcoded_playlist(init_uri: &str, segments: &[Segment], key_uri: Option<&str>) -> String {
    let listed: Vec<Listed> = segments
        .iter()
        .map(|s| Listed { init: init_uri, uri: &s.uri, duration: s.duration, gap: false, date: None })
        .collect();
    media_playlist(Some(init_uri), &listed, key_uri)
}

/// (peak, average) bits per second over the segments (BANDWIDTH and AVERAGE-BANDWIDTH,
/// RFC 8216bis 4.4.6.2).
pub fn bitrates(segments: &[Segment]) -> (u64, u64) {
    bitrates_of(segments.iter().map(|s| (s.duration, s.bytes)))
}

/// [`bitrates`] over (seconds, bytes) of each segment.
pub fn bitrates_of(segments: impl Iterator<Item = (f64, u64)> + Clone) -> (u64, u64) {
    let peak = segments
        .clone()
        .filter(|(duration, _)| *duration > 0.0)
        .map(|(duration, bytes)| (bytes as f64 * 8.0 / duration) as u64)
        .max()
        .unwrap_or(0);
    let (seconds, bytes) = segments.fold((0.0, 0u64), |(s, b), (duration, bytes)| (s + duration, b + bytes));
    let average = if seconds > 0.0 { (bytes as f64 * 8.0 / seconds) as u64 } else { 0 };
    (peak, average)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_playlist_is_a_vod_playlist_within_its_target() {
        let segs = vec![
            Segment { uri: "s0.m4s".into(), duration: 4.0, bytes: 1000 },
            Segment { uri: "s1.m4s".into(), duration: 4.4, bytes: 3000 },
            Segment { uri: "s2.m4s".into(), duration: 1.2, bytes: 100 },
        ];
        let text = transcoded_playlist("init.mp4", &segs, None);
        assert!(!text.contains("EXT-X-KEY"));
        let encrypted = transcoded_playlist("init.mp4", &segs, Some(KEY_URI));
        assert!(encrypted.contains("#EXT-X-MAP:URI=\"init.mp4\"\n#EXT-X-KEY:METHOD=AES-128,URI=\"../key\"\n"));
        assert!(text.contains("#EXT-X-TARGETDURATION:4\n"));
        assert!(text.contains("#EXT-X-PLAYLIST-TYPE:VOD\n"));
        assert!(text.contains("#EXT-X-MAP:URI=\"init.mp4\"\n"));
        assert!(text.ends_with("#EXTINF:1.20000,\ns2.m4s\n#EXT-X-ENDLIST\n"));
        let (peak, avg) = bitrates(&segs);
        assert_eq!(peak, (3000.0 * 8.0 / 4.4) as u64);
        assert_eq!(avg, (4100.0 * 8.0 / 9.6) as u64);
    }

    #[test]
    fn read_gives_back_what_was_written() {
        let listed = vec![
            Listed { init: "init0.mp4", uri: "s0.m4s", duration: 4.0, gap: false, date: None },
            Listed { init: "init0.mp4", uri: "s1.m4s", duration: 2.5, gap: true, date: None },
            Listed { init: "init1.mp4", uri: "s2.m4s", duration: 1.25, gap: false, date: None },
        ];
        for key in [None, Some(KEY_URI)] {
            let text = media_playlist(Some("init0.mp4"), &listed, key);
            assert_eq!(read(&text), Some(listed.clone()), "{text}");
        }
        assert_eq!(read("#EXTM3U\n#EXTINF:4.0,\ns0.m4s\n"), None, "no map");

        // Dates: stated for the first, derived while they follow, stated again after a pause of
        // the clock and after a discontinuity.
        let t = 1_796_000_000_000;
        let dated = vec![
            Listed { init: "init0.mp4", uri: "s0.m4s", duration: 4.0, gap: false, date: Some(t) },
            Listed { init: "init0.mp4", uri: "s1.m4s", duration: 2.5, gap: false, date: Some(t + 4000) },
            Listed { init: "init0.mp4", uri: "s2.m4s", duration: 2.0, gap: true, date: Some(t + 9500) },
            Listed { init: "init1.mp4", uri: "s3.m4s", duration: 2.0, gap: false, date: Some(t + 11_520) },
        ];
        let text = media_playlist(Some("init0.mp4"), &dated, None);
        assert_eq!(text.matches("#EXT-X-PROGRAM-DATE-TIME:").count(), 3, "{text}");
        assert!(text.contains("#EXT-X-PROGRAM-DATE-TIME:2026-11-30T00:53:20.000Z"), "{text}");
        assert_eq!(read(&text), Some(dated), "{text}");
        assert_eq!(read("#EXTM3U\n#EXT-X-MAP:URI=\"i.mp4\"\n#EXTINF:x,\ns0.m4s\n"), None);
    }
}
