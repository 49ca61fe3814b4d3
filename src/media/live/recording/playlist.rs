//! The media playlist of a recorded rendition (RFC 8216bis 4.4.3, 4.4.4): fMP4 segments
//! `s<idx>.m4s` from 0, the initialization section of each push generation (`init<g>.mp4`)
//! with an `EXT-X-DISCONTINUITY` where a reconnect started a new one, `EXT-X-PLAYLIST-TYPE:VOD`
//! and `EXT-X-ENDLIST`. Encrypted recordings carry the VOD's key after each map (IV: the
//! sequence number, which is the index, as the VOD transcode's playlists do). A segment the
//! store did not take keeps its place and time, as a gap (`EXT-X-GAP`, RFC 8216bis 4.4.4.7).

use crate::media::hls::vod::{bitrates_of, media_playlist as write_playlist, Listed};

/// A segment of a recorded rendition, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub idx: u64,
    pub generation: u32,
    pub duration: f64,
    pub bytes: u64,
    /// Not in storage: listed as a gap.
    pub lost: bool,
    /// The wall-clock time of its first frame (ms), as the live playlist stated it.
    pub date: Option<i64>,
}

pub fn init_uri(generation: u32) -> String {
    format!("init{generation}.mp4")
}

pub fn segment_uri(idx: u64) -> String {
    format!("s{idx}.m4s")
}

/// The playlist of `segments` (consecutive from 0).
pub fn media_playlist(segments: &[Recorded], key_uri: Option<&str>) -> String {
    let uris: Vec<(String, String)> =
        segments.iter().map(|s| (init_uri(s.generation), segment_uri(s.idx))).collect();
    let listed: Vec<Listed> = segments
        .iter()
        .zip(&uris)
        .map(|(s, (init, uri))| Listed { init, uri, duration: s.duration, gap: s.lost, date: s.date })
        .collect();
    write_playlist(None, &listed, key_uri)
}

/// (peak, average) bits per second, of the segments in storage.
pub fn bitrates(segments: &[Recorded]) -> (u64, u64) {
    bitrates_of(segments.iter().filter(|s| !s.lost).map(|s| (s.duration, s.bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(idx: u64, generation: u32, duration: f64) -> Recorded {
        Recorded { idx, generation, duration, bytes: 250_000, lost: false, date: None }
    }

    #[test]
    fn a_lost_segment_keeps_its_place_as_a_gap() {
        let lost = Recorded { lost: true, bytes: 0, ..seg(1, 0, 2.0) };
        let text = media_playlist(&[seg(0, 0, 2.0), lost.clone(), seg(2, 0, 2.0)], None);
        assert!(
            text.contains("s0.m4s\n#EXT-X-GAP\n#EXTINF:2.00000,\ns1.m4s\n#EXTINF:2.00000,\ns2.m4s\n"),
            "{text}"
        );
        assert_eq!(bitrates(&[seg(0, 0, 2.0), lost]), (1_000_000, 1_000_000), "a gap weighs nothing");
    }

    #[test]
    fn a_reconnect_is_a_discontinuity_with_its_own_map() {
        let text = media_playlist(&[seg(0, 0, 2.0), seg(1, 0, 1.6), seg(2, 1, 2.0)], None);
        assert_eq!(
            text,
            "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n\
             #EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-INDEPENDENT-SEGMENTS\n\
             #EXT-X-MAP:URI=\"init0.mp4\"\n#EXTINF:2.00000,\ns0.m4s\n#EXTINF:1.60000,\ns1.m4s\n\
             #EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"init1.mp4\"\n#EXTINF:2.00000,\ns2.m4s\n#EXT-X-ENDLIST\n"
        );
    }

    #[test]
    fn an_encrypted_recording_names_its_key_after_each_map() {
        let text = media_playlist(&[seg(0, 0, 2.0), seg(1, 3, 2.0)], Some("../key"));
        assert_eq!(text.matches("#EXT-X-KEY:METHOD=AES-128,URI=\"../key\"").count(), 2);
        assert!(text.contains("#EXT-X-KEY:METHOD=NONE\n#EXT-X-MAP:URI=\"init3.mp4\""), "{text}");
    }

    #[test]
    fn bitrates_are_peak_and_average() {
        let (peak, average) = bitrates(&[seg(0, 0, 2.0), Recorded { bytes: 500_000, ..seg(1, 0, 2.0) }]);
        assert_eq!((peak, average), (2_000_000, 1_500_000));
    }
}
