//! The ingest pipeline of a push session: its `video` and `audio` tees, which later stages
//! (ladder, packaging, recording, taps) attach to, and the front that feeds them. RTMP's H.264
//! and AAC frames are chained into the tees on the thread that read them
//! ([`crate::media::ingest::front`]; `pipelines/ingest.txt`); SRT's MPEG-TS goes through
//! `tsdemux` and the parsers (`pipelines/srt.txt`); WHIP's RTP through `webrtcbin`
//! ([`crate::media::ingest::whip`]).
//!
//! The network side never waits long on GStreamer: what a tag goes through on the reading thread
//! (the tees, the packaging of the `source` and `audio` renditions) waits for nothing,
//! and every slow branch (the session's encoders, the taps) has a bounded input that drops.
//! Callbacks only `try_send` on bounded channels.

use std::sync::{Arc, Condvar, Mutex};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use tokio::sync::mpsc;

use crate::media::gst::{init, StopOnDrop};
use crate::media::ingest::flv::Tag;
use crate::media::ingest::front::FlvFront;
use crate::media::ingest::slate::{Format, Slate, SlateFeed};
use crate::media::live;
use crate::media::live::channel::{Channel, MediaEnds};
use crate::media::live::encoders::EncoderSlot;
use crate::media::live::pipeline::{WallBase, DRAIN};
use crate::media::live::session::{Filler, Outputs, PushEnd, SessionPush};
use crate::media::live::taps::Tap;

const DESCRIPTION: &str = include_str!("../../../pipelines/ingest.txt");
/// The MPEG-TS front (SRT): `tsdemux`'s streams are linked to the `vq`/`aq` queues as they appear.
const TS_DESCRIPTION: &str = include_str!("../../../pipelines/srt.txt");

/// Reports from the pipeline.
#[derive(Debug, Clone, PartialEq)]
pub enum PipelineReport {
    Video {
        codec: String,
        width: i32,
        height: i32,
        frame_rate: Option<f64>,
    },
    Audio {
        codec: String,
        sample_rate: i32,
        channels: i32,
    },
    /// An element failed; the push should end.
    Error(String),
}

/// Where a push's media enters its pipeline.
pub(crate) enum Front {
    /// RTMP: frames chained straight into the tees by [`IngestPipeline::push`], on the thread
    /// that read them.
    Flv(Box<FlvFront>),
    /// SRT: MPEG-TS through an `appsrc`, fed from SRT's receive thread ([`Feeder`]).
    Ts(gst_app::AppSrc),
    /// WHIP: `webrtcbin` is the source.
    Webrtc,
    /// The slate: its frames chained into the tees by a thread of its own, in real time.
    Slate(SlateFeed),
}

pub struct IngestPipeline {
    pipeline: StopOnDrop,
    front: Front,
    /// What WHEP viewers and RTSP sessions take from this push (the live session's tap).
    tap: Option<Arc<Tap>>,
    /// The push's place in its live session, told when it stops.
    push: Option<SessionPush>,
    /// Media bytes that reached the tees (the no-media watchdog and the input bitrate).
    pub media_bytes: Arc<std::sync::atomic::AtomicU64>,
    /// Video keyframes that reached the `video` tee (the no-keyframe watchdog).
    pub keyframes: Arc<std::sync::atomic::AtomicU64>,
    /// The LL-HLS channel this push feeds, if any.
    live: Option<(Arc<Channel>, u32)>,
    /// The live session's encoders, which this push may feed.
    encoders: Option<EncoderSlot>,
    /// Set once the ladder is planned with a rung to encode.
    transcodes: Arc<std::sync::atomic::AtomicBool>,
    /// Wall-clock time of media timestamp zero (set by the first media).
    wall: WallBase,
    /// Set when the pipeline has drained (EOS reached every sink).
    drained: Arc<(Mutex<bool>, Condvar)>,
}

impl IngestPipeline {
    /// Builds and starts the pipeline, with LL-HLS packaging when `live` is given; reports
    /// arrive on the returned channel. The work runs on a blocking thread: the first
    /// `gst::init` scans the plugin registry, building loads plugins, and going to PLAYING waits
    /// on the elements' state changes.
    pub async fn start(
        stream_id: &str,
        outputs: Outputs,
    ) -> Result<(IngestPipeline, mpsc::Receiver<PipelineReport>), String> {
        let stream_id = stream_id.to_string();
        tokio::task::spawn_blocking(move || IngestPipeline::start_blocking(&stream_id, outputs))
            .await
            .map_err(|e| format!("ingest pipeline: {e}"))?
    }

    fn start_blocking(
        stream_id: &str,
        outputs: Outputs,
    ) -> Result<(IngestPipeline, mpsc::Receiver<PipelineReport>), String> {
        let pipeline = launch(DESCRIPTION, &format!("ingest-{stream_id}"))?;
        let front = FlvFront::new(&pipeline, stream_id)?;
        let (p, reports) = IngestPipeline::assemble(pipeline, Front::Flv(Box::new(front)), outputs, false)?;
        Ok((p, reports))
    }

    /// Builds and starts the MPEG-TS front (`pipelines/srt.txt`): bytes fed through
    /// [`IngestPipeline::feeder`] are demuxed, H.264 and AAC go to the tees. The wall-clock base
    /// is taken at the first media buffer (TS timestamps start anywhere). Off the async workers,
    /// as [`IngestPipeline::start`].
    pub async fn start_ts(
        stream_id: &str,
        outputs: Outputs,
    ) -> Result<(IngestPipeline, mpsc::Receiver<PipelineReport>), String> {
        let stream_id = stream_id.to_string();
        tokio::task::spawn_blocking(move || {
            let pipeline = launch(TS_DESCRIPTION, &format!("ingest-ts-{stream_id}"))?;
            let src = pipeline
                .by_name("src")
                .and_then(|e| e.downcast::<gst_app::AppSrc>().ok())
                .ok_or("ingest pipeline has no appsrc named src")?;
            link_ts_streams(&pipeline)?;
            IngestPipeline::assemble(pipeline, Front::Ts(src), outputs, true)
        })
        .await
        .map_err(|e| format!("ingest pipeline: {e}"))?
    }

    /// Builds and starts the slate's pipeline: the tees of `pipelines/ingest.txt` fed with
    /// `slate`'s frames in real time, each track from where the ended push's media of its kind
    /// ended (`ends`; now when nothing came), so the playlists' dates and media times go on
    /// without a hole. Off the async workers, as [`IngestPipeline::start`].
    pub async fn start_slate(
        stream_id: &str,
        outputs: Outputs,
        slate: Arc<Slate>,
        ends: MediaEnds,
    ) -> Result<IngestPipeline, String> {
        let base = ends.base().unwrap_or_else(chrono::Utc::now);
        let stream_id = stream_id.to_string();
        tokio::task::spawn_blocking(move || {
            let pipeline = launch(DESCRIPTION, &format!("slate-{stream_id}"))?;
            let feed = SlateFeed::new(&pipeline, &stream_id, slate)?;
            let (mut p, _reports) = IngestPipeline::assemble(pipeline, Front::Slate(feed), outputs, false)?;
            let _ = p.wall.set(base);
            if let Front::Slate(feed) = &mut p.front {
                feed.run(base, ends)?;
            }
            Ok(p)
        })
        .await
        .map_err(|e| format!("slate pipeline: {e}"))?
    }

    /// What the push's tees carry now (the slate that may follow it is made alike).
    pub fn format(&self) -> Format {
        let caps = |tee: &str| {
            self.pipeline.0.by_name(tee).and_then(|e| e.static_pad("sink")).and_then(|p| p.current_caps())
        };
        Format { video: caps("video"), audio: caps("audio") }
    }

    /// What feeds a byte-stream front from another thread (SRT's receive thread).
    pub fn feeder(&self) -> Option<Feeder> {
        match &self.front {
            Front::Ts(src) => Some(Feeder { src: src.clone(), dropped: 0 }),
            Front::Flv(_) | Front::Webrtc | Front::Slate(_) => None,
        }
    }

    /// Attaches the outputs to a pipeline whose front (FLV or WHIP) feeds the `video` and
    /// `audio` tees, and starts it. `wall_from_first`: the front's timestamps are running times
    /// (WHIP), so the wall-clock base is taken at the first media buffer; the FLV front sets it
    /// from RTMP timestamps in [`IngestPipeline::push`]. Blocking.
    pub(crate) fn assemble(
        pipeline: gst::Pipeline,
        front: Front,
        outputs: Outputs,
        wall_from_first: bool,
    ) -> Result<(IngestPipeline, mpsc::Receiver<PipelineReport>), String> {
        let (tx, rx) = mpsc::channel(16);
        probe_caps(&pipeline, "video", tx.clone(), video_report)?;
        probe_caps(&pipeline, "audio", tx.clone(), audio_report)?;
        let media_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let keyframes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        count_media(&pipeline, &media_bytes, outputs.counters.clone(), &keyframes)?;
        let drained = Arc::new((Mutex::new(false), Condvar::new()));
        watch_bus(&pipeline, tx, drained.clone())?;
        let wall = WallBase::default();
        if wall_from_first {
            wall_at_first_buffer(&pipeline, wall.clone())?;
        }
        let Outputs { live, tap, push, .. } = outputs;
        let channel = live.as_ref().map(|l| (l.channel.clone(), l.generation));
        let encoders = live.as_ref().map(|l| l.encoders.clone());
        let transcodes = live.as_ref().map(|l| l.transcodes.clone()).unwrap_or_default();
        let started = match live {
            Some(live) => live::pipeline::attach(&pipeline, live, wall.clone()),
            None => Ok(()),
        }
        .and_then(|()| match &tap {
            Some(t) => live::taps::attach(&pipeline, t.clone()),
            None => Ok(()),
        })
        .and_then(|()| {
            pipeline
                .set_state(gst::State::Playing)
                .map(|_| ())
                .map_err(|e| format!("ingest pipeline cannot play: {e}"))
        });
        if let Err(e) = started {
            let _ = pipeline.set_state(gst::State::Null);
            if let Some((channel, generation)) = &channel {
                channel.push_ended(*generation);
                channel.finish(*generation);
            }
            if let Some(push) = push {
                push.ended(PushEnd::Reconnectable);
            }
            return Err(e);
        }
        let p = IngestPipeline {
            pipeline: StopOnDrop(pipeline),
            front,
            tap,
            push,
            media_bytes,
            keyframes,
            live: channel,
            encoders,
            transcodes,
            wall,
            drained,
        };
        Ok((p, rx))
    }

    /// Whether the push only passes through to LL-HLS: no ladder rung is encoded (known from
    /// the first video caps on), no WebRTC rung is encoded and no RTSP source is offered. Only
    /// such a push has its reads merged ([`crate::media::ingest::rtmp::server::MERGED_READ`]): there
    /// they save about a quarter of its CPU. Beside an encoder they save under a hundredth, and
    /// the wait they add showed on hls.js's screen (73 ms with the ladder); RTSP and WebRTC
    /// viewers are the ones who watch closest to live.
    pub fn passthrough_only(&self) -> bool {
        let realtime = self.tap.as_ref().is_some_and(|t| t.webrtc || t.rtsp);
        !realtime && !self.transcodes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Dates the push as if its message stamped `newest` (ms) came `ago`: an input that stood by
    /// starts from its buffered keyframe, older than its newest message, which came before the
    /// take-over (an RTMP front only).
    pub fn date_from(&mut self, newest: u32, ago: std::time::Duration) {
        if matches!(self.front, Front::Flv(_)) && self.wall.get().is_none() {
            let ago = chrono::Duration::from_std(ago).unwrap_or_default();
            let _ =
                self.wall.set(chrono::Utc::now() - ago - chrono::Duration::milliseconds(i64::from(newest)));
        }
    }

    /// Dates an MPEG-TS push's first media as arrived at `at`: an SRT input that stood by starts
    /// from its buffered keyframe, which came that long ago.
    pub fn date_ts_from(&mut self, at: chrono::DateTime<chrono::Utc>) {
        if matches!(self.front, Front::Ts(_)) {
            let _ = self.wall.set(at);
        }
    }

    /// Feeds one RTMP audio or video payload, on the calling thread. Until the first keyframe
    /// has reached the `video` tee, a video tag may build the ladder (its caps do: bins are
    /// built and started, which blocks); on a multi-threaded runtime those tags run in
    /// `block_in_place`, so the worker's other tasks move on meanwhile.
    ///
    /// Errs with why the push must end when the pipeline can take no more of it: an element
    /// refused the media for good, or the front did ([`FlvFront::push`]: a codec other than
    /// H.264 and AAC, a publisher that switched codecs mid-push). Such a failure posts nothing
    /// on the bus when it comes back through a chain function, so without this the push would
    /// stay `live` with every later tag dropped.
    pub fn push(&mut self, tag: Tag, timestamp_ms: u32, data: &bytes::Bytes) -> Result<(), String> {
        let Front::Flv(front) = &mut self.front else { return Ok(()) };
        if self.wall.get().is_none() {
            let base = chrono::Utc::now() - chrono::Duration::milliseconds(i64::from(timestamp_ms));
            let _ = self.wall.set(base);
        }
        let setting_up = tag == Tag::Video && self.keyframes.load(std::sync::atomic::Ordering::Relaxed) == 0;
        // Asked only while setting up: every later tag goes straight to the front.
        let threaded = || {
            tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        };
        if setting_up && threaded() {
            tokio::task::block_in_place(|| front.push(tag, timestamp_ms, data))
        } else {
            front.push(tag, timestamp_ms, data)
        }
    }

    /// Ends the stream and releases the pipeline (off the async runtime: state changes may
    /// block). The muxers get up to [`DRAIN`] to flush their last parts; then the channel's open
    /// segments close, and the live session is told (`end`): it ends now, or unless a push
    /// continues it within the reconnect window ([`crate::media::live::session`]). The returned
    /// receiver hears when all that is done.
    pub fn stop(self, end: PushEnd) -> tokio::sync::oneshot::Receiver<()> {
        let (done, released) = tokio::sync::oneshot::channel();
        // Viewers of a push the API ended go now, not after the drain.
        if let (PushEnd::Final, Some(push)) = (end, &self.push) {
            push.let_viewers_go();
        }
        let (pipeline, live, drained, front, push, encoders) =
            (self.pipeline, self.live, self.drained, self.front, self.push, self.encoders);
        let rt = tokio::runtime::Handle::try_current().ok();
        let release = move || {
            // The EOS passes the muxers' inputs as media does, so it is sent off the runtime.
            match front {
                Front::Flv(front) => front.end(),
                Front::Ts(src) => drop(src.end_of_stream()),
                Front::Webrtc => drop(pipeline.0.send_event(gst::event::Eos::new())),
                Front::Slate(feed) => feed.end(),
            }
            if live.is_some() {
                let (lock, cvar) = &*drained;
                let done = lock.lock().unwrap_or_else(|p| p.into_inner());
                let _ = cvar.wait_timeout_while(done, DRAIN, |d| !*d);
            }
            drop(pipeline);
            if let Some((channel, generation)) = live {
                // The session's encoders drain this push's muxers into the channel first.
                if let Some(encoders) = encoders.and_then(|slot| slot.current()) {
                    encoders.end_generation(generation);
                }
                channel.push_ended(generation);
            }
            if let Some(push) = push {
                push.ended(end);
            }
            let _ = done.send(());
        };
        match rt {
            Some(rt) => drop(rt.spawn_blocking(release)),
            None => release(),
        }
        released
    }
}

impl Filler for IngestPipeline {
    fn stop(self: Box<Self>, end: PushEnd) {
        drop(IngestPipeline::stop(*self, end));
    }
}

/// The pipeline of `description`, named `name` (GStreamer initialised first).
fn launch(description: &str, name: &str) -> Result<gst::Pipeline, String> {
    init()?;
    let pipeline = gst::parse::launch(description)
        .map_err(|e| format!("{name}: {e}"))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| format!("{name} is not a pipeline"))?;
    pipeline.set_property("name", name);
    Ok(pipeline)
}

/// Feeds bytes into a front's `appsrc` without blocking: a full source drops them (the demuxer
/// resynchronises on the next packet) and says so now and then.
pub struct Feeder {
    src: gst_app::AppSrc,
    dropped: u64,
}

impl Feeder {
    /// Pushes `bytes`; false once the pipeline no longer takes anything (stopped or failed).
    pub fn feed(&mut self, bytes: &[u8]) -> bool {
        if self.src.current_level_bytes() >= self.src.max_bytes() {
            self.dropped += 1;
            if self.dropped.is_power_of_two() {
                tracing::warn!(dropped = self.dropped, "ingest pipeline is behind; dropping input");
            }
            return true;
        }
        self.src.push_buffer(gst::Buffer::from_slice(bytes.to_vec())).is_ok()
    }
}

/// Links each stream `tsdemux` finds: the first H.264 to `vq`, the first AAC to `aq`, anything
/// else (other codecs, a second program) to a sink of its own, so that it is read and dropped
/// and never stalls the demuxer.
fn link_ts_streams(pipeline: &gst::Pipeline) -> Result<(), String> {
    let demux = pipeline.by_name("demux").ok_or("ingest pipeline has no tsdemux named demux")?;
    let weak = pipeline.downgrade();
    demux.connect_pad_added(move |_, pad| {
        let Some(pipeline) = weak.upgrade() else { return };
        let caps = pad.current_caps().unwrap_or_else(|| pad.query_caps(None));
        let name = caps.structure(0).map(|s| s.name().to_string()).unwrap_or_default();
        let queue = match name.as_str() {
            "video/x-h264" => "vq",
            "audio/mpeg" => "aq",
            _ => "",
        };
        let sink = pipeline.by_name(queue).and_then(|q| q.static_pad("sink")).filter(|p| !p.is_linked());
        let linked = match sink {
            Some(sink) => pad.link(&sink).map_err(|e| e.to_string()),
            None => drop_stream(&pipeline, pad),
        };
        match linked {
            Ok(_) if queue.is_empty() => {
                tracing::info!(pipeline = %pipeline.name(), caps = %name, "ingest: a stream that is not H.264 or AAC is dropped")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(pipeline = %pipeline.name(), error = %e, "ingest: a demuxed stream is not used"),
        }
    });
    Ok(())
}

/// Sends a demuxed stream to a sink of its own.
fn drop_stream(pipeline: &gst::Pipeline, pad: &gst::Pad) -> Result<gst::PadLinkSuccess, String> {
    let sink = gst::ElementFactory::make("fakesink")
        .property("sync", false)
        .property("async", false)
        .build()
        .map_err(|e| e.to_string())?;
    pipeline.add(&sink).map_err(|e| e.to_string())?;
    sink.sync_state_with_parent().map_err(|e| e.to_string())?;
    pad.link(&sink.static_pad("sink").ok_or("fakesink has no pad")?).map_err(|e| e.to_string())
}

fn probe_caps(
    pipeline: &gst::Pipeline,
    element: &str,
    tx: mpsc::Sender<PipelineReport>,
    report: fn(&gst::StructureRef) -> Option<PipelineReport>,
) -> Result<(), String> {
    let pad = pipeline
        .by_name(element)
        .and_then(|e| e.static_pad("sink"))
        .ok_or_else(|| format!("ingest pipeline has no {element} tee"))?;
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        if let Some(gst::PadProbeData::Event(ev)) = &info.data {
            if let gst::EventView::Caps(c) = ev.view() {
                if let Some(r) = c.caps().structure(0).and_then(report) {
                    let _ = tx.try_send(r);
                }
            }
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

fn video_report(s: &gst::StructureRef) -> Option<PipelineReport> {
    let codec = match s.name().as_str() {
        "video/x-h264" => "h264".to_string(),
        other => other.to_string(),
    };
    Some(PipelineReport::Video {
        codec,
        width: s.get::<i32>("width").ok()?,
        height: s.get::<i32>("height").ok()?,
        frame_rate: crate::media::gst::frame_rate_of(s),
    })
}

fn audio_report(s: &gst::StructureRef) -> Option<PipelineReport> {
    let codec = match s.name().as_str() {
        "audio/mpeg" => "aac".to_string(),
        other => other.to_string(),
    };
    Some(PipelineReport::Audio {
        codec,
        sample_rate: s.get::<i32>("rate").ok()?,
        channels: s.get::<i32>("channels").ok()?,
    })
}

/// Counts the media bytes reaching the tees (and into the stream's counters), and the keyframes
/// reaching the `video` tee: one probe a tee, as each probe is called on every frame.
fn count_media(
    pipeline: &gst::Pipeline,
    bytes: &Arc<std::sync::atomic::AtomicU64>,
    stream: Option<Arc<crate::metrics::StreamCounters>>,
    keyframes: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), String> {
    use std::sync::atomic::Ordering::Relaxed;
    for tee in ["video", "audio"] {
        let pad = pipeline
            .by_name(tee)
            .and_then(|e| e.static_pad("sink"))
            .ok_or_else(|| format!("ingest pipeline has no {tee} tee"))?;
        let (bytes, stream) = (bytes.clone(), stream.clone());
        let keyframes = (tee == "video").then(|| keyframes.clone());
        pad.add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(gst::PadProbeData::Buffer(b)) = &info.data {
                bytes.fetch_add(b.size() as u64, Relaxed);
                if let Some(s) = &stream {
                    s.bytes_in.fetch_add(b.size() as u64, Relaxed);
                }
                if let Some(k) = &keyframes {
                    if !b.flags().contains(gst::BufferFlags::DELTA_UNIT) {
                        k.fetch_add(1, Relaxed);
                    }
                }
            }
            gst::PadProbeReturn::Ok
        });
    }
    Ok(())
}

/// Sets the wall-clock base at the first media buffer: now, less its running time.
fn wall_at_first_buffer(pipeline: &gst::Pipeline, wall: WallBase) -> Result<(), String> {
    for tee in ["video", "audio"] {
        let pad = pipeline
            .by_name(tee)
            .and_then(|e| e.static_pad("sink"))
            .ok_or_else(|| format!("ingest pipeline has no {tee} tee"))?;
        let wall = wall.clone();
        pad.add_probe(gst::PadProbeType::BUFFER, move |pad, info| {
            if wall.get().is_some() {
                return gst::PadProbeReturn::Remove;
            }
            if let Some(gst::PadProbeData::Buffer(b)) = &info.data {
                let running = b.pts().and_then(|pts| crate::media::gst::running_time(pad, pts));
                if let Some(running) = running {
                    let base = chrono::Utc::now() - chrono::Duration::nanoseconds(running.nseconds() as i64);
                    let _ = wall.set(base);
                }
            }
            gst::PadProbeReturn::Ok
        });
    }
    Ok(())
}

/// Turns bus errors into reports naming the element, notes the end of the drain and schedules
/// the muxers' threads ([`live::threads::schedule_muxer_thread`]).
fn watch_bus(
    pipeline: &gst::Pipeline,
    tx: mpsc::Sender<PipelineReport>,
    drained: Arc<(Mutex<bool>, Condvar)>,
) -> Result<(), String> {
    let bus = pipeline.bus().ok_or("ingest pipeline has no bus")?;
    bus.set_sync_handler(move |_, msg| {
        match msg.view() {
            gst::MessageView::Error(err) => {
                let element = err.src().map(|s| s.path_string().to_string()).unwrap_or_default();
                let _ = tx.try_send(PipelineReport::Error(format!("{element}: {}", err.error())));
            }
            gst::MessageView::StreamStatus(status) => live::threads::schedule_muxer_thread(status),
            gst::MessageView::Eos(_) => {
                let (lock, cvar) = &*drained;
                *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
                cvar.notify_all();
            }
            _ => {}
        }
        gst::BusSyncReply::Drop
    });
    Ok(())
}

#[cfg(test)]
mod tests;
