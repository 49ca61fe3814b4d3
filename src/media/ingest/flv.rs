//! FLV framing of RTMP media: RTMP audio and video payloads are FLV tag bodies. [`video`] and
//! [`audio`] read the few bytes before the codec's own data (FLV 10.1, annex E.4.2–E.4.3: the
//! codec, the frame type, the AVC/AAC packet type, the composition time) so that the push's
//! H.264 and AAC go to its pipeline as they came, without a demuxer; [`Clock`] makes their
//! timestamps as `flvdemux` does. [`flv_tags`] reads whole tags (the tests read clips and
//! GStreamer's `flvmux` output with it).

use bytes::Bytes;

/// FLV tag types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Audio = 8,
    Video = 9,
}

/// FLV's video codec id of H.264 (AVC) and its sound format of AAC.
const AVC: u8 = 7;
const AAC: u8 = 10;

/// What an RTMP video message holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Video {
    /// An AVC sequence header: the AVCDecoderConfigurationRecord (`codec_data`).
    Config(Bytes),
    /// One access unit, its NAL units length-prefixed as the configuration says; `cts`:
    /// presentation less decode time, in ms.
    Frame { key: bool, cts: i32, data: Bytes },
    /// Nothing to pass on: an end of sequence, a video info/command frame, an empty body.
    Skip,
}

/// What an RTMP audio message holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Audio {
    /// An AAC sequence header: the AudioSpecificConfig (`codec_data`).
    Config(Bytes),
    /// One raw AAC frame.
    Frame(Bytes),
    Skip,
}

/// Reads a video tag body. Errs, naming it, on a codec other than H.264: Sluice takes H.264
/// only (docs/live-ingest.md), and enhanced RTMP's FourCC headers (HEVC, AV1) are not read.
pub fn video(body: &Bytes) -> Result<Video, String> {
    let Some(&first) = body.first() else { return Ok(Video::Skip) };
    if first & 0x80 != 0 {
        return Err("the video is in an enhanced-RTMP codec (HEVC, AV1, VP9); only H.264 is taken".into());
    }
    let (frame_type, codec) = (first >> 4, first & 0x0F);
    if codec != AVC {
        return Err(format!("the video is not H.264 (FLV codec id {codec}); only H.264 is taken"));
    }
    // Frame type 5 is a video info/command frame, which holds no picture.
    if frame_type == 5 || body.len() < 5 {
        return Ok(Video::Skip);
    }
    // A signed 24-bit composition time.
    let cts = (i32::from(body[2]) << 24 | i32::from(body[3]) << 16 | i32::from(body[4]) << 8) >> 8;
    Ok(match body[1] {
        0 => Video::Config(body.slice(5..)),
        1 if body.len() > 5 => Video::Frame { key: frame_type == 1, cts, data: body.slice(5..) },
        _ => Video::Skip,
    })
}

/// Reads an audio tag body. Errs, naming it, on a sound format other than AAC.
pub fn audio(body: &Bytes) -> Result<Audio, String> {
    let Some(&first) = body.first() else { return Ok(Audio::Skip) };
    let format = first >> 4;
    if format != AAC {
        return Err(format!("the audio is not AAC (FLV sound format {format}); only AAC is taken"));
    }
    Ok(match body.get(1) {
        Some(0) if body.len() > 2 => Audio::Config(plain_asc(body.slice(2..))),
        Some(1) if body.len() > 2 => Audio::Frame(body.slice(2..)),
        _ => Audio::Skip,
    })
}

/// An AudioSpecificConfig in its plain form: AAC-LC that signals, after its two bytes, the
/// backward-compatible extension saying there is no SBR (ffmpeg's FLV muxer writes
/// `11 90 56 e5 00` for 48 kHz stereo) is the same configuration as its first two bytes, which is
/// what `aacparse` makes of ADTS (SRT). One form for both lets a session's audio rendition keep
/// one initialization section when its input changes between RTMP and SRT (hls.js 1.6 stops an
/// audio track for good at a new one that a partial segment brings).
pub fn plain_asc(config: Bytes) -> Bytes {
    let lc = config.first().is_some_and(|b| b >> 3 == 2);
    let no_sbr = config.len() == 5
        && (u16::from_be_bytes([config[2], config[3]]) >> 5) == 0x2b7
        && config[3] & 0x1f == 5
        && config[4] & 0x80 == 0;
    if lc && no_sbr {
        config.slice(..2)
    } else {
        config
    }
}

/// The SPS and PPS of an AVC configuration (ISO/IEC 14496-15 §5.3.3.1), as NAL units prefixed
/// with the length size it gives, ready to go before a keyframe's own: what `h264parse
/// config-interval=-1` put in band. `None` for a configuration cut short.
pub fn parameter_sets(config: &[u8]) -> Option<Vec<u8>> {
    let size = usize::from(config.get(4)? & 0x03) + 1;
    let mut out = Vec::new();
    let mut at = 5;
    for mask in [0x1F, 0xFF] {
        let count = config.get(at)? & mask;
        at += 1;
        for _ in 0..count {
            let len = usize::from(u16::from_be_bytes([*config.get(at)?, *config.get(at + 1)?]));
            let nal = config.get(at + 2..at + 2 + len)?;
            out.extend_from_slice(&(len as u32).to_be_bytes()[4 - size..]);
            out.extend_from_slice(nal);
            at += 2 + len;
        }
    }
    Some(out)
}

/// The timestamps of one track (ms), as `flvdemux` makes them: RTMP's own, except that a jump
/// back by 2 s or more is taken for a publisher's new clock and the track continues from where
/// it was (a jump forward is kept: it is time that passed).
#[derive(Debug, Default)]
pub struct Clock {
    last: Option<u32>,
    offset: i64,
}

/// A jump back by this much (ms) is a new clock, not a reordering.
const RESYNC: i64 = 2000;

impl Clock {
    /// The decode time (ms) of a tag stamped `timestamp`.
    pub fn decode_time(&mut self, timestamp: u32) -> i64 {
        if let Some(last) = self.last {
            // As a signed 32-bit difference, as RTMP's clocks wrap.
            let step = i64::from(timestamp.wrapping_sub(last) as i32);
            if step <= -RESYNC {
                self.offset -= step;
            }
        }
        self.last = Some(timestamp);
        i64::from(timestamp) + self.offset
    }
}

/// The tags of an FLV stream after its header, `(type, timestamp ms, body)` (the tests read
/// clips and GStreamer's `flvmux` output with it). It stops at a tag cut short.
pub fn flv_tags(flv: &[u8]) -> Vec<(u8, u32, Vec<u8>)> {
    let mut tags = Vec::new();
    let mut at = 13; // the 9-byte header and the first previous-tag size
    while at + 11 <= flv.len() {
        let size = u32::from_be_bytes([0, flv[at + 1], flv[at + 2], flv[at + 3]]) as usize;
        let ts = u32::from_be_bytes([flv[at + 7], flv[at + 4], flv[at + 5], flv[at + 6]]);
        let Some(data) = flv.get(at + 11..at + 11 + size) else { break };
        tags.push((flv[at], ts, data.to_vec()));
        at += 11 + size + 4;
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_aac_configuration_without_sbr_is_given_in_its_plain_form() {
        let plain = |b: &'static [u8]| plain_asc(Bytes::from_static(b));
        assert_eq!(plain(&[0x11, 0x90, 0x56, 0xe5, 0x00]), Bytes::from_static(&[0x11, 0x90]), "ffmpeg's LC");
        assert_eq!(plain(&[0x12, 0x10]), Bytes::from_static(&[0x12, 0x10]));
        // SBR present (HE-AAC signalled backward-compatibly): kept whole.
        assert_eq!(plain(&[0x11, 0x90, 0x56, 0xe5, 0x80]).len(), 5);
        // Not LC (HE-AAC explicit, AOT 5): kept whole.
        assert_eq!(plain(&[0x29, 0x90, 0x56, 0xe5, 0x00]).len(), 5);
        let body = Bytes::from_static(&[0xAF, 0, 0x11, 0x90, 0x56, 0xe5, 0x00]);
        assert!(matches!(audio(&body), Ok(Audio::Config(c)) if c.as_ref() == [0x11, 0x90]));
    }

    #[test]
    fn video_bodies() {
        let body = |b: &[u8]| Bytes::copy_from_slice(b);
        assert_eq!(video(&body(&[0x17, 0, 0, 0, 0, 1, 0x64])), Ok(Video::Config(body(&[1, 0x64]))));
        assert_eq!(
            video(&body(&[0x17, 1, 0, 0, 0x21, 0, 0, 0, 1, 0x65])),
            Ok(Video::Frame { key: true, cts: 33, data: body(&[0, 0, 0, 1, 0x65]) })
        );
        assert_eq!(
            video(&body(&[0x27, 1, 0xFF, 0xFF, 0xDF, 9])),
            Ok(Video::Frame { key: false, cts: -33, data: body(&[9]) }),
            "an inter frame; its composition time is signed"
        );
        assert_eq!(video(&body(&[0x17, 2, 0, 0, 0])), Ok(Video::Skip), "end of sequence");
        assert_eq!(video(&body(&[0x57, 0])), Ok(Video::Skip), "a command frame");
        assert_eq!(video(&body(&[0x17, 1, 0, 0])), Ok(Video::Skip), "cut short");
        assert_eq!(video(&Bytes::new()), Ok(Video::Skip));
        let refused = video(&body(&[0x12, 1, 0, 0, 0, 1])).expect_err("Sorenson H.263");
        assert!(refused.contains("not H.264 (FLV codec id 2)"), "{refused}");
        assert!(video(&body(&[0x90, b'h', b'v', b'c', b'1'])).expect_err("HEVC").contains("enhanced"));
    }

    #[test]
    fn parameter_sets_go_in_band_with_the_configurations_length_size() {
        // version, profile, compatibility, level, 4-byte lengths, one SPS, one PPS.
        let config = [1, 0x64, 0, 0x1F, 0xFF, 0xE1, 0, 3, 0x67, 1, 2, 1, 0, 2, 0x68, 9];
        assert_eq!(parameter_sets(&config), Some(vec![0, 0, 0, 3, 0x67, 1, 2, 0, 0, 0, 2, 0x68, 9]));
        let two_byte = [1, 0x64, 0, 0x1F, 0xFD, 0xE1, 0, 1, 0x67, 0];
        assert_eq!(parameter_sets(&two_byte), Some(vec![0, 1, 0x67]), "2-byte lengths, no PPS");
        assert_eq!(parameter_sets(&config[..10]), None, "cut short");
    }

    #[test]
    fn audio_bodies() {
        let body = |b: &[u8]| Bytes::copy_from_slice(b);
        assert_eq!(audio(&body(&[0xAF, 0, 0x12, 0x10])), Ok(Audio::Config(body(&[0x12, 0x10]))));
        assert_eq!(audio(&body(&[0xAF, 1, 0x21, 0x1B])), Ok(Audio::Frame(body(&[0x21, 0x1B]))));
        assert_eq!(audio(&body(&[0xAF, 1])), Ok(Audio::Skip));
        assert!(audio(&body(&[0x2F, 0xFF])).expect_err("MP3").contains("not AAC (FLV sound format 2)"));
    }

    #[test]
    fn a_clock_that_jumps_back_continues() {
        let mut clock = Clock::default();
        let times: Vec<_> = [0, 33, 20, 5000, 100, 133].into_iter().map(|t| clock.decode_time(t)).collect();
        // 20 is a reordering within the threshold and kept; 5000 → 100 is a new clock.
        assert_eq!(times, [0, 33, 20, 5000, 5000, 5033]);
    }

    /// The 9-byte FLV header (audio and video present) and `PreviousTagSize0`.
    fn flv_header() -> Vec<u8> {
        vec![b'F', b'L', b'V', 1, 0x05, 0, 0, 0, 9, 0, 0, 0, 0]
    }

    /// One FLV tag around an RTMP audio/video payload (which is an FLV tag body), with its
    /// trailing `PreviousTagSize`.
    fn flv_tag(tag: Tag, timestamp_ms: u32, data: &[u8]) -> Vec<u8> {
        let size = data.len() as u32;
        let mut out = Vec::with_capacity(11 + data.len() + 4);
        out.push(tag as u8);
        out.extend_from_slice(&size.to_be_bytes()[1..]);
        out.extend_from_slice(&timestamp_ms.to_be_bytes()[1..]);
        out.push((timestamp_ms >> 24) as u8);
        out.extend_from_slice(&[0, 0, 0]);
        out.extend_from_slice(data);
        out.extend_from_slice(&(11 + size).to_be_bytes());
        out
    }

    #[test]
    fn flv_framing() {
        let t = flv_tag(Tag::Video, 0x0102_0304, &[0xAA, 0xBB]);
        assert_eq!(t[0], 9);
        assert_eq!(&t[1..4], &[0, 0, 2], "data size");
        assert_eq!(&t[4..8], &[0x02, 0x03, 0x04, 0x01], "timestamp, then its extension byte");
        assert_eq!(&t[8..11], &[0, 0, 0]);
        assert_eq!(&t[11..13], &[0xAA, 0xBB]);
        assert_eq!(&t[13..], &13u32.to_be_bytes(), "previous tag size = 11 + data");
        assert_eq!(flv_header().len(), 13);
        let stream = [flv_header(), t, flv_tag(Tag::Audio, 7, &[0xCC])[..11].to_vec()].concat();
        assert_eq!(flv_tags(&stream), [(9, 0x0102_0304, vec![0xAA, 0xBB])], "read back; the cut tag is left");
    }
}
