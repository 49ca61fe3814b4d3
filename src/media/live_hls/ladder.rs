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
    fn codec_strings() {
        assert_eq!(avc1_codec(&[1, 0x64, 0x00, 0x1f, 0xff]).as_deref(), Some("avc1.64001f"));
        assert_eq!(avc1_codec(&[0, 0x64]), None);
        assert_eq!(mp4a_codec(&[0x12, 0x10]).as_deref(), Some("mp4a.40.2"), "AAC-LC");
        assert_eq!(mp4a_codec(&[0x2b, 0x92]).as_deref(), Some("mp4a.40.5"), "HE-AAC");
        assert_eq!(mp4a_codec(&[]), None);
    }
}
