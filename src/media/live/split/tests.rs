//! The splitter on plain timestamps: layouts, plans, grids and what a stream can claim.

use super::*;

const MS: u64 = 1_000_000;

/// 30 fps frames in decode order with millisecond-rounded timestamps, as FLV carries them:
/// `(pts, dts, keyframe)` in ns; a keyframe every `gop` frames; with `bframes`, each anchor
/// is followed in decode order by two B-frames shown before it, and the presentation is
/// delayed by two frames.
fn frames(count: u64, gop: u64, bframes: bool) -> Vec<(u64, u64, bool)> {
    let at = |n: u64| (n * 1000 / 30) * MS;
    (0..count)
        .map(|n| {
            let delay = if bframes { 2 } else { 0 };
            // Display order within each mini-GOP of three after the keyframe: P B B → shown
            // as B B P, so the P is shown two frames later and each B one frame earlier.
            let k = n % gop;
            let shown = match (bframes, k) {
                // The keyframe, and the GOP's last frames (no whole mini-GOP): in place.
                (false, _) | (true, 0) => n,
                (true, k) if k + 2 >= gop => n,
                (true, k) if (k - 1) % 3 == 0 => n + 2,
                (true, _) => n - 1,
            };
            (at(shown + delay), at(n), k == 0)
        })
        .collect()
}

fn splits(splitter: &mut Splitter, frames: &[(u64, u64, bool)]) -> Vec<(usize, Split)> {
    frames
        .iter()
        .enumerate()
        .filter_map(|(i, &(pts, dts, key))| splitter.next(pts, dts, key).map(|s| (i, s)))
        .collect()
}

/// What `pipeline` makes for the `source` variant at 30 fps, 200-ms parts, 2-s segments.
fn thirty_fps() -> Splitter {
    Splitter::at_keyframes(2.0, Plan::video(2.0, 0.2, Some(30.0)))
}

/// The splits a segment starting at frame `start` laid out as `sizes` makes.
fn segment(start: usize, sizes: &[usize], first: bool) -> Vec<(usize, Split)> {
    let mut at = start;
    let mut want = Vec::new();
    if !first {
        want.push((start, Split::Segment));
    }
    for size in &sizes[..sizes.len() - 1] {
        at += size;
        want.push((at, Split::Part));
    }
    want
}

#[test]
fn a_segment_ends_in_a_part_longer_than_hls_js_skips() {
    let fps = |f: f64| 1.0 / f;
    // 30 fps, 200-ms parts: four of 7 frames, four of 8; the last 0.267 s.
    assert_eq!(layout(60, 7, fps(30.0)), Some(vec![7, 7, 7, 7, 8, 8, 8, 8]));
    // 25 fps: 333-ms parts (8 frames) end in two of 9; 200-ms ones (7 at least) in one of 8.
    assert_eq!(layout(50, 8, fps(25.0)), Some(vec![8, 8, 8, 8, 9, 9]));
    assert_eq!(layout(50, 7, fps(25.0)), Some(vec![7, 7, 7, 7, 7, 7, 8]));
    // 30 fps, 333-ms parts: six of 10 frames, each 0.333 s.
    assert_eq!(layout(60, 10, fps(30.0)), Some(vec![10; 6]));
    // No layout: 60 fps in parts of 12 or 13 frames (0.217 s at most).
    assert_eq!(layout(120, 12, fps(60.0)), None);
    // So 200-ms parts at 60 fps become about 15 frames (0.25 s), the last 16 ...
    assert_eq!(part_frames(12, 120, fps(60.0)), 15);
    assert_eq!(layout(120, 15, fps(60.0)), Some(vec![14, 15, 15, 15, 15, 15, 15, 16]));
    // ... and AAC at 48 kHz (94 frames a segment) 11 or 12 frames (0.235 s, 0.256 s).
    let aac = 1024.0 / 48_000.0;
    assert_eq!(segment_frames(2.0, aac), 94);
    assert_eq!(part_frames(10, 94, aac), 11);
    assert_eq!(layout(94, 11, aac), Some(vec![11, 11, 12, 12, 12, 12, 12, 12]));
    // Low-rate audio whose parts would be too short for PART-TARGET's slack gets longer
    // parts, laid out or not.
    let coarse = 1024.0 / 8_000.0;
    assert!(long_enough(part_frames(2, 16, coarse), coarse));
}

#[test]
fn audio_segments_keep_to_the_videos_grid() {
    // AAC at 48 kHz with millisecond-rounded timestamps, as FLV carries them: 93.75 frames a
    // segment. Each segment starts within a frame of its place on the 2-s grid the rungs
    // keep (0.1 s after it), however long the push, and ends in a part hls.js does not skip.
    let plan = Plan::aac(2.0, 0.2, 48_000);
    let video = Arc::new(AtomicU64::new(0));
    let mut s = Splitter::at_any_frame(2.0, plan).on_the_videos_grid(video, 0.1);
    let at = |n: u64| (n * 1024 * 1000 / 48_000) * MS;
    let (mut starts, mut last_cut) = (vec![0u64], 0u64);
    let mut shortest_last = u64::MAX;
    for n in 0..94 * 400 {
        match s.next(at(n), at(n), true) {
            Some(Split::Segment) => {
                shortest_last = shortest_last.min(at(n) - last_cut);
                starts.push(at(n));
                last_cut = at(n);
            }
            Some(Split::Part) => last_cut = at(n),
            None => {}
        }
    }
    assert!(starts.len() > 390, "{} segments", starts.len());
    for (k, start) in starts.iter().enumerate().skip(1) {
        let off = (*start as f64 - k as f64 * 2e9 - 1e8).abs() / 1e6;
        // Within a frame; the first segment's end within two (it is laid out as it can be).
        let frames = if k == 1 { 2.0 } else { 1.0 };
        assert!(off <= frames * 1024.0 / 48.0, "segment {k} starts {off} ms off the grid");
    }
    assert!(shortest_last as f64 / 1e9 > SHORTEST_LAST_PART, "a last part of {shortest_last} ns");
    // A rung at 30 fps keeps 60 frames a segment, as before.
    let mut rung = Splitter::at_any_frame(2.0, Plan::video(2.0, 0.2, Some(30.0)));
    let got = splits(&mut rung, &frames(181, 1, false));
    let mut want = segment(0, &[7, 7, 7, 7, 8, 8, 8, 8], true);
    want.extend(segment(60, &[7, 7, 7, 7, 8, 8, 8, 8], false));
    want.extend(segment(120, &[7, 7, 7, 7, 8, 8, 8, 8], false));
    want.push((180, Split::Segment));
    assert_eq!(got, want);
}

#[test]
fn rates_a_stream_claims_are_held_to_what_a_plan_can_take() {
    assert_eq!(video_frame(Some(60.0)), 1.0 / 60.0);
    for claimed in [None, Some(1e6), Some(0.01), Some(f64::NAN), Some(f64::INFINITY)] {
        assert_eq!(video_frame(claimed), 1.0 / 30.0, "{claimed:?}");
    }
    assert_eq!(aac_frame(48_000), 1024.0 / 48_000.0);
    assert_eq!(aac_frame(i32::MAX), 1024.0 / 96_000.0);
    assert_eq!(aac_frame(-1), 1024.0 / 8_000.0);
    // The longest plan within those bounds: 240 fps, 6-s segments, 1-s parts.
    let frame = video_frame(Some(240.0));
    let n = segment_frames(6.0, frame);
    assert!(layout(n, part_frames(240, n, frame), frame).is_some());
}

#[test]
fn every_layout_keeps_the_rfc_bounds() {
    // Each muxer's plan as `pipeline` makes it: video at common rates, AAC at 44.1/48 kHz.
    let plans = |segment, part| {
        let video = [24.0, 25.0, 30_000.0 / 1001.0, 30.0, 50.0, 60.0]
            .map(|fps| Plan::video(segment, part, Some(fps)));
        video.into_iter().chain([44_100, 48_000].map(|rate| Plan::aac(segment, part, rate)))
    };
    for part in [0.2, 0.25, 0.333, 0.5, 1.0] {
        for segment in [1.0, 2.0, 4.0, 6.0] {
            if segment < 3.0 * part {
                continue;
            }
            for plan in plans(segment, part) {
                let Plan { frame, frames: n, part_frames: c } = plan;
                let target = plan.part_target();
                let case = format!("{frame} s frames, {part} s parts, {segment} s segments");
                let sizes = layout(n, c, frame).unwrap_or_else(|| panic!("no layout: {case}"));
                assert_eq!(sizes.iter().sum::<u32>(), n, "{case}");
                let (last, others) = sizes.split_last().unwrap_or_else(|| panic!("{case}"));
                assert!(f64::from(*last) * frame > SHORTEST_LAST_PART, "{case}: {sizes:?}");
                // Every part within PART-TARGET, give or take 2 ms; all but the last at least
                // 85 % of it, less 2 ms.
                for &size in &sizes {
                    assert!(f64::from(size) * frame + 0.002 <= target + 1e-9, "{case}: {sizes:?}");
                }
                for &size in others {
                    assert!(f64::from(size) * frame - 0.002 >= 0.85 * target, "{case}: {sizes:?}");
                }
                // Near the configured part (or seven frames): at most 0.1 s longer.
                let near = part.max(7.0 * frame) + 0.1;
                assert!(f64::from(c) * frame <= near, "{case}: {c} frames");
            }
        }
    }
}

#[test]
fn parts_are_laid_out_in_decode_order_and_segments_start_at_keyframes() {
    for bframes in [false, true] {
        let got = splits(&mut thirty_fps(), &frames(130, 60, bframes));
        let mut want = Vec::new();
        let sizes = [7, 7, 7, 7, 8, 8, 8, 8];
        for start in [0, 60, 120] {
            want.extend(segment(start, &sizes, start == 0).into_iter().filter(|&(i, _)| i < 130));
        }
        assert_eq!(got, want, "with B-frames: {bframes}");
    }
}

#[test]
fn a_late_keyframe_gets_a_part_of_its_own_and_an_irregular_gop_is_learned() {
    // Keyframes every 1.5 s: a segment holds two GOPs (90 frames). The first was planned
    // for 60: laid out to 60, then parts of 7.
    let got = splits(&mut thirty_fps(), &frames(181, 45, false));
    let mut want = segment(0, &[7, 7, 7, 7, 8, 8, 8, 8, 7, 7, 7, 7, 2], true);
    // The second is planned for the 90 it learned: six of 7, six of 8.
    want.extend(segment(90, &[7, 7, 7, 7, 7, 7, 8, 8, 8, 8, 8, 8], false));
    want.push((180, Split::Segment));
    assert_eq!(got, want);
}

#[test]
fn the_first_frame_starts_nothing_and_an_early_keyframe_no_segment() {
    let mut s = thirty_fps();
    assert_eq!(s.next(0, 0, true), None);
    // A keyframe a second in: a part (its decode time is past the first part), not a
    // segment.
    assert_eq!(s.next(1000 * MS, 1000 * MS, true), Some(Split::Part));
    // Two seconds after the segment's keyframe: a segment.
    assert_eq!(s.next(2000 * MS, 2000 * MS, true), Some(Split::Segment));
}

#[test]
fn timestamps_that_go_back_by_more_than_a_segment_start_a_part_or_a_segment() {
    let mut s = thirty_fps();
    assert_eq!(s.next(60_000 * MS, 60_000 * MS, true), None);
    assert_eq!(s.next(60_033 * MS, 60_033 * MS, false), None);
    // The publisher restarts its clock: a delta frame starts a part there...
    assert_eq!(s.next(0, 0, false), Some(Split::Part));
    // ...and parts of 7 frames go on from the new clock.
    assert_eq!(s.next(33 * MS, 33 * MS, false), None);
    assert_eq!(s.next(233 * MS, 233 * MS, false), Some(Split::Part));
    // A keyframe on the new clock starts a segment, since the segment's keyframe was on
    // the old one, more than a segment ahead.
    assert_eq!(s.next(267 * MS, 267 * MS, true), Some(Split::Segment));
    assert_eq!(s.next(300 * MS, 300 * MS, false), None);
    // Going back by less than a segment (a jittery clock) splits nothing.
    assert_eq!(s.next(100 * MS, 100 * MS, false), None);
    assert_eq!(s.next(100 * MS, 100 * MS, true), None);
}

/// Checks a plan's layout, when it has one, against the bounds [`layout`] promises.
fn check_plan(plan: Plan) {
    let Plan { frame, frames, part_frames: c } = plan;
    let target = plan.part_target();
    if let Some(sizes) = layout(frames, c, frame) {
        assert_eq!(sizes.iter().sum::<u32>(), frames, "{sizes:?}");
        let (last, others) = sizes.split_last().expect("a part");
        assert!(f64::from(*last) * frame > SHORTEST_LAST_PART, "{sizes:?}");
        assert!(sizes.iter().all(|&n| f64::from(n) * frame <= target + 1e-9), "{sizes:?} > {target}");
        assert!(
            others.iter().all(|&n| f64::from(n) * frame >= 0.85 * target),
            "{sizes:?} < 85 % of {target}"
        );
    }
}

proptest::proptest! {
    // What a push controls (claimed rates, every frame's timestamps and keyframe flag), with
    // settings the configuration accepts: no panic, plans within their bounds, and a segment
    // only at a keyframe. `fuzz/fuzz_targets/live_split.rs` runs the same for longer.
    #[test]
    fn any_stream_gets_a_bounded_plan_and_segments_only_at_keyframes(
        part_ms in 200u32..=1000,
        segment_ms in 1000u32..=6000,
        fps in proptest::num::f64::ANY,
        aac in proptest::num::i32::ANY,
        at_keyframes in proptest::bool::ANY,
        steps in proptest::collection::vec((-40_000i32..=200_000, -500i16..=500, proptest::bool::ANY), 0..400),
    ) {
        proptest::prop_assume!(segment_ms >= 3 * part_ms);
        let (part, segment) = (f64::from(part_ms) / 1e3, f64::from(segment_ms) / 1e3);
        let video = Plan::video(segment, part, Some(fps));
        check_plan(video);
        check_plan(Plan::aac(segment, part, aac));
        let mut s = if at_keyframes {
            Splitter::at_keyframes(segment, video)
        } else {
            Splitter::at_any_frame(segment, video)
        };
        let mut dts = 10_000 * MS;
        for (step_us, cts_ms, keyframe) in steps {
            dts = dts.saturating_add_signed(i64::from(step_us) * 1_000);
            let pts = dts.saturating_add_signed(i64::from(cts_ms) * MS as i64);
            if s.next(pts, dts, keyframe) == Some(Split::Segment) {
                proptest::prop_assert!(keyframe, "a segment at a frame that is not a keyframe");
            }
        }
    }
}

#[test]
fn a_last_frame_lasts_until_the_next_unless_the_gap_is_over_four_of_its_own() {
    assert!(lasts_until_next(34 * MS, Some(33 * MS)), "a rounded timestamp");
    assert!(lasts_until_next(132 * MS, Some(33 * MS)), "four frames");
    assert!(!lasts_until_next(200 * MS, Some(33 * MS)), "a stall");
    assert!(lasts_until_next(200 * MS, None), "no length of its own");
}
