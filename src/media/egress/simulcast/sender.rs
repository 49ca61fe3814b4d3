//! One simulcast target's sender: a thread of its own that connects, sends the tap's source
//! feeds (the publisher's H.264 and AAC, not transcoded) muxed to FLV over RTMP(S) or to
//! MPEG-TS over SRT in a pipeline of its own, and connects again with backoff when the target
//! fails, until it is stopped or the push's tap closes. Its `appsrc`s are the bounded queue: a
//! target that reads slowly loses frames up to the next keyframe ([`crate::media::live::taps`]);
//! the push, the other targets and the viewers never wait for it.

use std::net::ToSocketAddrs;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use crate::domain::simulcast::{backoff, Scheme, TargetStatus, TargetUrl};
use crate::domain::time::now_ms;
use crate::events::guard::is_public;
use crate::media::live::taps::{consumer_src, Tap};
use crate::store::simulcast::TargetProgress;

/// What a target's queue may hold before it drops to the next keyframe: about 3 s of a
/// publisher's 6 Mbit/s.
pub const QUEUE_BYTES: u64 = 2 * 1024 * 1024;
/// A connection that has not started sending by then has failed.
const CONNECT_DEADLINE: Duration = Duration::from_secs(15);
/// A live connection whose target took no byte for this long has failed (it stopped reading).
const STALL_DEADLINE: Duration = Duration::from_secs(10);
/// How long the stream's first video is waited for before the sender looks again.
const CAPS_POLL: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How one connection ended.
enum Ended {
    /// Stopped, or the push's tap closed: the sender is done.
    Done,
    /// Failed: the next try waits its backoff.
    Failed(String),
}

pub struct Sender {
    pub target_id: String,
    url: TargetUrl,
    allow_private: bool,
    progress: Mutex<TargetProgress>,
    /// Bytes of the connections that ended; the current one's are added from its sink.
    sent_before: AtomicU64,
    stopped: Mutex<bool>,
    stop_signal: Condvar,
}

impl Sender {
    /// Starts sending `tap`'s source to `url` on a thread of its own.
    pub fn spawn(target_id: &str, url: TargetUrl, tap: Arc<Tap>, allow_private: bool) -> Arc<Sender> {
        let sender = Arc::new(Sender {
            target_id: target_id.to_string(),
            url,
            allow_private,
            progress: Mutex::new(TargetProgress {
                status: TargetStatus::Connecting,
                last_error: None,
                connected_at: None,
                bytes_sent: 0,
            }),
            sent_before: AtomicU64::new(0),
            stopped: Mutex::new(false),
            stop_signal: Condvar::new(),
        });
        let run = sender.clone();
        let spawned = std::thread::Builder::new().name("simulcast".into()).spawn(move || run.run(&tap));
        if let Err(e) = spawned {
            sender.fail(format!("no thread for the sender: {e}"));
        }
        sender
    }

    /// Ends the sender: its connection gets a clean end of stream and closes.
    pub fn stop(&self) {
        *lock(&self.stopped) = true;
        self.stop_signal.notify_all();
    }

    fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Waits `d` or until stopped; whether it was stopped.
    fn wait(&self, d: Duration) -> bool {
        let stopped = lock(&self.stopped);
        let (stopped, _) =
            self.stop_signal.wait_timeout_while(stopped, d, |s| !*s).unwrap_or_else(|p| p.into_inner());
        *stopped
    }

    /// Where the target stands now.
    pub fn progress(&self) -> TargetProgress {
        lock(&self.progress).clone()
    }

    fn set(&self, f: impl FnOnce(&mut TargetProgress)) {
        f(&mut lock(&self.progress));
    }

    fn fail(&self, why: String) {
        tracing::warn!(target_id = %self.target_id, url = %self.url.masked(), error = %why, "simulcast target failed");
        self.set(|p| {
            p.status = TargetStatus::Error;
            p.last_error = Some(why);
        });
    }

    fn run(&self, tap: &Tap) {
        let mut failures = 0u32;
        loop {
            if self.is_stopped() || tap.is_closed() {
                break;
            }
            self.set(|p| {
                if p.status != TargetStatus::Error {
                    p.status = TargetStatus::Connecting;
                }
            });
            match self.connection(tap) {
                Ended::Done => break,
                Ended::Failed(why) => {
                    // A connection that went live starts the backoff again.
                    failures =
                        if lock(&self.progress).status == TargetStatus::Live { 1 } else { failures + 1 };
                    self.fail(why);
                    if self.wait(backoff(failures)) {
                        break;
                    }
                }
            }
        }
        self.set(|p| p.status = TargetStatus::Idle);
    }

    /// Where to connect: in production the name is resolved and every address must be public;
    /// RTMP and SRT then connect to the address checked (a later answer of the name cannot point
    /// them inside), RTMPS to the name, whose certificate must match it.
    fn address(&self) -> Result<String, String> {
        if self.allow_private || self.url.scheme == Scheme::Rtmps {
            if !self.allow_private {
                self.resolve_public()?;
            }
            return Ok(self.url.host.clone());
        }
        let ip = self.resolve_public()?;
        Ok(ip.to_string())
    }

    fn resolve_public(&self) -> Result<std::net::IpAddr, String> {
        let addrs: Vec<_> = (self.url.host.as_str(), self.url.port)
            .to_socket_addrs()
            .map_err(|_| format!("host {} does not resolve", self.url.host))?
            .collect();
        if addrs.iter().any(|a| !is_public(a.ip())) {
            return Err("the host resolves to a loopback, private, link-local or multicast address".into());
        }
        addrs.first().map(|a| a.ip()).ok_or_else(|| format!("host {} does not resolve", self.url.host))
    }

    /// One connection, from the first video caps to its end.
    fn connection(&self, tap: &Tap) -> Ended {
        let video_caps = loop {
            if self.is_stopped() || tap.is_closed() {
                return Ended::Done;
            }
            if let Some(caps) = tap.source_video.caps() {
                break caps;
            }
            self.wait(CAPS_POLL);
        };
        let host = match self.address() {
            Ok(h) => h,
            Err(e) => return Ended::Failed(e),
        };
        let built = match build(&self.url, &host, &video_caps, tap.source_audio.caps().as_ref()) {
            Ok(b) => b,
            Err(e) => return Ended::Failed(e),
        };
        let Built { pipeline, video, audio, sink } = built;
        let ended = self.send(tap, &pipeline, &video, audio.as_ref(), &sink);
        let _ = pipeline.set_state(gst::State::Null);
        let sent = sink_bytes(&sink);
        self.sent_before.fetch_add(sent, Ordering::Relaxed);
        ended
    }

    fn send(
        &self,
        tap: &Tap,
        pipeline: &gst::Pipeline,
        video: &gst_app::AppSrc,
        audio: Option<&gst_app::AppSrc>,
        sink: &gst::Element,
    ) -> Ended {
        if let Err(e) = pipeline.set_state(gst::State::Playing) {
            return Ended::Failed(
                bus_error(pipeline).unwrap_or_else(|| format!("the sender did not start: {e}")),
            );
        }
        let feeds = Feeds::add(tap, video, audio);
        let Some(bus) = pipeline.bus() else { return Ended::Failed("the sender has no bus".into()) };
        let started = Instant::now();
        let (mut last_bytes, mut moved_at) = (0u64, Instant::now());
        let ended = loop {
            if self.is_stopped() || tap.is_closed() {
                break Ended::Done;
            }
            let message = bus.timed_pop_filtered(
                gst::ClockTime::from_mseconds(250),
                &[gst::MessageType::Error, gst::MessageType::Eos],
            );
            match message.as_ref().map(|m| m.view()) {
                Some(gst::MessageView::Error(e)) => break Ended::Failed(describe(e.error(), &self.url)),
                Some(gst::MessageView::Eos(_)) => break Ended::Done,
                _ => {}
            }
            let bytes = sink_bytes(sink);
            if bytes != last_bytes {
                last_bytes = bytes;
                moved_at = Instant::now();
            }
            let live = lock(&self.progress).status == TargetStatus::Live;
            if bytes > 0 && !live {
                tracing::info!(target_id = %self.target_id, url = %self.url.masked(), "simulcast target live");
                self.set(|p| {
                    p.status = TargetStatus::Live;
                    p.connected_at = Some(now_ms());
                });
            }
            let total = self.sent_before.load(Ordering::Relaxed) + bytes;
            self.set(|p| p.bytes_sent = total as i64);
            if !live && bytes == 0 && started.elapsed() > CONNECT_DEADLINE {
                break Ended::Failed(format!(
                    "no connection to {}:{} within {} s",
                    self.url.host,
                    self.url.port,
                    CONNECT_DEADLINE.as_secs()
                ));
            }
            if live && moved_at.elapsed() > STALL_DEADLINE {
                break Ended::Failed(format!(
                    "the target took no data for {} s (it stopped reading)",
                    STALL_DEADLINE.as_secs()
                ));
            }
        };
        feeds.remove(tap);
        if matches!(ended, Ended::Done) {
            // A clean end: the muxer finishes and RTMP says FCUnpublish and deleteStream.
            let _ = video.end_of_stream();
            if let Some(a) = audio {
                let _ = a.end_of_stream();
            }
            let _ = bus.timed_pop_filtered(
                gst::ClockTime::from_seconds(1),
                &[gst::MessageType::Error, gst::MessageType::Eos],
            );
        }
        ended
    }
}

/// The consumers a connection added to the tap's feeds.
struct Feeds {
    video: u64,
    audio: Option<u64>,
}

impl Feeds {
    fn add(tap: &Tap, video: &gst_app::AppSrc, audio: Option<&gst_app::AppSrc>) -> Feeds {
        Feeds {
            video: tap.source_video.add(video.clone()),
            audio: audio.map(|a| tap.source_audio.add(a.clone())),
        }
    }

    fn remove(self, tap: &Tap) {
        tap.source_video.remove(self.video);
        if let Some(a) = self.audio {
            tap.source_audio.remove(a);
        }
    }
}

struct Built {
    pipeline: gst::Pipeline,
    video: gst_app::AppSrc,
    audio: Option<gst_app::AppSrc>,
    sink: gst::Element,
}

/// The sender's pipeline: the source's H.264 (and AAC) into FLV over RTMP(S), or into MPEG-TS
/// over SRT.
fn build(
    url: &TargetUrl,
    host: &str,
    video_caps: &gst::Caps,
    audio_caps: Option<&gst::Caps>,
) -> Result<Built, String> {
    crate::media::gst::init()?;
    let (video_path, mux, sink) = match url.scheme {
        // The stream headers go in-band before every keyframe too: a target that joins a
        // stream late, or meets new headers (the slate, a publisher back with other settings),
        // decodes from the next keyframe.
        Scheme::Rtmp | Scheme::Rtmps => (
            "h264parse config-interval=-1",
            "flvmux name=mux streamable=true latency=200000000",
            "rtmp2sink name=sink sync=false async=false timeout=5",
        ),
        Scheme::Srt => (
            "h264parse config-interval=-1",
            "mpegtsmux name=mux alignment=7 latency=200000000",
            "srtsink name=sink sync=false async=false wait-for-connection=false",
        ),
    };
    let audio = if audio_caps.is_some() { " aacparse name=aac ! mux." } else { "" };
    let description = format!("{video_path} name=h264 ! {mux} ! {sink}{audio}");
    let bin = gst::parse::launch(&description).map_err(|e| format!("building the sender: {e}"))?;
    let pipeline = bin.downcast::<gst::Pipeline>().map_err(|_| "the sender is not a pipeline")?;
    let sink = pipeline.by_name("sink").ok_or("the sender has no sink")?;
    match url.scheme {
        Scheme::Rtmp | Scheme::Rtmps => {
            // Set one by one, not as a `location`, whose parsing drops the key's query (some
            // platforms' keys have one, and a Sluice's key carries `?user=…&pass=…`).
            sink.set_property_from_str("scheme", if url.scheme == Scheme::Rtmps { "rtmps" } else { "rtmp" });
            sink.set_property("host", host);
            sink.set_property("port", i32::from(url.port));
            sink.set_property("application", &url.app);
            sink.set_property("stream", &url.key);
            // A key's `user=` and `pass=` also answer a server that asks for them at connect
            // (Adobe's authmod, as OBS's "Use authentication" does: a Sluice, Wowza).
            if let Some((_, query)) = url.key.split_once('?') {
                for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
                    match name.as_ref() {
                        "user" => sink.set_property("username", value.as_ref()),
                        "pass" => sink.set_property("password", value.as_ref()),
                        _ => {}
                    }
                }
            }
        }
        Scheme::Srt => {
            let authority = if host.contains(':') {
                format!("[{host}]:{}", url.port)
            } else {
                format!("{host}:{}", url.port)
            };
            sink.set_property("uri", format!("srt://{authority}"));
            if let Some(id) = &url.srt.streamid {
                sink.set_property("streamid", id);
            }
            if let Some(p) = &url.srt.passphrase {
                sink.set_property("passphrase", p);
            }
            if let Some(l) = url.srt.latency {
                sink.set_property("latency", l as i32);
            }
        }
    }
    let video = consumer_src("video", video_caps, QUEUE_BYTES)?;
    pipeline.add(&video).map_err(|e| format!("building the sender: {e}"))?;
    let h264 = pipeline.by_name("h264").ok_or("the sender has no parser")?;
    video.link(&h264).map_err(|e| format!("linking the sender's video: {e}"))?;
    let audio = match audio_caps {
        Some(caps) => {
            let src = consumer_src("audio", caps, QUEUE_BYTES / 4)?;
            pipeline.add(&src).map_err(|e| format!("building the sender: {e}"))?;
            let aac = pipeline.by_name("aac").ok_or("the sender has no AAC parser")?;
            src.link(&aac).map_err(|e| format!("linking the sender's audio: {e}"))?;
            Some(src)
        }
        None => None,
    };
    Ok(Built { pipeline, video, audio, sink })
}

/// Bytes the sink has handed to the network: `out-bytes-total` of rtmp2sink's stats,
/// `bytes-sent-total` of srtsink's.
fn sink_bytes(sink: &gst::Element) -> u64 {
    let Some(stats) = sink.property::<Option<gst::Structure>>("stats") else { return 0 };
    for field in ["out-bytes-total", "bytes-sent-total"] {
        if let Ok(v) = stats.get::<u64>(field) {
            return v;
        }
        if let Ok(v) = stats.get::<i64>(field) {
            return v.max(0) as u64;
        }
    }
    // srtsink as a caller nests its one connection's stats under `callers` in some versions.
    if let Ok(callers) = stats.get::<gst::glib::ValueArray>("callers") {
        return callers
            .iter()
            .filter_map(|v| v.get::<gst::Structure>().ok())
            .filter_map(|s| s.get::<i64>("bytes-sent-total").ok())
            .map(|v| v.max(0) as u64)
            .sum();
    }
    0
}

fn bus_error(pipeline: &gst::Pipeline) -> Option<String> {
    let bus = pipeline.bus()?;
    let message = bus.timed_pop_filtered(gst::ClockTime::from_mseconds(100), &[gst::MessageType::Error])?;
    match message.view() {
        gst::MessageView::Error(e) => Some(e.error().to_string()),
        _ => None,
    }
}

/// A failure as a person reads it: GStreamer's message, which names the cause (refused,
/// reset, timed out, a certificate not trusted), with where it went.
fn describe(error: gst::glib::Error, url: &TargetUrl) -> String {
    let what = error.to_string();
    format!("{what} ({}:{})", url.host, url.port)
}
