//! Stills: one picture decoded out of a CMAF initialization section and a segment (or a part)
//! that starts with a keyframe, scaled, as JPEG — the VOD thumbnail at any time, the live
//! stream's newest keyframe, a recording's first picture, a storyboard's tiles — and the bound
//! on how many are decoded at once ([`Decodes`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

/// Decoding up to one segment takes well under a second at 1080p; this bounds a stuck pipeline.
const DEADLINE: Duration = Duration::from_secs(10);
/// Widths a still may be asked for (CONTRACT: Clips, downloads, thumbnails).
pub const WIDTHS: std::ops::RangeInclusive<u32> = 16..=1920;

/// What to take out of a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// Seconds after the segment's first picture: the first picture at or after it is taken
    /// (the last one if the segment ends before).
    pub at: f64,
    /// Scaled to this width, the height keeping the picture's shape; `None` keeps its size.
    pub width: Option<u32>,
    /// Scaled to exactly this height as well (a storyboard's tiles are all one size).
    pub height: Option<u32>,
    /// The raw picture (RGBx, rows of `width * 4` bytes) rather than a JPEG.
    pub raw: bool,
}

impl Ask {
    pub const FIRST: Ask = Ask { at: 0.0, width: None, height: None, raw: false };
    /// The last picture.
    pub const LAST: Ask = Ask { at: 1e6, width: None, height: None, raw: false };
}

/// How a picture leaves: JPEG, or raw RGBx.
fn output(raw: bool) -> &'static str {
    match raw {
        true => "video/x-raw,format=RGBx",
        false => "jpegenc quality=85",
    }
}

fn description(ask: &Ask) -> String {
    let mut caps = "video/x-raw,pixel-aspect-ratio=1/1".to_string();
    if let Some(w) = ask.width {
        caps.push_str(&format!(",width={w}"));
    }
    if let Some(h) = ask.height {
        caps.push_str(&format!(",height={h}"));
    }
    format!(
        "appsrc name=src format=bytes ! qtdemux ! h264parse ! avdec_h264 name=dec \
         ! videoscale method=bilinear add-borders=false ! {caps} ! videoconvert \
         ! {} ! appsink name=out sync=false max-buffers=1",
        output(ask.raw)
    )
}

/// The JPEG of the picture `ask` names in `init` + `segment` (fMP4, H.264). Blocking; for a
/// caller holding a place of [`Decodes`].
pub fn picture(init: &[u8], segment: &[u8], ask: Ask) -> Result<Vec<u8>, String> {
    crate::media::gst::init()?;
    let pipeline = gst::parse::launch(&description(&ask))
        .map_err(|e| format!("still pipeline: {e}"))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| "still pipeline is not a pipeline".to_string())?;
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    let bin = &pipeline.0;
    let src = bin.by_name("src").and_then(|e| e.downcast::<gst_app::AppSrc>().ok()).ok_or("no appsrc")?;
    let out = bin.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).ok_or("no appsink")?;
    let dec = bin.by_name("dec").and_then(|d| d.static_pad("src")).ok_or("no decoder")?;
    let at = gst::ClockTime::from_nseconds((ask.at.max(0.0) * 1e9) as u64);
    let pick = Arc::new(Pick::default());
    let seen = pick.clone();
    // Pictures before the asked time are dropped; the first at or after it goes on, and nothing
    // after it. A segment that ends first gives its last picture (held back until EOS).
    dec.add_probe(gst::PadProbeType::BUFFER | gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        match &mut info.data {
            Some(gst::PadProbeData::Buffer(b)) => {
                if seen.passed.load(Ordering::SeqCst) {
                    return gst::PadProbeReturn::Drop;
                }
                let pts = b.pts().unwrap_or(gst::ClockTime::ZERO);
                let first = *seen.first.get_or_init(|| pts);
                if pts.saturating_sub(first) + gst::ClockTime::from_mseconds(1) >= at {
                    seen.passed.store(true, Ordering::SeqCst);
                    gst::PadProbeReturn::Ok
                } else {
                    *seen.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(b.copy());
                    gst::PadProbeReturn::Drop
                }
            }
            Some(gst::PadProbeData::Event(e)) if e.type_() == gst::EventType::Eos => {
                if !seen.passed.swap(true, Ordering::SeqCst) {
                    if let Some(last) = seen.last.lock().unwrap_or_else(|p| p.into_inner()).take() {
                        seen.late.store(true, Ordering::SeqCst);
                        *seen.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(last);
                    }
                }
                gst::PadProbeReturn::Ok
            }
            _ => gst::PadProbeReturn::Ok,
        }
    });
    bin.set_state(gst::State::Playing).map_err(|e| format!("still pipeline: {e}"))?;
    let mut bytes = Vec::with_capacity(init.len() + segment.len());
    bytes.extend_from_slice(init);
    bytes.extend_from_slice(segment);
    src.push_buffer(gst::Buffer::from_slice(bytes)).map_err(|e| format!("still: {e}"))?;
    let _ = src.end_of_stream();
    let timeout = gst::ClockTime::from_nseconds(DEADLINE.as_nanos() as u64);
    if let Some(sample) = out.try_pull_sample(timeout) {
        return bytes_of(&sample);
    }
    // The asked time was past the segment's last picture: encode that one.
    let held = pick.held.lock().unwrap_or_else(|p| p.into_inner()).take();
    match held {
        Some(last) if pick.late.load(Ordering::SeqCst) => last_picture(last, &dec, &ask),
        _ => Err("no picture decoded from the segment".into()),
    }
}

#[derive(Default)]
struct Pick {
    first: std::sync::OnceLock<gst::ClockTime>,
    passed: AtomicBool,
    late: AtomicBool,
    last: std::sync::Mutex<Option<gst::Buffer>>,
    held: std::sync::Mutex<Option<gst::Buffer>>,
}

fn bytes_of(sample: &gst::Sample) -> Result<Vec<u8>, String> {
    let buffer = sample.buffer().ok_or("an empty picture")?;
    let map = buffer.map_readable().map_err(|e| e.to_string())?;
    Ok(map.as_slice().to_vec())
}

/// Encodes `last`, a decoded picture with the caps of `dec`'s pad, through a pipeline of its own
/// that scales it as `ask` says.
fn last_picture(last: gst::Buffer, dec: &gst::Pad, ask: &Ask) -> Result<Vec<u8>, String> {
    let caps = dec.current_caps().ok_or("no caps for the last picture")?;
    let tail = description(ask);
    let tail = tail.split_once("name=dec").map_or("", |(_, t)| t);
    encode(&caps, last, &format!("appsrc name=src {tail}"))
}

/// A raw RGBx picture `width`×`height` as JPEG (a storyboard's sprite).
pub fn jpeg_of_rgbx(rgbx: Vec<u8>, width: u32, height: u32) -> Result<Vec<u8>, String> {
    crate::media::gst::init()?;
    let caps = gst::Caps::builder("video/x-raw")
        .field("format", "RGBx")
        .field("width", width as i32)
        .field("height", height as i32)
        .field("framerate", gst::Fraction::new(0, 1))
        .build();
    let description =
        "appsrc name=src ! videoconvert ! jpegenc quality=80 ! appsink name=out sync=false max-buffers=1";
    encode(&caps, gst::Buffer::from_mut_slice(rgbx), description)
}

/// Pushes `buffer` of `caps` through `description` (an `appsrc` named `src`, an `appsink` named
/// `out`); the one buffer out.
fn encode(caps: &gst::Caps, buffer: gst::Buffer, description: &str) -> Result<Vec<u8>, String> {
    let pipeline = gst::parse::launch(description)
        .map_err(|e| format!("still pipeline: {e}"))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| "still pipeline is not a pipeline".to_string())?;
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    let src =
        pipeline.0.by_name("src").and_then(|e| e.downcast::<gst_app::AppSrc>().ok()).ok_or("no appsrc")?;
    let out =
        pipeline.0.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).ok_or("no appsink")?;
    src.set_caps(Some(caps));
    pipeline.0.set_state(gst::State::Playing).map_err(|e| format!("still pipeline: {e}"))?;
    src.push_buffer(buffer).map_err(|e| format!("still: {e}"))?;
    let _ = src.end_of_stream();
    let sample = out
        .try_pull_sample(gst::ClockTime::from_nseconds(DEADLINE.as_nanos() as u64))
        .ok_or("the last picture was not encoded")?;
    bytes_of(&sample)
}

/// How many stills are decoded at once, and how many may wait for a turn: a flood of distinct
/// asks costs CPU at a fixed rate, and the rest are refused at once (503) rather than queued
/// in memory.
pub struct Decodes {
    turns: tokio::sync::Semaphore,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// A place to decode, from [`Decodes::enter`]; given back when dropped.
pub struct Turn<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Decodes {
    pub fn new(at_once: usize, max_waiting: usize) -> Decodes {
        Decodes {
            turns: tokio::sync::Semaphore::new(at_once.max(1)),
            waiting: AtomicUsize::new(0),
            max_waiting,
        }
    }

    /// A turn, once one is free; `None` at once when `max_waiting` already wait.
    pub async fn enter(&self) -> Option<Turn<'_>> {
        if let Ok(permit) = self.turns.try_acquire() {
            return Some(Turn { _permit: permit });
        }
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.waiting);
        if queued >= self.max_waiting {
            return None;
        }
        self.turns.acquire().await.ok().map(|permit| Turn { _permit: permit })
    }
}

struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn decodes_turn_away_past_the_waiting_room() {
        let d = Decodes::new(1, 1);
        let first = d.enter().await.expect("a free turn");
        // One may wait; a second waiter is refused at once.
        let waiter = d.enter();
        tokio::pin!(waiter);
        assert!(futures_util::poll!(waiter.as_mut()).is_pending());
        assert!(d.enter().await.is_none());
        drop(first);
        assert!(waiter.await.is_some());
        // Everyone left: the room is empty again.
        assert_eq!(d.waiting.load(Ordering::SeqCst), 0);
        assert!(d.enter().await.is_some());
    }

    #[test]
    fn asks_fix_the_width_and_keep_the_shape() {
        let d = description(&Ask { at: 1.0, width: Some(320), height: None, raw: false });
        assert!(d.contains("video/x-raw,pixel-aspect-ratio=1/1,width=320 !"), "{d}");
        let d = description(&Ask::FIRST);
        assert!(d.contains("video/x-raw,pixel-aspect-ratio=1/1 !"), "{d}");
    }
}
