//! The live ladder as plain data: which renditions a push gets, their sizes and bitrates, the
//! `CODECS` strings of their media. No GStreamer here (STYLE habit 2). The master playlist that
//! lists them is shared with VOD ([`crate::media::hls::master`]).

use crate::domain::stream::Quality;

/// The name of the untranscoded variant.
pub const SOURCE: &str = "source";
/// The name of the audio rendition (one, shared by every variant).
pub const AUDIO: &str = "audio";
/// AAC passes through; this is what the master playlist assumes of it when the push does not
/// say (a typical 128 kbit/s stereo encode).
pub const AUDIO_KBPS_GUESS: u64 = 160;

/// One transcoded rendition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub video_kbps: u32,
}

/// The video bitrate of a quality: the usual live ladder for H.264 at 30 fps.
pub fn kbps_for_height(height: u32) -> u32 {
    match height {
        h if h >= 2160 => 14_000,
        h if h >= 1440 => 8_000,
        h if h >= 1080 => 5_000,
        h if h >= 720 => 2_800,
        h if h >= 480 => 1_400,
        h if h >= 360 => 800,
        _ => 400,
    }
}

/// The rungs for a source of `width`×`height`: each quality at or below the source height,
/// highest first, at the source's aspect ratio with even sizes (CONTRACT: Live media — a quality
/// above the source height is left out).
pub fn plan(qualities: &[Quality], width: u32, height: u32) -> Vec<Rung> {
    let mut rungs: Vec<Rung> = qualities
        .iter()
        .filter(|q| q.0 <= height && width > 0 && height > 0)
        .map(|q| {
            let h = q.0;
            let w = (u64::from(width) * u64::from(h) + u64::from(height)) / (2 * u64::from(height)) * 2;
            Rung { name: q.name(), width: (w as u32).max(2), height: h, video_kbps: kbps_for_height(h) }
        })
        .collect();
    rungs.sort_by_key(|r| std::cmp::Reverse(r.height));
    rungs.dedup_by(|a, b| a.name == b.name);
    rungs
}

/// The part (chunk) duration and `PART-TARGET` of a rendition whose frames last `frame` seconds,
/// for a configured part of `part` seconds. Parts are a whole number of frames, at least seven;
/// the first part of a segment can be a frame longer (its keyframe lands on the first frame at or
/// after the segment boundary) and timestamps carry a millisecond or two of rounding, so
/// PART-TARGET is a frame and 2 ms above the part. Then every part fits within PART-TARGET and
/// every regular part is at least 85 % of it, as RFC 8216bis 4.4.4.9 requires.
pub fn part_timing(part: f64, frame: f64) -> (f64, f64) {
    let chunk = (part / frame).round().max(7.0) * frame;
    (chunk, chunk + frame + 0.002)
}

/// `PART-TARGET` of an audio rendition cut every `part` seconds into frames of `frame` seconds
/// (AAC: 1024 samples). Audio has no keyframes to wait for: its parts hold the frames that
/// start within the part, one frame more than fit at most.
pub fn audio_part_target(part: f64, frame: f64) -> f64 {
    (part / frame).ceil() * frame + 0.002
}

/// `avc1.PPCCLL` from an `avcC` record (ISO/IEC 14496-15 5.3.3.1: version, profile,
/// compatibility, level), as RFC 6381 writes it.
pub fn avc1_codec(avcc: &[u8]) -> Option<String> {
    match avcc {
        [1, profile, compat, level, ..] => Some(format!("avc1.{profile:02x}{compat:02x}{level:02x}")),
        _ => None,
    }
}

/// `mp4a.40.N` from an AudioSpecificConfig (ISO/IEC 14496-3 1.6.2.1: the first five bits are
/// the audio object type).
pub fn mp4a_codec(asc: &[u8]) -> Option<String> {
    let aot = asc.first()? >> 3;
    (aot != 0).then(|| format!("mp4a.40.{aot}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(h: u32) -> Quality {
        Quality(h)
    }

    #[test]
    fn rungs_above_the_source_are_left_out_and_keep_the_aspect_ratio() {
        let rungs = plan(&[q(480), q(1080), q(720), q(240)], 1280, 720);
        let names: Vec<&str> = rungs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["720p", "480p", "240p"]);
        assert_eq!((rungs[0].width, rungs[0].height), (1280, 720));
        assert_eq!((rungs[1].width, rungs[1].height), (854, 480));
        assert_eq!((rungs[2].width, rungs[2].height), (426, 240));
        assert!(rungs.iter().all(|r| r.width % 2 == 0));
        // A 4:3 source keeps 4:3; a vertical one stays vertical.
        assert_eq!(plan(&[q(480)], 640, 480)[0].width, 640);
        assert_eq!(plan(&[q(360)], 720, 1280)[0].width, 202);
        assert!(plan(&[q(720)], 640, 360).is_empty(), "nothing at or below a 360p source");
        assert!(rungs.windows(2).all(|w| w[0].video_kbps > w[1].video_kbps));
    }

    #[test]
    fn part_timing_keeps_every_part_within_the_rfc_bounds() {
        for fps in [24.0, 25.0, 30.0, 50.0, 60.0] {
            for part in [0.2, 0.333, 0.5] {
                let frame = 1.0 / fps;
                let (chunk, target) = part_timing(part, frame);
                let frames = chunk / frame;
                assert!(
                    (frames - frames.round()).abs() < 1e-9 && frames.round() >= 7.0,
                    "{fps} fps: {frames} frames"
                );
                assert!((chunk - part).abs() <= frame / 2.0 + 1e-9 || frames.round() == 7.0);
                // Regular parts: the chunk, give or take 2 ms; the longest: a frame more.
                assert!(chunk - 0.002 >= 0.85 * target, "{fps} fps, {part} s: {chunk} vs {target}");
                assert!(chunk + frame + 0.002 <= target + 1e-9);
            }
        }
        // AAC (1024 samples a frame) is cut at the configured part: parts of the frames that
        // fit, one more at most.
        for rate in [44_100.0, 48_000.0] {
            let frame = 1024.0 / rate;
            let target = audio_part_target(0.2, frame);
            let most = (0.2 / frame).ceil() * frame;
            assert!(most <= target && (most - frame) >= 0.85 * target, "{rate} Hz: {most} vs {target}");
        }
        assert!((part_timing(0.2, 1.0 / 30.0).0 - 7.0 / 30.0).abs() < 1e-9, "seven frames at 30 fps");
        assert!((part_timing(0.333, 1.0 / 30.0).0 - 1.0 / 3.0).abs() < 1e-9, "ten frames at 30 fps");
    }

    #[test]
    fn codec_strings() {
        assert_eq!(avc1_codec(&[1, 0x64, 0x00, 0x1f, 0xff]).as_deref(), Some("avc1.64001f"));
        assert_eq!(avc1_codec(&[0, 0x64]), None);
        assert_eq!(mp4a_codec(&[0x12, 0x10]).as_deref(), Some("mp4a.40.2"), "AAC-LC");
        assert_eq!(mp4a_codec(&[0x2b, 0x92]).as_deref(), Some("mp4a.40.5"), "HE-AAC");
        assert_eq!(mp4a_codec(&[]), None);
    }
}
