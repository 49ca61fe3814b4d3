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
}
