//! Looks at an uploaded source with GStreamer's discoverer before any job is queued: a file
//! without a video track, or one GStreamer cannot read, fails here with a message a person can act
//! on (CONTRACT: VOD — `uploaded`).

use gstreamer as gst;
use gstreamer_pbutils as pbutils;

/// What the transcode needs to know of a source (kept on the VOD as JSON from `uploaded` on).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceInfo {
    /// Seconds; `None` when the container does not say.
    pub duration: Option<f64>,
    /// The picture as displayed (the pixel aspect ratio applied), square pixels.
    pub width: u32,
    pub height: u32,
    pub frame_rate: Option<f64>,
    pub has_audio: bool,
}

/// Probes waiting for the probe thread; more wait for room (asynchronously, holding nothing).
const QUEUE: usize = 16;

type Answer = tokio::sync::oneshot::Sender<Result<SourceInfo, String>>;

/// Probes `uri` on the probe thread. `Err` is the message for the VOD's `error`.
///
/// One probe runs at a time in the process, on a thread of its own: the discoverer once
/// deadlocked in its teardown while other discoverers ran beside it under load (seen in the test
/// suite, not understood). Callers queue the URI and await the answer, so no request or worker
/// holds a lock (or an async thread) while the discoverer reads the file.
pub async fn probe(uri: String) -> Result<SourceInfo, String> {
    static QUEUE_TX: std::sync::OnceLock<Option<tokio::sync::mpsc::Sender<(String, Answer)>>> =
        std::sync::OnceLock::new();
    let tx = QUEUE_TX.get_or_init(|| {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(String, Answer)>(QUEUE);
        let started = std::thread::Builder::new().name("sluice-probe".into()).spawn(move || {
            while let Some((uri, answer)) = rx.blocking_recv() {
                // A panic in a probe fails that file, not every later one.
                let probed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| probe_now(&uri)))
                    .unwrap_or_else(|_| Err("the file could not be probed".into()));
                let _ = answer.send(probed);
            }
        });
        started.ok().map(|_| tx)
    });
    let Some(tx) = tx else { return Err("the probe thread could not start".into()) };
    let (answer, answered) = tokio::sync::oneshot::channel();
    if tx.send((uri, answer)).await.is_err() {
        return Err("the probe thread stopped".into());
    }
    answered.await.unwrap_or_else(|_| Err("the probe thread stopped".into()))
}

/// Probes `uri` here (blocking; the probe thread's work).
fn probe_now(uri: &str) -> Result<SourceInfo, String> {
    gst::init().map_err(|e| format!("GStreamer is not available: {e}"))?;
    let discoverer = pbutils::Discoverer::new(gst::ClockTime::from_seconds(20))
        .map_err(|e| format!("GStreamer's discoverer is not available: {e}"))?;
    let info = discoverer.discover_uri(uri).map_err(|e| describe(&e.to_string()))?;
    match info.result() {
        pbutils::DiscovererResult::Ok => {}
        pbutils::DiscovererResult::MissingPlugins => {
            return Err("the file uses a format this server cannot decode".into());
        }
        // A local file that cannot be typed in 20 s is damaged: qtdemux hunting for a missing index.
        pbutils::DiscovererResult::Timeout => {
            return Err("the file could not be read in time: it is truncated or damaged".into());
        }
        _ => return Err("the file is not a readable media file".into()),
    }
    let video = info.video_streams().into_iter().find(|v| !v.is_image());
    let Some(video) = video else {
        return Err(if info.audio_streams().is_empty() {
            "the file has no video track".into()
        } else {
            "the file has no video track (it is audio only)".into()
        });
    };
    let (w, h) = (video.width(), video.height());
    if w == 0 || h == 0 {
        return Err("the file's video track has no picture size".into());
    }
    let par = video.par();
    let width = if par.numer() > 0 && par.denom() > 0 {
        ((f64::from(w) * f64::from(par.numer()) / f64::from(par.denom())).round() as u32).max(2)
    } else {
        w
    };
    let fps = video.framerate();
    Ok(SourceInfo {
        duration: info.duration().map(|d| d.nseconds() as f64 / 1e9).filter(|d| *d > 0.0),
        width,
        height: h,
        frame_rate: (fps.numer() > 0 && fps.denom() > 0)
            .then(|| f64::from(fps.numer()) / f64::from(fps.denom())),
        has_audio: !info.audio_streams().is_empty(),
    })
}

/// The discoverer's error in words for the VOD's owner.
fn describe(error: &str) -> String {
    let lower = error.to_lowercase();
    if lower.contains("could not determine type") || lower.contains("not recognized") {
        "the file is not a media file GStreamer recognises".into()
    } else if lower.contains("no playable streams") {
        "the file contains no playable streams: it is truncated, damaged or not video".into()
    } else if lower.contains("invalid") || lower.contains("truncated") || lower.contains("moov") {
        format!("the file is damaged or truncated ({error})")
    } else {
        format!("the file could not be read: {error}")
    }
}
