//! The live packager's cut planning (`media::live::split`), fed what a push controls: the
//! frame rate its video caps claim (any number), its AAC sample rate (any 24-bit value or worse),
//! and every frame's timestamps and keyframe flag, which reach the splitter from the network on a
//! streaming thread. Settings are drawn from what the configuration accepts (parts of 200–1000
//! ms, segments of 1–6 s and at least three parts). Nothing may panic; a plan stays within the
//! bounds it promises; a segment starts only at a keyframe. Run with `-timeout=2`: a plan that
//! takes long on a claimed rate is a finding too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::media::live::split::{self, Plan, Split, Splitter};

/// Checks a plan's layout, when it has one, against the bounds `split::layout` promises.
fn check(plan: Plan) {
    let Plan { frame, frames, part_frames: c } = plan;
    assert!(frame.is_finite() && frame > 0.0, "frame {frame}");
    let target = plan.part_target();
    assert!(target.is_finite() && target > 0.0);
    if let Some(sizes) = split::layout(frames, c, frame) {
        assert_eq!(sizes.iter().sum::<u32>(), frames, "{sizes:?}");
        assert!(
            sizes.iter().all(|&n| n >= 1 && f64::from(n) * frame <= target + 1e-9),
            "{sizes:?} > {target}"
        );
        let (last, others) = sizes.split_last().expect("a part");
        assert!(f64::from(*last) * frame > split::SHORTEST_LAST_PART, "{sizes:?}");
        // RFC 8216bis 4.4.4.9: every part but the last at least 85 % of PART-TARGET.
        assert!(
            others.iter().all(|&n| f64::from(n) * frame >= 0.85 * target),
            "{sizes:?} < 85 % of {target}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 17 {
        return;
    }
    let u16_at = |i: usize| u16::from_le_bytes([data[i], data[i + 1]]);
    let part_ms = 200 + u32::from(u16_at(0)) % 801;
    let segment_ms = 1000 + u32::from(u16_at(2)) % 5001;
    if segment_ms < 3 * part_ms {
        return;
    }
    let (part, segment) = (f64::from(part_ms) / 1e3, f64::from(segment_ms) / 1e3);
    let mut f64_bytes = [0u8; 8];
    f64_bytes.copy_from_slice(&data[4..12]);
    let claimed_fps = f64::from_le_bytes(f64_bytes);
    let aac_rate = i32::from_le_bytes([data[12], data[13], data[14], data[15]]);
    let mode = data[16];

    // The plans `pipeline` makes for a video and an AAC rendition.
    let video = Plan::video(segment, part, Some(claimed_fps));
    check(video);
    check(Plan::aac(segment, part, aac_rate));

    let mut splitter = if mode & 1 == 0 {
        Splitter::at_keyframes(segment, video)
    } else {
        Splitter::at_any_frame(segment, video)
    };
    // Frames as records of 7 bytes: the decode time's step from the last frame (µs, signed:
    // clocks go back and jump), the composition offset (ms, signed) and the keyframe flag.
    let mut dts: u64 = u64::from(mode) << 40;
    for record in data[17..].chunks_exact(7) {
        let step = i64::from(i32::from_le_bytes([record[0], record[1], record[2], record[3]])) * 1_000;
        let cts = i64::from(i16::from_le_bytes([record[4], record[5]])) * 1_000_000;
        let keyframe = record[6] & 1 == 1;
        dts = dts.saturating_add_signed(step);
        let pts = dts.saturating_add_signed(cts);
        if let Some(Split::Segment) = splitter.next(pts, dts, keyframe) {
            assert!(keyframe, "a segment started at a frame that is not a keyframe");
        }
    }
});
