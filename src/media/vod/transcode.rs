//! The ladder transcode of one VOD, in one GStreamer pipeline:
//!
//! ```text
//! uridecodebin ─ video ─ videoconvert ─ tee raw ─┬─ fit ─ x264 (rung 1) ─ cmafmux ─ appsink
//!                                                ├─ fit ─ x264 (rung n) ─ cmafmux ─ appsink
//!                                                └─ fit ─ one frame ─ jpegenc ───── appsink (thumb.jpg)
//!              └ audio ─ audioconvert ─ AAC (once) ─ cmafmux ─ appsink
//! ```
//!
//! The source is decoded once. Every rung's encoder gets the same frames with a fixed keyframe
//! interval of one segment and no scene-cut keyframes (`pipelines/vod-rung.txt`), so keyframes,
//! and the `cmafmux` fragments cut at them, line up across renditions. Appsink callbacks write
//! each init section and fragment to the job's work folder; the worker uploads them afterwards.
//!
//! Whatever may block in GStreamer — the first `gst::init` (a registry scan), building the
//! pipeline (plugins load), state changes (they wait on the streaming threads) — runs on
//! tokio's blocking threads; the async part only watches the bus, the stop signal and the clock.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use tokio::sync::watch;

use super::probe::SourceInfo;
use super::thumbnail::thumbnail;
use crate::domain::vod::PlannedRung;
use crate::media::gst::StopOnDrop;
use crate::media::hls::vod::Segment;

const RUNG: &str = include_str!("../../../pipelines/vod-rung.txt");
const AUDIO: &str = include_str!("../../../pipelines/vod-audio.txt");

/// Segment length of VOD renditions (Apple's HLS authoring guidance: 6 s; 4 s starts faster).
pub const SEGMENT_SECONDS: f64 = 4.0;
/// A pipeline that makes no progress for this long has stalled.
const STALL: Duration = Duration::from_secs(120);

/// The VOD pipeline descriptions an operator can replace (`SLUICE_PIPELINES_DIR`).
#[derive(Debug, Clone)]
pub struct Descriptions {
    pub rung: String,
    pub audio: String,
}

impl Descriptions {
    pub fn load(dir: Option<&Path>) -> Descriptions {
        let read = |name: &str, builtin: &str| crate::media::gst::description(dir, name, builtin);
        Descriptions { rung: read("vod-rung.txt", RUNG), audio: read("vod-audio.txt", AUDIO) }
    }
}

/// What to transcode, and where to.
#[derive(Clone)]
pub struct Job {
    pub uri: String,
    pub work_dir: PathBuf,
    pub rungs: Vec<PlannedRung>,
    pub source: SourceInfo,
    pub descriptions: Descriptions,
}

/// One rendition written to the work folder (`<name>/init.mp4`, `<name>/s<n>.m4s`).
#[derive(Debug, Clone, Default)]
pub struct Rendition {
    pub name: String,
    pub width: u32,
    pub height: u32,
    pub kbps: u32,
    pub codec: Option<String>,
    pub channels: u32,
    pub has_init: bool,
    pub segments: Vec<Segment>,
    pub error: Option<String>,
}

impl Rendition {
    pub fn duration(&self) -> f64 {
        self.segments.iter().map(|s| s.duration).sum()
    }
}

/// What the pipeline wrote.
#[derive(Debug)]
pub struct Output {
    pub video: Vec<Rendition>,
    pub audio: Option<Rendition>,
    /// `thumb.jpg` in the work folder.
    pub thumbnail: bool,
}

/// Why a transcode did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The media cannot be transcoded; the message is for the VOD's `error`.
    Media(String),
    /// Stopped from outside (cancellation or shutdown).
    Stopped,
}

/// The name of the audio rendition.
pub const AUDIO_NAME: &str = "audio";

/// Scales (and crops or pads) raw video to the rung's box. `name`s the size's capsfilter, whose
/// colorimetry [`keep_colorimetry`] pins to the source's.
///
/// The multi-tap bilinear scaler: the default 2-tap one aliases on the 2-3x downscales of a
/// ladder (SSIM against the source 0.984 against 0.997 at 360p of 1080p, measured with
/// `benches/vod_ladder`'s method) for 8 % more time in a one-rung decode-scale-encode pipeline.
fn fit_chain(r: &PlannedRung, name: &str) -> String {
    let mut chain = format!(
        "videoscale method=bilinear2 add-borders=false \
         ! capsfilter name={name} caps=\"video/x-raw,width={},height={},pixel-aspect-ratio=1/1\"",
        r.scale_width, r.scale_height
    );
    if r.scale_width > r.width || r.scale_height > r.height {
        // crop: cut what sticks out of the box, evenly on both sides.
        let (x, y) = (r.crop_x, r.crop_y);
        chain.push_str(&format!(
            " ! videocrop left={x} right={} top={y} bottom={}",
            r.scale_width - r.width - x,
            r.scale_height - r.height - y
        ));
    } else if r.scale_width < r.width || r.scale_height < r.height {
        // pad: black bars around the fitted picture (videobox borders are negative crops).
        let (x, y) = (r.crop_x, r.crop_y);
        chain.push_str(&format!(
            " ! videobox fill=black left=-{x} right=-{} top=-{y} bottom=-{}",
            r.width - r.scale_width - x,
            r.height - r.scale_height - y
        ));
    }
    chain
}

fn mux(name: &str) -> String {
    // A fragment a frame short of the segment: the keyframe a segment later always starts the
    // next one, even with millisecond-rounded timestamps.
    let fragment = ((SEGMENT_SECONDS - 0.04) * 1e9) as u64;
    format!(
        "cmafmux name=mux_{name} fragment-duration={fragment} send-force-keyunit=false \
         ! appsink name=out_{name} buffer-list=true sync=false async=false max-buffers=8 drop=false"
    )
}

fn video_description(job: &Job) -> String {
    let fps = job.source.frame_rate.filter(|f| *f > 0.0).unwrap_or(30.0);
    let keyint = (SEGMENT_SECONDS * fps).round().max(1.0) as u32;
    let q = "queue max-size-buffers=8 max-size-bytes=0 max-size-time=0";
    let mut desc = format!("{q} name=vin ! videoconvert ! tee name=raw\n");
    for r in &job.rungs {
        let enc = job
            .descriptions
            .rung
            .replace("{kbps}", &r.kbps.to_string())
            .replace("{keyint}", &keyint.to_string())
            .replace("{width}", &r.width.to_string())
            .replace("{height}", &r.height.to_string());
        desc.push_str(&format!(
            "raw. ! {q} ! {} ! {} ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! {}\n",
            fit_chain(r, &format!("fit_{}", r.name)),
            enc.trim(),
            mux(&r.name)
        ));
    }
    if let Some(top) = job.rungs.first() {
        desc.push_str(&format!(
            "raw. ! {q} name=thumbq ! videoconvert ! {} ! jpegenc quality=85 \
             ! appsink name=thumb sync=false async=false\n",
            fit_chain(top, "fit_thumb")
        ));
    }
    desc
}

fn audio_description(job: &Job) -> String {
    format!(
        "queue max-size-buffers=0 max-size-bytes=0 max-size-time=3000000000 name=ain ! audioconvert ! audioresample \
         ! {} ! aacparse ! {}",
        job.descriptions.audio.trim(),
        mux(AUDIO_NAME)
    )
}

fn bin(description: &str, input: &str) -> Result<gst::Bin, Failure> {
    let bin = gst::parse::bin_from_description(description, false)
        .map_err(|e| Failure::Media(format!("building the transcode pipeline: {e}")))?;
    let pad =
        bin.by_name(input).and_then(|e| e.static_pad("sink")).ok_or(Failure::Media("no input pad".into()))?;
    let ghost = gst::GhostPad::builder_with_target(&pad)
        .map_err(|e| Failure::Media(format!("ghost pad: {e}")))?
        .name("sink")
        .build();
    bin.add_pad(&ghost).map_err(|e| Failure::Media(format!("ghost pad: {e}")))?;
    Ok(bin)
}

type Shared = Arc<Mutex<Rendition>>;

fn lock(r: &Shared) -> std::sync::MutexGuard<'_, Rendition> {
    r.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes a muxer's output into `<work>/<name>/`: the init section, then one file per fragment.
fn collect(bin: &gst::Bin, name: &str, dir: PathBuf, audio: bool, out: Shared) -> Result<(), Failure> {
    let missing = || Failure::Media(format!("no muxer output for {name}"));
    let mux = bin.by_name(&format!("mux_{name}")).ok_or_else(missing)?;
    let sink = bin
        .by_name(&format!("out_{name}"))
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or_else(missing)?;
    std::fs::create_dir_all(&dir).map_err(|e| Failure::Media(format!("work folder: {e}")))?;
    let pad = mux.static_pad("sink").or_else(|| mux.sink_pads().into_iter().next()).ok_or_else(missing)?;
    let codec_out = out.clone();
    pad.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let gst::EventView::Caps(c) = ev.view() else { return gst::PadProbeReturn::Ok };
        let Some(s) = c.caps().structure(0) else { return gst::PadProbeReturn::Ok };
        let data = s.get::<gst::Buffer>("codec_data").ok();
        let map = data.as_ref().and_then(|b| b.map_readable().ok());
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let mut r = lock(&codec_out);
        if audio {
            r.codec = crate::media::cmaf::mp4a_codec(bytes);
            r.channels = s.get::<i32>("channels").unwrap_or(2).max(1) as u32;
        } else {
            r.codec = crate::media::cmaf::avc1_codec(bytes);
        }
        gst::PadProbeReturn::Ok
    });
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let mut buffers: Vec<gst::Buffer> = match sample.buffer_list() {
                    Some(list) => list.iter_owned().collect(),
                    None => sample.buffer_owned().into_iter().collect(),
                };
                let mut r = lock(&out);
                if buffers
                    .first()
                    .is_some_and(|b| b.flags().contains(gst::BufferFlags::DISCONT | gst::BufferFlags::HEADER))
                    && !r.has_init
                {
                    let init = buffers.remove(0);
                    let ok = init.map_readable().map(|m| std::fs::write(dir.join("init.mp4"), &m[..]));
                    match ok {
                        Ok(Ok(())) => r.has_init = true,
                        _ => r.error = Some("writing an init section".into()),
                    }
                }
                let Some(header) = buffers.first() else { return Ok(gst::FlowSuccess::Ok) };
                let duration = header.duration().map_or(0.0, |d| d.nseconds() as f64 / 1e9);
                let uri = format!("s{}.m4s", r.segments.len());
                let mut data = Vec::new();
                for b in &buffers {
                    if let Ok(m) = b.map_readable() {
                        data.extend_from_slice(&m);
                    }
                }
                if std::fs::write(dir.join(&uri), &data).is_err() {
                    r.error = Some("writing a segment".into());
                    return Err(gst::FlowError::Error);
                }
                r.segments.push(Segment { uri, duration, bytes: data.len() as u64 });
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    Ok(())
}

/// A job's pipeline, built and not started, and where its appsinks report.
struct Built {
    pipeline: gst::Pipeline,
    video: Vec<Shared>,
    audio: Option<(gst::Bin, Shared)>,
    thumbnail: Arc<Mutex<bool>>,
}

/// Builds the pipeline of `job` (blocking: see the module's documentation).
fn build(job: &Job) -> Result<Built, Failure> {
    gst::init().map_err(|e| Failure::Media(format!("GStreamer: {e}")))?;
    crate::media::gst::register_builtin().map_err(Failure::Media)?;
    if job.rungs.is_empty() {
        return Err(Failure::Media("no rendition to produce".into()));
    }
    let pipeline = gst::Pipeline::with_name("vod");
    let decode = gst::ElementFactory::make("uridecodebin")
        .property("uri", &job.uri)
        .build()
        .map_err(|e| Failure::Media(format!("uridecodebin: {e}")))?;
    let video = bin(&video_description(job), "vin")?;
    keep_colorimetry(&video, &job.rungs)?;
    pipeline.add_many([&decode, video.upcast_ref()]).map_err(|e| Failure::Media(e.to_string()))?;
    let mut video_out = Vec::new();
    for r in &job.rungs {
        let shared: Shared = Arc::new(Mutex::new(Rendition {
            name: r.name.clone(),
            width: r.width,
            height: r.height,
            kbps: r.kbps,
            ..Default::default()
        }));
        collect(&video, &r.name, job.work_dir.join(&r.name), false, shared.clone())?;
        video_out.push(shared);
    }
    let thumb_written = Arc::new(Mutex::new(false));
    thumbnail(&video, &job.work_dir, job.source.duration, thumb_written.clone()).map_err(Failure::Media)?;

    let audio = if job.source.has_audio {
        let audio = bin(&audio_description(job), "ain")?;
        pipeline.add(&audio).map_err(|e| Failure::Media(e.to_string()))?;
        let shared: Shared =
            Arc::new(Mutex::new(Rendition { name: AUDIO_NAME.into(), ..Default::default() }));
        collect(&audio, AUDIO_NAME, job.work_dir.join(AUDIO_NAME), true, shared.clone())?;
        Some((audio, shared))
    } else {
        None
    };
    link_decoder(&pipeline, &decode, &video, audio.as_ref().map(|(b, _)| b));
    Ok(Built { pipeline, video: video_out, audio, thumbnail: thumb_written })
}

/// Gives each rung's scaled video the colorimetry of the decoded source
/// ([`crate::media::gst::colorimetry_of`]: left open, a 1080p source's 360p rung would be converted
/// to BT.601 on every frame).
fn keep_colorimetry(bin: &gst::Bin, rungs: &[PlannedRung]) -> Result<(), Failure> {
    let tee =
        bin.by_name("raw").and_then(|t| t.static_pad("sink")).ok_or(Failure::Media("no raw tee".into()))?;
    let filters: Vec<gst::Element> =
        rungs.iter().filter_map(|r| bin.by_name(&format!("fit_{}", r.name))).collect();
    tee.add_probe(gst::PadProbeType::EVENT_DOWNSTREAM, move |_, info| {
        let Some(gst::PadProbeData::Event(ev)) = &info.data else { return gst::PadProbeReturn::Ok };
        let gst::EventView::Caps(c) = ev.view() else { return gst::PadProbeReturn::Ok };
        let Some(colorimetry) = crate::media::gst::colorimetry_of(c.caps()) else {
            return gst::PadProbeReturn::Ok;
        };
        for filter in &filters {
            let mut caps = filter.property::<gst::Caps>("caps");
            if let Some(s) = caps.make_mut().structure_mut(0) {
                s.set("colorimetry", colorimetry.as_str());
            }
            filter.set_property("caps", &caps);
        }
        gst::PadProbeReturn::Ok
    });
    Ok(())
}

/// Runs blocking GStreamer work on tokio's blocking threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, Failure> {
    tokio::task::spawn_blocking(work).await.map_err(|e| Failure::Media(format!("GStreamer task: {e}")))
}

/// Builds the pipeline and runs it to the end, reporting progress (0–1). `stop` turning true
/// stops it (cancellation, shutdown).
pub async fn run(
    job: &Job,
    progress: impl Fn(f64),
    mut stop: watch::Receiver<bool>,
) -> Result<Output, Failure> {
    let Built { pipeline, video: video_out, audio, thumbnail: thumb_written } = {
        let job = job.clone();
        blocking(move || build(&job)).await??
    };
    // Stopped however `run` ends, also when its future is dropped (the process stops).
    let stopper = Stopper(Some(StopOnDrop(pipeline.clone())));
    let bus = pipeline.bus().ok_or(Failure::Media("pipeline has no bus".into()))?;
    let mut messages = bus.stream();
    let playing = pipeline.clone();
    if blocking(move || playing.set_state(gst::State::Playing)).await?.is_err() {
        // `stopper` takes the pipeline back to NULL.
        return Err(Failure::Media(first_error(&bus)));
    }
    let duration = job.source.duration.unwrap_or(0.0);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut last_position, mut last_move) = (0u64, Instant::now());
    let result = loop {
        tokio::select! {
            msg = messages.next() => {
                let Some(msg) = msg else { break Err(Failure::Media("the pipeline stopped".into())) };
                match msg.view() {
                    gst::MessageView::Eos(_) => break Ok(()),
                    gst::MessageView::Error(e) => {
                        let from = e.src().map(|s| s.name().to_string()).unwrap_or_default();
                        break Err(Failure::Media(format!("{from}: {}", e.error())));
                    }
                    _ => {}
                }
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break Err(Failure::Stopped);
                }
            }
            _ = tick.tick() => {
                let position = pipeline.query_position::<gst::ClockTime>().map_or(0, |p| p.nseconds());
                if position != last_position {
                    (last_position, last_move) = (position, Instant::now());
                } else if last_move.elapsed() > STALL {
                    break Err(Failure::Media("the transcode stalled".into()));
                }
                if duration > 0.0 {
                    progress((position as f64 / 1e9 / duration).clamp(0.0, 1.0));
                }
            }
        }
    };
    stopper.stop().await;
    result?;
    let video: Vec<Rendition> = video_out.iter().map(|r| lock(r).clone()).collect();
    let audio = audio.map(|(_, r)| lock(&r).clone());
    for r in video.iter().chain(audio.iter()) {
        if let Some(e) = &r.error {
            return Err(Failure::Media(format!("{}: {e}", r.name)));
        }
        if !r.has_init || r.segments.is_empty() || r.codec.is_none() {
            return Err(Failure::Media("the file has no decodable frames".into()));
        }
    }
    // A file cut short still decodes, up to where it ends: compare with what its header says.
    if let (Some(declared), Some(top)) = (job.source.duration, video.first()) {
        if declared > 2.0 && top.duration() < 0.9 * declared {
            return Err(Failure::Media(format!(
                "the file is truncated: {:.1} s of video decoded of the {declared:.1} s it declares",
                top.duration()
            )));
        }
    }
    let thumbnail = *thumb_written.lock().unwrap_or_else(|p| p.into_inner());
    Ok(Output { video, audio, thumbnail })
}

/// Takes the pipeline to NULL, which GStreamer needs before its last reference goes: by
/// [`Stopper::stop`], or when dropped (`run` returned early or its future was dropped), on a
/// blocking thread either way since the change waits for the streaming threads to stop. The
/// pipeline travels in a [`StopOnDrop`], so a blocking job that never runs (the runtime shutting
/// down) still stops it as the job is dropped.
struct Stopper(Option<StopOnDrop>);

impl Stopper {
    async fn stop(mut self) {
        if let Some(pipeline) = self.0.take() {
            let _ = blocking(move || drop(pipeline)).await;
        }
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        let Some(pipeline) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drop(pipeline))),
            Err(_) => drop(pipeline),
        }
    }
}

/// Links the decoder's first video and first audio pads to their branches, and anything else
/// to a fakesink (an unlinked pad would stop the decoder).
fn link_decoder(pipeline: &gst::Pipeline, decode: &gst::Element, video: &gst::Bin, audio: Option<&gst::Bin>) {
    let weak = pipeline.downgrade();
    let (video, audio) = (video.downgrade(), audio.map(|a| a.downgrade()));
    decode.connect_pad_added(move |_, pad| {
        let Some(pipeline) = weak.upgrade() else { return };
        let caps = pad.current_caps().or_else(|| Some(pad.query_caps(None)));
        let kind =
            caps.as_ref().and_then(|c| c.structure(0)).map(|s| s.name().to_string()).unwrap_or_default();
        let target = if kind.starts_with("video/") {
            video.upgrade()
        } else if kind.starts_with("audio/") {
            audio.as_ref().and_then(|a| a.upgrade())
        } else {
            None
        };
        if let Some(sink) = target.and_then(|b| b.static_pad("sink")).filter(|p| !p.is_linked()) {
            if pad.link(&sink).is_ok() {
                return;
            }
        }
        if let Ok(fake) =
            gst::ElementFactory::make("fakesink").property("sync", false).property("async", false).build()
        {
            if pipeline.add(&fake).is_ok() {
                let _ = fake.sync_state_with_parent();
                if let Some(sink) = fake.static_pad("sink") {
                    let _ = pad.link(&sink);
                }
            }
        }
    });
}

fn first_error(bus: &gst::Bus) -> String {
    while let Some(msg) = bus.pop() {
        if let gst::MessageView::Error(e) = msg.view() {
            let from = e.src().map(|s| s.name().to_string()).unwrap_or_default();
            return format!("{from}: {}", e.error());
        }
    }
    "the transcode pipeline would not start".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job running as the runtime shuts down (the process stops, a test ends) still leaves its
    /// pipeline in NULL: the Stopper's blocking job may never run then.
    #[test]
    fn a_pipeline_left_running_at_shutdown_is_stopped() {
        gst::init().expect("GStreamer");
        for _ in 0..5 {
            let pipeline = gst::parse::launch("videotestsrc is-live=true ! fakesink")
                .expect("builds")
                .downcast::<gst::Pipeline>()
                .expect("a pipeline");
            pipeline.set_state(gst::State::Playing).expect("plays");
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().expect("runtime");
            let stopper = Stopper(Some(StopOnDrop(pipeline.clone())));
            let (held_tx, held_rx) = std::sync::mpsc::channel();
            rt.spawn(async move {
                let _stopper = stopper;
                let _ = held_tx.send(());
                std::future::pending::<()>().await;
            });
            held_rx.recv().expect("the task holds the stopper");
            drop(rt);
            assert_eq!(pipeline.current_state(), gst::State::Null, "left PLAYING at shutdown");
        }
    }

    fn rung(width: u32, height: u32, sw: u32, sh: u32, x: u32, y: u32) -> PlannedRung {
        PlannedRung {
            name: "r".into(),
            kbps: 1000,
            width,
            height,
            scale_width: sw,
            scale_height: sh,
            crop_x: x,
            crop_y: y,
        }
    }

    #[test]
    fn fitting_chains() {
        let plain = fit_chain(&rung(640, 360, 640, 360, 0, 0), "f");
        assert!(!plain.contains("videobox") && !plain.contains("videocrop"), "{plain}");
        let pad = fit_chain(&rung(1280, 720, 406, 720, 437, 0), "f");
        assert!(pad.ends_with("videobox fill=black left=-437 right=-437 top=-0 bottom=-0"), "{pad}");
        let crop = fit_chain(&rung(1280, 720, 1280, 2276, 0, 778), "f");
        assert!(crop.ends_with("videocrop left=0 right=0 top=778 bottom=778"), "{crop}");
    }
}
