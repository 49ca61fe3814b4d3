//! Taps: what a live push offers besides LL-HLS, shared by every consumer of the stream.
//!
//! - The WebRTC rung: the push's video decoded and encoded once more as H.264 constrained
//!   baseline without B-frames (what every browser decodes), and its audio as Opus — once per
//!   stream, whatever the number of WHEP viewers.
//! - The source: the publisher's H.264 and AAC as they arrive (no extra encode), for RTSP and
//!   simulcast targets; every push offers it.
//!
//! Each consumer has its own pipeline whose `appsrc` a [`Feed`] pushes into. The appsink
//! callbacks that feed them only copy buffer references under a short lock: a consumer whose
//! `appsrc` is full (a slow viewer) loses frames up to the next keyframe, it never grows memory
//! and never holds up the push or the other consumers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use tokio::sync::watch;

/// The height of the WebRTC rung (or the source's, when smaller).
pub const WEBRTC_HEIGHT: u32 = 480;
/// The WebRTC rung's bitrate (kbit/s) and keyframe interval (frames): short, so a viewer that
/// joins between the keyframes it asks for still starts within a second or two.
const WEBRTC_KBPS: u32 = 1200;
const WEBRTC_KEYINT: u32 = 60;
/// What a WHEP viewer's `appsrc` may hold before it drops: a few seconds of the WebRTC rung.
pub const CONSUMER_MAX_BYTES: u64 = 512 * 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The taps of the streams pushed to this process.
#[derive(Default)]
pub struct Taps {
    taps: Mutex<HashMap<String, Arc<Tap>>>,
}

impl Taps {
    /// Opens a new tap for the stream's live session; a tap left by an earlier session is
    /// closed first.
    pub fn open(&self, stream_id: &str, webrtc: bool, rtsp: bool) -> Arc<Tap> {
        let tap = Arc::new(Tap::new(stream_id, webrtc, rtsp));
        if let Some(old) = lock(&self.taps).insert(stream_id.to_string(), tap.clone()) {
            old.close();
        }
        tap
    }

    /// Every open tap.
    pub fn list(&self) -> Vec<Arc<Tap>> {
        lock(&self.taps).values().filter(|t| !t.is_closed()).cloned().collect()
    }

    pub fn get(&self, stream_id: &str) -> Option<Arc<Tap>> {
        lock(&self.taps).get(stream_id).cloned()
    }

    /// Closes `tap` (its consumers end) and forgets it, unless a later push replaced it.
    pub fn close(&self, tap: &Arc<Tap>) {
        {
            let mut taps = lock(&self.taps);
            if taps.get(&tap.stream_id).is_some_and(|t| Arc::ptr_eq(t, tap)) {
                taps.remove(&tap.stream_id);
            }
        }
        tap.close();
    }
}

/// One live session's tap: fed by each push of the session in turn, closed when the session
/// ends ([`crate::media::live::session`]).
pub struct Tap {
    pub stream_id: String,
    /// The stream lists `webrtc`: the WebRTC rung is encoded.
    pub webrtc: bool,
    /// The stream lists `rtsp`: the source is offered as it is.
    pub rtsp: bool,
    pub webrtc_video: Feed,
    pub webrtc_audio: Feed,
    pub source_video: Feed,
    pub source_audio: Feed,
    /// The WebRTC rung's appsink, through which a new viewer asks the encoder for a keyframe.
    encoder_out: Mutex<Option<gst::glib::WeakRef<gst::Element>>>,
    closed: watch::Sender<bool>,
}

impl Tap {
    fn new(stream_id: &str, webrtc: bool, rtsp: bool) -> Tap {
        Tap {
            stream_id: stream_id.to_string(),
            webrtc,
            rtsp,
            webrtc_video: Feed::new(true),
            webrtc_audio: Feed::new(false),
            source_video: Feed::new(true),
            source_audio: Feed::new(false),
            encoder_out: Mutex::new(None),
            closed: watch::channel(false).0,
        }
    }

    /// A new push of the session feeds the tap: every consumer waits for its first keyframe and
    /// takes its timestamps from there on, after what it already played.
    pub fn next_push(&self) {
        for feed in [&self.webrtc_video, &self.webrtc_audio, &self.source_video, &self.source_audio] {
            feed.rebase();
        }
    }

    /// Ends every consumer: each holds a [`Tap::closed`] receiver and tears itself down.
    pub fn close(&self) {
        self.closed.send_replace(true);
        for feed in [&self.webrtc_video, &self.webrtc_audio, &self.source_video, &self.source_audio] {
            feed.end();
        }
    }

    /// Resolves when the push ended (or at once if it has).
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Asks the WebRTC rung's encoder for a keyframe now (a viewer joined or fell behind).
    pub fn request_keyframe(&self) {
        let out = lock(&self.encoder_out).as_ref().and_then(|w| w.upgrade());
        if let Some(out) = out {
            let event = gstreamer_video::UpstreamForceKeyUnitEvent::builder().all_headers(true).build();
            out.send_event(event);
        }
    }
}

/// One elementary stream fanned out to its consumers.
pub struct Feed {
    video: bool,
    caps: Mutex<Option<gst::Caps>>,
    consumers: Mutex<Vec<Consumer>>,
    next: AtomicU64,
    /// Buffers a consumer lost because its queue was full.
    pub dropped: AtomicU64,
}

struct Consumer {
    id: u64,
    src: gst_app::AppSrc,
    /// Added to the push's timestamps to put them on the consumer's running time.
    offset: Option<i64>,
    /// Waiting for a keyframe: at the start and after a drop.
    waiting: bool,
    /// The caps its source was last given (`None`: still those it was built with).
    given: Option<gst::Caps>,
}

impl Feed {
    fn new(video: bool) -> Feed {
        Feed {
            video,
            caps: Mutex::new(None),
            consumers: Mutex::new(Vec::new()),
            next: AtomicU64::new(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// The caps of the buffers, once the first arrived.
    pub fn caps(&self) -> Option<gst::Caps> {
        lock(&self.caps).clone()
    }

    /// Adds a consumer: its `appsrc` (live, in TIME, in a PLAYING pipeline) gets every buffer
    /// from the next keyframe on. Returns the id that [`Feed::remove`] takes.
    pub fn add(&self, src: gst_app::AppSrc) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.consumers).push(Consumer { id, src, offset: None, waiting: true, given: None });
        id
    }

    pub fn remove(&self, id: u64) {
        lock(&self.consumers).retain(|c| c.id != id);
    }

    pub fn consumers(&self) -> usize {
        lock(&self.consumers).len()
    }

    /// The next buffers are a new push's: each consumer starts again at a keyframe, with the
    /// timestamps put on its running time anew (a new push's start near zero).
    fn rebase(&self) {
        for c in lock(&self.consumers).iter_mut() {
            c.offset = None;
            c.waiting = true;
        }
    }

    fn end(&self) {
        for c in lock(&self.consumers).drain(..) {
            let _ = c.src.end_of_stream();
        }
    }

    /// Hands `buffer` to every consumer. Returns whether one of them lost a keyframe's worth
    /// (the encoder should send the next keyframe early).
    fn push(&self, buffer: &gst::Buffer, caps: Option<&gst::CapsRef>) -> bool {
        if let Some(caps) = caps {
            let mut known = lock(&self.caps);
            if known.as_ref().map(|c| c.as_ref()) != Some(caps) {
                *known = Some(caps.to_owned());
            }
        }
        let known = self.caps();
        let caps = known.as_ref().map(|c| c.as_ref());
        let keyframe = !self.video || !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
        let mut want_keyframe = false;
        let mut consumers = lock(&self.consumers);
        consumers.retain_mut(|c| {
            if c.waiting && !keyframe {
                return true;
            }
            if c.src.current_level_bytes() >= c.src.max_bytes() {
                // A slow consumer: skip to the next keyframe rather than queue more.
                self.dropped.fetch_add(1, Ordering::Relaxed);
                if self.video && !c.waiting {
                    c.waiting = true;
                    want_keyframe = true;
                }
                return true;
            }
            let Some(at) = buffer.dts_or_pts() else { return true };
            let offset = match c.offset {
                Some(o) => o,
                None => {
                    let Some(now) = c.src.current_running_time() else { return true };
                    let o = now.nseconds() as i64 - at.nseconds() as i64;
                    c.offset = Some(o);
                    o
                }
            };
            if let Some(caps) = caps {
                // The consumer's source takes the caps of what it is handed (profile, level,
                // channels), which its payloader checks against the viewer's codec, and takes
                // them again when they change (the slate's stream headers, a publisher back with
                // other settings), so what follows decodes.
                if c.given.as_ref().map(|g| g.as_ref()) != Some(caps) {
                    c.src.set_caps(Some(&caps.to_owned()));
                    c.given = Some(caps.to_owned());
                }
            }
            c.waiting = false;
            let shift = |t: Option<gst::ClockTime>| {
                t.map(|t| gst::ClockTime::from_nseconds((t.nseconds() as i64 + offset).max(0) as u64))
            };
            let mut copy = buffer.copy();
            if let Some(b) = copy.get_mut() {
                b.set_pts(shift(buffer.pts()));
                b.set_dts(shift(buffer.dts()));
            }
            // A consumer whose pipeline stopped is forgotten.
            c.src.push_buffer(copy).is_ok()
        });
        want_keyframe
    }
}

/// The appsrc of a consumer's pipeline: live, in TIME, bounded and dropping when full.
pub fn consumer_src(name: &str, caps: &gst::Caps, max_bytes: u64) -> Result<gst_app::AppSrc, String> {
    let src = gst_app::AppSrc::builder()
        .name(name)
        .is_live(true)
        .format(gst::Format::Time)
        .caps(caps)
        .max_bytes(max_bytes)
        .block(false)
        .build();
    src.set_property_from_str("leaky-type", "upstream");
    Ok(src)
}

/// Attaches what `tap` offers to a push's pipeline: branches off its `video` and `audio` tees.
/// The WebRTC rung is built at the first video caps (its size follows the source's).
pub fn attach(pipeline: &gst::Pipeline, tap: Arc<Tap>) -> Result<(), String> {
    let video_tee = pipeline.by_name("video").ok_or("ingest pipeline has no video tee")?;
    let audio_tee = pipeline.by_name("audio").ok_or("ingest pipeline has no audio tee")?;
    let video = branch("", "source_video")?;
    feed(&video, tap.clone(), |t| &t.source_video)?;
    link(pipeline, &video_tee, &video)?;
    let audio = branch("", "source_audio")?;
    feed(&audio, tap.clone(), |t| &t.source_audio)?;
    link(pipeline, &audio_tee, &audio)?;
    if !tap.webrtc {
        return Ok(());
    }
    let audio = branch(
        "avdec_aac ! audioconvert ! audioresample ! audio/x-raw,rate=48000,channels=2 \
         ! opusenc bitrate=64000 frame-size=20 ! ",
        "webrtc_audio",
    )?;
    feed(&audio, tap.clone(), |t| &t.webrtc_audio)?;
    link(pipeline, &audio_tee, &audio)?;

    let built = OnceLock::new();
    let weak = pipeline.downgrade();
    let pad = video_tee.static_pad("sink").ok_or("video tee has no sink pad")?;
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let gst::EventView::Caps(c) = ev.view() else { return gst::PadProbeReturn::Ok };
        let (Some(pipeline), Some(s)) = (weak.upgrade(), c.caps().structure(0)) else {
            return gst::PadProbeReturn::Ok;
        };
        if built.set(()).is_err() {
            return gst::PadProbeReturn::Ok;
        }
        let (w, h) = webrtc_size(s.get::<i32>("width").unwrap_or(0), s.get::<i32>("height").unwrap_or(0));
        let video = branch(
            &format!(
                "avdec_h264 ! videoconvert ! videoscale ! video/x-raw,width={w},height={h},pixel-aspect-ratio=1/1 \
                 ! x264enc tune=zerolatency speed-preset=ultrafast bitrate={WEBRTC_KBPS} key-int-max={WEBRTC_KEYINT} \
                 bframes=0 ! video/x-h264,profile=constrained-baseline,stream-format=byte-stream,alignment=au \
                 ! h264parse config-interval=-1 ! "
            ),
            "webrtc_video",
        )
        .and_then(|video| {
            feed(&video, tap.clone(), |t| &t.webrtc_video)?;
            if let Some(out) = video.by_name("out") {
                *lock(&tap.encoder_out) = Some(out.downgrade());
            }
            link(&pipeline, &video_tee, &video)
        });
        if let Err(e) = video {
            tracing::error!(pipeline = %pipeline.name(), error = %e, "building the WebRTC rung");
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

/// The WebRTC rung's size: [`WEBRTC_HEIGHT`] or the source's height if smaller, the source's
/// aspect, both even (4:2:0).
pub fn webrtc_size(width: i32, height: i32) -> (u32, u32) {
    let (width, height) = (width.max(2) as u32, height.max(2) as u32);
    let h = height.min(WEBRTC_HEIGHT) & !1;
    // The nearest even width.
    let w = ((u64::from(width) * u64::from(h) + u64::from(height)) / (2 * u64::from(height))) as u32 * 2;
    let w = w.max(2);
    (w, h)
}

fn branch(middle: &str, name: &str) -> Result<gst::Bin, String> {
    let description = format!(
        "queue name=q leaky=downstream max-size-buffers=0 max-size-bytes=0 max-size-time=1000000000 \
         ! {middle}appsink name=out sync=false async=false max-buffers=16 drop=true"
    );
    let bin = gst::parse::bin_from_description(&description, false)
        .map_err(|e| format!("{name} branch: {e}: {description}"))?;
    bin.set_property("name", name);
    Ok(bin)
}

fn feed(bin: &gst::Bin, tap: Arc<Tap>, which: fn(&Tap) -> &Feed) -> Result<(), String> {
    let sink = bin
        .by_name("out")
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or("tap branch has no appsink")?;
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(buffer) = sample.buffer_owned() {
                    if which(&tap).push(&buffer, sample.caps()) {
                        tap.request_keyframe();
                    }
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    Ok(())
}

fn link(pipeline: &gst::Pipeline, tee: &gst::Element, bin: &gst::Bin) -> Result<(), String> {
    let sink = bin.by_name("q").and_then(|e| e.static_pad("sink")).ok_or("tap branch has no queue")?;
    let ghost = gst::GhostPad::with_target(&sink).map_err(|e| format!("ghost pad: {e}"))?;
    bin.add_pad(&ghost).map_err(|e| format!("ghost pad: {e}"))?;
    pipeline.add(bin).map_err(|e| format!("adding a tap branch: {e}"))?;
    let src = tee.request_pad_simple("src_%u").ok_or("tee gave no pad")?;
    src.link(&ghost).map_err(|e| format!("linking a tap branch: {e}"))?;
    bin.sync_state_with_parent().map_err(|e| format!("starting a tap branch: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webrtc_size_keeps_the_aspect_and_evenness() {
        assert_eq!(webrtc_size(1280, 720), (854, 480));
        assert_eq!(webrtc_size(640, 360), (640, 360));
        assert_eq!(webrtc_size(321, 241), (320, 240));
        assert_eq!(webrtc_size(0, 0), (2, 2));
    }

    #[test]
    fn a_full_consumer_drops_to_the_next_keyframe() {
        crate::media::gst::init().expect("GStreamer");
        let feed = Feed::new(true);
        let caps = gst::Caps::builder("video/x-h264").build();
        let src = consumer_src("v", &caps, CONSUMER_MAX_BYTES).expect("appsrc");
        let pipeline = gst::Pipeline::new();
        let sink = gst::ElementFactory::make("fakesink").build().expect("fakesink");
        // A sink that never takes anything: the appsrc fills up.
        sink.set_property("sync", true);
        pipeline.add_many([src.upcast_ref(), &sink]).expect("add");
        src.link(&sink).expect("link");
        pipeline.set_state(gst::State::Playing).expect("play");
        feed.add(src.clone());
        let frame = |key: bool, i: u64| {
            let mut b = gst::Buffer::from_mut_slice(vec![0u8; 64 * 1024]);
            let m = b.get_mut().expect("new buffer");
            m.set_pts(gst::ClockTime::from_seconds(1000 + i));
            if !key {
                m.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
            b
        };
        assert!(!feed.push(&frame(false, 0), None), "before the first keyframe nothing is sent");
        let mut asked = false;
        for i in 0..64 {
            asked |= feed.push(&frame(i == 0, i + 1), None);
        }
        assert!(asked, "the consumer fell behind and a keyframe was asked for");
        assert!(src.current_level_bytes() <= CONSUMER_MAX_BYTES + 64 * 1024, "bounded");
        assert!(feed.dropped.load(Ordering::Relaxed) > 0);
        let _ = pipeline.set_state(gst::State::Null);
    }
}
