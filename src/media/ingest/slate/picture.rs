//! A stream's own slate picture (CONTRACT: Continuity, `PUT /streams/<id>/slate`): a JPEG or
//! PNG of at most [`MAX_BYTES`], checked before anything is stored. Its header is read first
//! (the type by its signature, the size from PNG's `IHDR` or JPEG's frame header), so a picture
//! too large to decode cheaply is refused before it is decoded; then it is decoded once
//! (GStreamer's `jpegdec`/`pngdec`), so what is stored is known to decode.

use std::sync::Arc;
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use sha2::{Digest, Sha256};

/// The largest upload.
pub const MAX_BYTES: usize = 2 << 20;
/// The largest width or height (a 2-MiB PNG of one colour can say 100 000 × 100 000).
pub const MAX_SIDE: u32 = 4096;
/// The smallest width or height (any picture is fitted into the stream's size).
pub const MIN_SIDE: u32 = 1;
/// How long the decode check may take.
const DECODE_DEADLINE: Duration = Duration::from_secs(5);

/// The two kinds of picture taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Jpeg,
    Png,
}

impl Kind {
    pub fn content_type(self) -> &'static str {
        match self {
            Kind::Jpeg => "image/jpeg",
            Kind::Png => "image/png",
        }
    }

    pub fn parse(content_type: &str) -> Option<Kind> {
        match content_type {
            "image/jpeg" => Some(Kind::Jpeg),
            "image/png" => Some(Kind::Png),
            _ => None,
        }
    }

    /// What the bytes are, by their signature.
    pub fn sniff(bytes: &[u8]) -> Option<Kind> {
        if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
            Some(Kind::Jpeg)
        } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Kind::Png)
        } else {
            None
        }
    }

    /// The GStreamer elements that decode it from an `appsrc` named `img`.
    fn decoder(self) -> &'static str {
        match self {
            Kind::Jpeg => "appsrc name=img caps=image/jpeg ! jpegparse ! jpegdec",
            Kind::Png => "appsrc name=img caps=image/png ! pngdec",
        }
    }
}

/// Why a picture is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over [`MAX_BYTES`] (413).
    TooLarge,
    /// Not a JPEG or PNG, or not the type its `Content-Type` said (415).
    NotAnImage(String),
    /// A JPEG or PNG that is cut short, does not decode, or is out of size bounds (400).
    Bad(String),
}

/// A picture that passed [`check`].
#[derive(Debug, Clone)]
pub struct Picture {
    pub kind: Kind,
    pub width: u32,
    pub height: u32,
    /// SHA-256 of the bytes, hex.
    pub digest: String,
    pub bytes: Arc<Vec<u8>>,
}

impl Picture {
    /// A stored picture, taken as it was checked at upload.
    pub fn stored(kind: Kind, width: u32, height: u32, digest: String, bytes: Arc<Vec<u8>>) -> Picture {
        Picture { kind, width, height, digest, bytes }
    }

    /// The elements that give it decoded, from an `appsrc` named `img` that [`Picture::feed`]
    /// fills.
    pub(super) fn decoder(&self) -> &'static str {
        self.kind.decoder()
    }

    /// Pushes the picture into `pipeline`'s `img` source and ends it.
    pub(super) fn feed(&self, pipeline: &gst::Pipeline) -> Result<(), String> {
        let src = pipeline
            .by_name("img")
            .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
            .ok_or("slate: no picture source")?;
        src.push_buffer(gst::Buffer::from_slice(self.bytes.as_ref().clone()))
            .map_err(|e| format!("slate: the picture was not taken: {e:?}"))?;
        src.end_of_stream().map_err(|e| format!("slate: {e:?}"))?;
        Ok(())
    }
}

/// Checks an upload said to be `declared` (its `Content-Type`). Blocking: it decodes.
pub fn check(declared: Kind, bytes: Vec<u8>) -> Result<Picture, Refused> {
    if bytes.len() > MAX_BYTES {
        return Err(Refused::TooLarge);
    }
    let kind =
        Kind::sniff(&bytes).ok_or_else(|| Refused::NotAnImage("the body is not a JPEG or PNG".into()))?;
    if kind != declared {
        return Err(Refused::NotAnImage(format!(
            "the body is {}, not the {} its Content-Type says",
            kind.content_type(),
            declared.content_type()
        )));
    }
    let (width, height) = header_size(kind, &bytes).map_err(Refused::Bad)?;
    let bounds = MIN_SIDE..=MAX_SIDE;
    if !bounds.contains(&width) || !bounds.contains(&height) {
        return Err(Refused::Bad(format!(
            "the picture is {width}×{height}; each side must be {MIN_SIDE} to {MAX_SIDE} pixels"
        )));
    }
    let picture =
        Picture { kind, width, height, digest: hex::encode(Sha256::digest(&bytes)), bytes: Arc::new(bytes) };
    let decoded = decode(&picture).map_err(Refused::Bad)?;
    if decoded != (width, height) {
        return Err(Refused::Bad(format!(
            "the picture decodes to {}×{}, not the {width}×{height} its header says",
            decoded.0, decoded.1
        )));
    }
    Ok(picture)
}

/// The size a picture's header says, read without decoding.
pub fn header_size(kind: Kind, bytes: &[u8]) -> Result<(u32, u32), String> {
    let be16 = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]]));
    let be32 = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    match kind {
        Kind::Png => {
            if bytes.get(12..16) != Some(b"IHDR") || be32(8) != Some(13) {
                return Err("the PNG does not begin with its header (IHDR)".into());
            }
            Ok((be32(16).unwrap_or(0), be32(20).unwrap_or(0)))
        }
        Kind::Jpeg => {
            // Markers from after SOI: each 0xFF, a code, and (but for RSTn, TEM) a length.
            let mut at = 2;
            loop {
                let (Some(&ff), Some(&code)) = (bytes.get(at), bytes.get(at + 1)) else {
                    return Err("the JPEG ends before its frame header".into());
                };
                if ff != 0xff {
                    return Err("the JPEG's markers are broken".into());
                }
                match code {
                    0xff => at += 1,
                    0x01 | 0xd0..=0xd7 => at += 2,
                    0xd9 | 0xda => return Err("the JPEG has no frame header before its data".into()),
                    0xc0..=0xc3 | 0xc5..=0xc7 | 0xc9..=0xcb | 0xcd..=0xcf => {
                        let (Some(h), Some(w)) = (be16(at + 5), be16(at + 7)) else {
                            return Err("the JPEG's frame header is cut short".into());
                        };
                        return Ok((u32::from(w), u32::from(h)));
                    }
                    _ => {
                        let len = be16(at + 2).ok_or("the JPEG is cut short")?;
                        at += 2 + usize::from(len);
                    }
                }
            }
        }
    }
}

/// Decodes the picture once; its size.
fn decode(picture: &Picture) -> Result<(u32, u32), String> {
    crate::media::gst::init()?;
    let description = format!("{} ! videoconvert ! appsink name=out sync=false", picture.decoder());
    let (pipeline, sink) = super::launch_to_sink(&description)?;
    picture.feed(&pipeline.0)?;
    pipeline.0.set_state(gst::State::Playing).map_err(|_| "the picture does not decode".to_string())?;
    let bus = pipeline.0.bus().ok_or("slate: no bus")?;
    let deadline = Instant::now() + DECODE_DEADLINE;
    loop {
        if let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(50)) {
            let caps = sample.caps().and_then(|c| c.structure(0).map(|s| s.to_owned()));
            let size = caps.and_then(|s| Some((s.get::<i32>("width").ok()?, s.get::<i32>("height").ok()?)));
            let (w, h) = size.ok_or("the decoded picture has no size")?;
            return Ok((w.max(0) as u32, h.max(0) as u32));
        }
        if let Some(msg) = bus.pop_filtered(&[gst::MessageType::Error]) {
            if let gst::MessageView::Error(e) = msg.view() {
                return Err(format!("the picture does not decode: {}", e.error()));
            }
        }
        if sink.is_eos() {
            return Err("the picture does not decode: nothing came of it".into());
        }
        if Instant::now() > deadline {
            return Err("the picture took too long to decode".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A picture made by GStreamer's own encoders.
    fn made(kind: Kind, width: u32, height: u32) -> Vec<u8> {
        crate::media::gst::init().expect("gst");
        let encoder = match kind {
            Kind::Jpeg => "jpegenc",
            Kind::Png => "pngenc",
        };
        let description = format!(
            "videotestsrc num-buffers=1 ! video/x-raw,width={width},height={height} ! videoconvert ! {encoder} ! appsink name=out sync=false"
        );
        let pipeline = gst::parse::launch(&description).unwrap().downcast::<gst::Pipeline>().unwrap();
        let sink = pipeline.by_name("out").unwrap().downcast::<gst_app::AppSink>().unwrap();
        pipeline.set_state(gst::State::Playing).unwrap();
        let sample = sink.pull_sample().expect("a picture");
        let bytes = sample.buffer().unwrap().map_readable().unwrap().to_vec();
        pipeline.set_state(gst::State::Null).unwrap();
        bytes
    }

    #[test]
    fn jpegs_and_pngs_are_read_and_decoded() {
        for kind in [Kind::Jpeg, Kind::Png] {
            let bytes = made(kind, 320, 180);
            assert_eq!(header_size(kind, &bytes), Ok((320, 180)));
            let picture = check(kind, bytes.clone()).expect("taken");
            assert_eq!((picture.width, picture.height, picture.kind), (320, 180, kind));
            assert_eq!(picture.digest.len(), 64);
            // Cut short: the header reads, the decode does not.
            let cut = bytes[..bytes.len() / 3].to_vec();
            assert!(matches!(check(kind, cut), Err(Refused::Bad(_))), "{kind:?} cut short");
        }
    }

    #[test]
    fn anything_else_is_refused_before_it_is_decoded() {
        let jpeg = made(Kind::Jpeg, 64, 64);
        assert!(matches!(check(Kind::Png, jpeg), Err(Refused::NotAnImage(_))));
        assert!(matches!(check(Kind::Jpeg, b"GIF89a....".to_vec()), Err(Refused::NotAnImage(_))));
        assert!(matches!(check(Kind::Jpeg, Vec::new()), Err(Refused::NotAnImage(_))));
        assert_eq!(check(Kind::Png, vec![0; MAX_BYTES + 1]).err(), Some(Refused::TooLarge));
        // A PNG header that claims 100 000 × 100 000: refused without decoding.
        let mut huge = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        huge.extend_from_slice(&100_000u32.to_be_bytes());
        huge.extend_from_slice(&100_000u32.to_be_bytes());
        huge.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        let Err(Refused::Bad(why)) = check(Kind::Png, huge) else { panic!("a huge PNG was taken") };
        assert!(why.contains("100000×100000"), "{why}");
        // Garbage after a JPEG's signature.
        let mut junk = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0, 0];
        junk.extend(std::iter::repeat_n(0x55, 500));
        assert!(matches!(check(Kind::Jpeg, junk), Err(Refused::Bad(_))));
    }
}
