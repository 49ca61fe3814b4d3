//! The playlist model on plain values: windows, parts, blocking reloads, delta updates, ends.

use super::*;

const PART: f64 = 1.0 / 3.0;

fn playlist(window: Window) -> MediaPlaylist {
    MediaPlaylist::new(
        Config { target_duration: 2, part_target: PART, window, key_uri: None, least_listed: 0.0 },
        "init.mp4".into(),
    )
}

/// Publishes `segments` segments of 6 parts (2 s each).
fn feed(p: &mut MediaPlaylist, segments: usize) {
    for _ in 0..segments {
        let msn = p.next_msn;
        for i in 0..6 {
            p.push_part(Part { duration: PART, independent: i == 0, uri: format!("seg{msn}.{i}.m4s") }, None);
        }
        p.close_segment(format!("seg{msn}.m4s"));
    }
}

fn tag_values<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    text.lines().filter_map(|l| l.strip_prefix(tag)).collect()
}

/// The RFC's invariants on any rendered playlist.
fn check(text: &str) {
    let target: f64 = tag_values(text, "#EXT-X-TARGETDURATION:")[0].parse().unwrap();
    let part_target: f64 = tag_values(text, "#EXT-X-PART-INF:PART-TARGET=")[0].parse().unwrap();
    for d in tag_values(text, "#EXTINF:") {
        let d: f64 = d.trim_end_matches(',').parse().unwrap();
        assert!(d.round() <= target, "EXTINF {d} rounds above TARGETDURATION {target}");
    }
    for p in tag_values(text, "#EXT-X-PART:DURATION=") {
        let d: f64 = p.split(',').next().unwrap().parse().unwrap();
        assert!(d <= part_target + 1e-9, "part {d} above PART-TARGET {part_target}");
    }
    let control = tag_values(text, "#EXT-X-SERVER-CONTROL:")[0];
    assert!(control.contains("CAN-BLOCK-RELOAD=YES"));
    let hold_back: f64 =
        control.split("PART-HOLD-BACK=").nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(hold_back >= 2.0 * part_target, "PART-HOLD-BACK at least twice PART-TARGET");
    let skip_until: f64 = control.split("CAN-SKIP-UNTIL=").nth(1).unwrap().parse().unwrap();
    assert!(skip_until >= 6.0 * target, "CAN-SKIP-UNTIL at least six target durations");
    assert!(text.starts_with("#EXTM3U\n"));
}

#[test]
fn live_window_slides_with_media_sequence() {
    let mut p = playlist(Window::Segments(3));
    feed(&mut p, 5);
    let text = p.render(false, &[]);
    check(&text);
    assert_eq!(tag_values(&text, "#EXT-X-MEDIA-SEQUENCE:"), ["2"]);
    assert_eq!(tag_values(&text, "#EXTINF:").len(), 3);
    assert!(text.contains("seg4.m4s") && !text.contains("seg1.m4s"));
    assert_eq!(tag_values(&text, "#EXT-X-MAP:URI="), ["\"init.mp4\""]);
}

#[test]
fn parts_preload_hint_and_the_open_segment() {
    let mut p = playlist(Window::Segments(10));
    feed(&mut p, 1);
    assert_eq!(
        p.push_part(Part { duration: PART, independent: true, uri: "seg1.0.m4s".into() }, None),
        (1, 0)
    );
    assert_eq!(
        p.push_part(Part { duration: PART, independent: false, uri: "seg1.1.m4s".into() }, None),
        (1, 1)
    );
    p.set_preload_hint(Some("seg1.2.m4s".into()));
    let text =
        p.render(false, &[RenditionReport { uri: "../480p/index.m3u8".into(), last_msn: 1, last_part: 1 }]);
    check(&text);
    assert!(text.contains("#EXT-X-PART:DURATION=0.33333,URI=\"seg1.0.m4s\",INDEPENDENT=YES\n"));
    assert!(text.contains("#EXT-X-PART:DURATION=0.33333,URI=\"seg1.1.m4s\"\n"));
    assert!(text.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"seg1.2.m4s\"\n"));
    assert!(text.contains("#EXT-X-RENDITION-REPORT:URI=\"../480p/index.m3u8\",LAST-MSN=1,LAST-PART=1\n"));
    // The open segment has parts but no EXTINF yet.
    assert_eq!(tag_values(&text, "#EXTINF:").len(), 1);
    assert_eq!(p.last_part(), Some((1, 1)));
}

#[test]
fn parts_are_listed_only_for_the_last_three_target_durations() {
    let mut p = playlist(Window::Segments(10));
    feed(&mut p, 6);
    let text = p.render(false, &[]);
    check(&text);
    // 6 s of the 12 s: the last 3 segments keep their parts.
    assert_eq!(tag_values(&text, "#EXT-X-PART:").len(), 3 * 6);
    assert!(!text.contains("seg2.0.m4s") && text.contains("seg3.0.m4s"));
}

#[test]
fn dvr_window_keeps_its_seconds_and_slides() {
    let mut p = playlist(Window::Seconds(20.0));
    feed(&mut p, 30);
    let text = p.render(false, &[]);
    check(&text);
    let kept: f64 =
        tag_values(&text, "#EXTINF:").iter().map(|d| d.trim_end_matches(',').parse::<f64>().unwrap()).sum();
    assert!((20.0..22.0).contains(&kept), "kept {kept} s");
    assert_eq!(tag_values(&text, "#EXT-X-MEDIA-SEQUENCE:"), ["20"]);
    feed(&mut p, 1);
    assert_eq!(p.media_sequence(), 21, "the window slides one segment per segment");
}

#[test]
fn delta_updates_skip_only_beyond_the_skip_boundary() {
    let mut p = playlist(Window::Seconds(60.0));
    feed(&mut p, 30);
    let full = p.render(false, &[]);
    let delta = p.render(true, &[]);
    check(&delta);
    let skipped: usize = tag_values(&delta, "#EXT-X-SKIP:SKIPPED-SEGMENTS=")[0].parse().unwrap();
    let kept: Vec<f64> =
        tag_values(&delta, "#EXTINF:").iter().map(|d| d.trim_end_matches(',').parse().unwrap()).collect();
    assert_eq!(skipped + kept.len(), tag_values(&full, "#EXTINF:").len());
    let can_skip_until = 12.0;
    let kept_total: f64 = kept.iter().sum();
    assert!(kept_total >= can_skip_until, "nothing within CAN-SKIP-UNTIL of the end is skipped");
    assert!(kept_total - kept[0] < can_skip_until, "every segment beyond the boundary is skipped");
    assert_eq!(tag_values(&delta, "#EXT-X-MEDIA-SEQUENCE:"), tag_values(&full, "#EXT-X-MEDIA-SEQUENCE:"));
    // Unaligned durations: no skipped segment may reach into the last CAN-SKIP-UNTIL seconds.
    let mut odd = playlist(Window::Seconds(60.0));
    for n in 0..25 {
        let parts = 4 + n % 3; // 1.33 s to 2 s segments
        for i in 0..parts {
            odd.push_part(Part { duration: PART, independent: i == 0, uri: format!("o{n}.{i}") }, None);
        }
        odd.close_segment(format!("o{n}"));
    }
    let delta = odd.render(true, &[]);
    check(&delta);
    let kept: Vec<f64> =
        tag_values(&delta, "#EXTINF:").iter().map(|d| d.trim_end_matches(',').parse().unwrap()).collect();
    let kept_total: f64 = kept.iter().sum();
    assert!(kept_total >= can_skip_until - 1e-3, "kept {kept_total} s");
    assert!(tag_values(&delta, "#EXT-X-SKIP:SKIPPED-SEGMENTS=").len() == 1);
    // A discontinuity beyond the boundary is skipped with its segment: the delta lists no
    // segment that ends more than CAN-SKIP-UNTIL from its end (it stopped there until 2026-11-29).
    let mut reconnected = playlist(Window::Seconds(60.0));
    feed(&mut reconnected, 5);
    reconnected.discontinuity("init1.mp4".into(), |msn| format!("seg{msn}.m4s"));
    feed(&mut reconnected, 10);
    let delta = reconnected.render(true, &[]);
    check(&delta);
    assert_eq!(tag_values(&delta, "#EXT-X-SKIP:SKIPPED-SEGMENTS="), ["9"]);
    assert!(!delta.contains("#EXT-X-DISCONTINUITY\n"), "{delta}");
    assert_eq!(tag_values(&delta, "#EXT-X-DISCONTINUITY-SEQUENCE:"), ["0"], "the full playlist's");
    assert!(delta.contains("#EXT-X-MAP:URI=\"init1.mp4\""), "the first listed segment's section");
    // A short playlist has nothing to skip.
    let mut short = playlist(Window::Segments(3));
    feed(&mut short, 3);
    assert!(!short.render(true, &[]).contains("#EXT-X-SKIP"));
}

#[test]
fn a_reconnect_continues_after_a_discontinuity_and_the_sequence_counts_it_out() {
    let mut p = playlist(Window::Segments(3));
    feed(&mut p, 2);
    p.push_part(Part { duration: PART, independent: true, uri: "seg2.0.m4s".into() }, None);
    p.discontinuity("init1.mp4".into(), |msn| format!("seg{msn}.m4s"));
    assert_eq!(p.next_msn(), 3, "the open segment was closed with the part it had");
    feed(&mut p, 1);
    let text = p.render(false, &[]);
    check(&text);
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 1);
    // RFC 8216bis 6.2.2: a playlist that lists a discontinuity states its sequence, from 0.
    assert_eq!(tag_values(&text, "#EXT-X-DISCONTINUITY-SEQUENCE:"), ["0"]);
    let before = text.find("#EXT-X-DISCONTINUITY\n").unwrap();
    assert!(text[..before].contains("seg2.m4s"), "the short segment before the reconnect");
    assert!(
        text[before..].starts_with("#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"init1.mp4\"\n"),
        "the new initialization section follows the discontinuity"
    );
    assert!(text[before..].contains("seg3.m4s"));
    assert_eq!(tag_values(&text, "#EXT-X-MAP:URI="), ["\"init.mp4\"", "\"init1.mp4\""]);
    feed(&mut p, 3);
    let text = p.render(false, &[]);
    check(&text);
    assert_eq!(tag_values(&text, "#EXT-X-DISCONTINUITY-SEQUENCE:"), ["1"], "counted once it left the window");
    assert!(!text.contains("#EXT-X-DISCONTINUITY\n"));
    assert_eq!(tag_values(&text, "#EXT-X-MAP:URI="), ["\"init1.mp4\""]);
}

#[test]
fn a_push_that_ended_hints_the_next_ones_section_until_its_first_part() {
    let mut p = playlist(Window::Segments(5));
    feed(&mut p, 2);
    p.set_preload_hint(Some("p13.m4s".into()));
    p.set_map_hint(Some("init1.mp4".into()));
    let text = p.render(false, &[]);
    assert!(text.ends_with(
        "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p13.m4s\"\n#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"init1.mp4\"\n"
    ));
    p.discontinuity("init1.mp4".into(), |msn| format!("seg{msn}.m4s"));
    assert!(p.render(false, &[]).contains("TYPE=MAP"), "hinted until the part that needs it");
    p.push_part(Part { duration: PART, independent: true, uri: "p13.m4s".into() }, None);
    let text = p.render(false, &[]);
    assert!(!text.contains("TYPE=MAP"), "{text}");
    assert!(text.contains("#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"init1.mp4\""), "{text}");
}

#[test]
fn the_window_never_lists_less_than_three_target_durations() {
    // The `source` variant: a 6-s target with 2-s segments and the 8-segment window keeps 18 s.
    let mut p = MediaPlaylist::new(
        Config {
            target_duration: 6,
            part_target: PART,
            window: Window::Segments(8),
            key_uri: None,
            least_listed: 0.0,
        },
        "init.mp4".into(),
    );
    feed(&mut p, 20);
    let listed: f64 = p.segments().map(|s| s.duration).sum();
    assert!(listed >= 18.0 - 1e-6, "{listed} s listed");
    assert_eq!(p.segments().count(), 9);
}

#[test]
fn blocking_requests() {
    let mut p = playlist(Window::Segments(10));
    feed(&mut p, 2); // segments 0 and 1, 6 parts each
    p.push_part(Part { duration: PART, independent: true, uri: "seg2.0.m4s".into() }, None);
    assert_eq!(p.wait_for(1, None), Wait::Ready);
    assert_eq!(p.wait_for(2, None), Wait::Hold, "segment 2 is not complete");
    assert_eq!(p.wait_for(2, Some(0)), Wait::Ready);
    assert_eq!(p.wait_for(2, Some(1)), Wait::Hold, "the next part");
    assert_eq!(p.wait_for(1, Some(6)), Wait::Ready, "past segment 1's last part is segment 2's first");
    assert_eq!(p.wait_for(2, Some(3)), Wait::Hold);
    assert_eq!(p.wait_for(2, Some(4)), Wait::TooFarAhead, "beyond the advance part limit");
    assert_eq!(p.wait_for(4, None), Wait::Hold);
    assert_eq!(p.wait_for(5, None), Wait::TooFarAhead, "more than two segments ahead");
    // A reconnect closes segment 2 after two parts: a player that asked for its fifth (parts
    // it counted on from segment 1) waits for segment 3's first; it is not refused.
    p.push_part(Part { duration: PART, independent: true, uri: "seg2.1.m4s".into() }, None);
    p.discontinuity("init1.mp4".into(), |msn| format!("seg{msn}.m4s"));
    assert_eq!(p.wait_for(2, Some(5)), Wait::Hold, "past a short segment's last part");
    assert_eq!(p.wait_for(3, Some(0)), Wait::Hold);
    p.end();
    assert_eq!(p.wait_for(4, None), Wait::Ready, "an ended playlist answers at once");
}

#[test]
fn the_end_lists_endlist_and_no_hint() {
    let mut p = playlist(Window::Segments(5));
    feed(&mut p, 2);
    p.set_preload_hint(Some("seg2.0.m4s".into()));
    p.end();
    let text = p.render(false, &[]);
    check(&text);
    assert!(text.contains("#EXT-X-ENDLIST\n"));
    assert!(!text.contains("PRELOAD-HINT"));
}
