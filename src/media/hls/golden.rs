//! Every byte the playlists serve, pinned: the texts of `golden/` were rendered before live and
//! VOD shared this module, so a change of a single byte fails here.

use chrono::{TimeZone, Utc};

use crate::media::hls::live::{Config, MediaPlaylist, Part, RenditionReport, Window};
use crate::media::hls::master::{render_master, AudioRendition, Variant};
use crate::media::hls::vod::{transcoded_playlist, Segment, KEY_URI};

fn vod_segments() -> Vec<Segment> {
    vec![
        Segment { uri: "s0.m4s".into(), duration: 4.0, bytes: 1000 },
        Segment { uri: "s1.m4s".into(), duration: 4.4, bytes: 3000 },
        Segment { uri: "s2.m4s".into(), duration: 1.2333333, bytes: 100 },
    ]
}

/// A live playlist through a reconnect, with wall-clock times and a few parts of every segment.
fn live(window: Window, key: bool, end: bool) -> MediaPlaylist {
    let key_uri = key.then(|| "../../key".to_string());
    let config = Config { target_duration: 2, part_target: 0.3336666, window, key_uri, least_listed: 0.0 };
    let mut p = MediaPlaylist::new(config, "init0.mp4".into());
    let t0 = Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).single().expect("a valid time");
    let mut n = 0;
    for msn in 0..12u64 {
        if msn == 7 {
            p.discontinuity("init1.mp4".into(), |m| format!("s{m}.m4s"));
        }
        for i in 0..6 {
            let pdt = t0 + chrono::Duration::milliseconds((msn * 2000 + i * 333) as i64);
            p.push_part(
                Part { duration: 0.3333, independent: i % 3 == 0, uri: format!("p{n}.m4s") },
                Some(pdt),
            );
            n += 1;
        }
        if msn < 11 {
            p.close_segment(format!("s{msn}.m4s"));
        }
    }
    p.set_preload_hint(Some(format!("p{n}.m4s")));
    if end {
        p.close_segment("s11.m4s".into());
        p.end();
    }
    p
}

fn reports() -> Vec<RenditionReport> {
    vec![RenditionReport { uri: "../audio/index.m3u8".into(), last_msn: 11, last_part: 5 }]
}

fn variants() -> Vec<Variant> {
    let v = |name: &str, bandwidth, width, height, frame_rate| Variant {
        uri: format!("{name}/index.m3u8"),
        bandwidth,
        width,
        height,
        codec: "avc1.64001f".into(),
        frame_rate,
    };
    vec![v("480p", 1_700_000, 854, 480, Some(29.97)), v("720p", 3_300_000, 1280, 720, None)]
}

fn texts() -> Vec<(&'static str, String)> {
    let audio = AudioRendition { uri: "audio/index.m3u8".into(), codec: "mp4a.40.2".into(), channels: 2 };
    vec![
        ("vod.m3u8", transcoded_playlist("init.mp4", &vod_segments(), None)),
        ("vod-key.m3u8", transcoded_playlist("init.mp4", &vod_segments(), Some(KEY_URI))),
        ("vod-empty.m3u8", transcoded_playlist("init.mp4", &[], None)),
        ("live.m3u8", live(Window::Segments(8), false, false).render(false, &reports())),
        ("live-key-skip.m3u8", live(Window::Segments(8), true, false).render(true, &reports())),
        ("live-dvr-key-ended.m3u8", live(Window::Seconds(60.0), true, true).render(false, &[])),
        ("live-dvr-skip.m3u8", live(Window::Seconds(60.0), false, false).render(true, &[])),
        ("master.m3u8", render_master(&variants(), Some(&audio))),
        ("master-silent.m3u8", render_master(&variants(), None)),
    ]
}

#[test]
fn playlists_are_byte_for_byte_what_they_were() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/media/hls/golden");
    for (name, text) in texts() {
        let path = dir.join(name);
        if std::env::var_os("SLUICE_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let pinned = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(text, pinned, "{name} changed");
    }
}
