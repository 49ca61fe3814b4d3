//! The slate: what a live session shows while no publisher feeds it, within the stream's
//! reconnect window (CONTRACT: Continuity). A still picture (a dark card reading "The stream
//! will resume shortly") with silent audio, made like the push that went away (its size, frame
//! rate, sample rate and channels), so every rendition goes on: the `source` and `audio`
//! renditions, the ladder's rungs (the session's encoders take the slate's frames as they take a
//! push's) and the tap (WHEP viewers, RTSP clients).
//!
//! It costs almost nothing of its own: one second of H.264 of the picture (a keyframe and frames
//! that repeat it) and one AAC frame of silence are encoded once per format ([`Slate::of`], kept
//! for the process) and then repeated, stamped on, into the tees of a pipeline like a push's
//! ([`crate::media::ingest::pipeline::IngestPipeline::start_slate`]), by a thread that keeps to
//! the wall clock ([`SlateFeed`]). The first frames come at once up to now, from where the
//! ended push's media ended, so the playlists' dates and the media's times go on with no hole.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use self::picture::Picture;
use crate::media::live::channel::MediaEnds;

pub mod picture;

/// The words on the default card.
pub const CARD_TEXT: &str = "The stream will resume shortly";
/// The card's colour (ARGB): a dark slate grey.
pub const CARD_COLOUR: u32 = 0xff1c_2430;
/// How far behind the wall clock the slate may begin (its first frames are sent at once up to
/// now): a push that ended longer ago than this (a slow drain) leaves a hole of the rest.
const MAX_CATCH_UP: Duration = Duration::from_secs(3);
/// Formats whose slate is kept.
const KEPT: usize = 8;
/// How long encoding a slate may take.
const RENDER_DEADLINE: Duration = Duration::from_secs(10);

/// What a push's tees carried: the caps the slate is made to match.
#[derive(Debug, Clone, Default)]
pub struct Format {
    pub video: Option<gst::Caps>,
    pub audio: Option<gst::Caps>,
}

/// The picture's size and frame rate, and the audio's rate and channels, a slate is made for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    video: Option<(i32, i32, i32, i32)>,
    /// The H.264 profile, as the push's caps name it (x264 makes the slate in the same one).
    profile: &'static str,
    audio: Option<(i32, i32)>,
    /// The stream's own picture (its digest), or the default card.
    picture: Option<String>,
}

impl Key {
    fn of(format: &Format, picture: Option<&Picture>) -> Key {
        let video = format.video.as_ref().and_then(|c| c.structure(0)).and_then(|s| {
            let (w, h) = (s.get::<i32>("width").ok()?, s.get::<i32>("height").ok()?);
            let rate = s.get::<gst::Fraction>("framerate").ok().filter(|f| f.numer() > 0 && f.denom() > 0);
            let (n, d) = rate.map_or((30, 1), |f| (f.numer(), f.denom()));
            // Even sizes, as 4:2:0 needs; a size out of reason is not copied.
            let ok = (16..=4096).contains(&w) && (16..=4096).contains(&h) && n / d <= 120;
            ok.then_some((w & !1, h & !1, n, d))
        });
        let audio = format.audio.as_ref().and_then(|c| c.structure(0)).and_then(|s| {
            let (rate, channels) = (s.get::<i32>("rate").ok()?, s.get::<i32>("channels").ok()?);
            Some(((8000..=96_000).contains(&rate).then_some(rate)?, channels.clamp(1, 2)))
        });
        let profile =
            format.video.as_ref().and_then(|c| c.structure(0)).and_then(|s| s.get::<&str>("profile").ok());
        let profile = match profile {
            Some("baseline" | "constrained-baseline") => "constrained-baseline",
            Some("high") => "high",
            _ => "main",
        };
        Key { video, profile, audio, picture: picture.map(|p| p.digest.clone()) }
    }
}

/// One track of the slate: its caps, and the frames that repeat (each with its duration).
#[derive(Clone)]
pub struct Track {
    caps: gst::Caps,
    frames: Vec<gst::Buffer>,
    frame: gst::ClockTime,
}

/// A slate's media, encoded once.
pub struct Slate {
    key: Key,
    video: Option<Track>,
    audio: Option<Track>,
}

impl Slate {
    /// The slate for a push that carried `format`, showing `picture` (or the default card):
    /// made now (blocking: it encodes) or kept from an earlier one.
    pub fn of(format: &Format, picture: Option<&Picture>) -> Result<Arc<Slate>, String> {
        let key = Key::of(format, picture);
        static KEPT_SLATES: OnceLock<Mutex<VecDeque<Arc<Slate>>>> = OnceLock::new();
        let kept = KEPT_SLATES.get_or_init(Default::default);
        let lock = || kept.lock().unwrap_or_else(|p| p.into_inner());
        let kept_one = lock().iter().find(|s| s.key == key).cloned();
        let slate = match kept_one {
            Some(slate) => slate,
            None => {
                let slate = Arc::new(Slate::render(key, picture)?);
                let mut kept = lock();
                kept.push_front(slate.clone());
                kept.truncate(KEPT);
                slate
            }
        };
        Ok(slate.with_audio_config_of(format))
    }

    /// The slate with the push's AAC configuration (`codec_data`) where it is the same format
    /// (raw AAC at the same rate and channels): its silence decodes the same under it, and the
    /// audio rendition's initialization section stays the push's, so players need no new one
    /// (hls.js 1.6 does not load a new one that a partial segment brings before its parts:
    /// its audio stopped there for good).
    fn with_audio_config_of(self: Arc<Slate>, format: &Format) -> Arc<Slate> {
        let (Some(track), Some(push)) = (self.audio.as_ref(), format.audio.as_ref()) else { return self };
        let (Some(ours), Some(theirs)) = (track.caps.structure(0), push.structure(0)) else { return self };
        let same = |field: &str| ours.get::<i32>(field).ok() == theirs.get::<i32>(field).ok();
        let raw = theirs.get::<&str>("stream-format").ok() == Some("raw");
        if theirs.name() != "audio/mpeg" || !raw || !same("mpegversion") || !same("rate") || !same("channels")
        {
            return self;
        }
        if !theirs.has_field("codec_data") || push == &track.caps {
            return self;
        }
        let audio = Some(Track { caps: push.clone(), ..track.clone() });
        Arc::new(Slate { key: self.key.clone(), video: self.video.clone(), audio })
    }

    fn render(key: Key, picture: Option<&Picture>) -> Result<Slate, String> {
        crate::media::gst::init()?;
        let video = key
            .video
            .map(|(w, h, n, d)| {
                let profile = key.profile;
                // One second of frames: the first a keyframe, the others repeat it (a few bytes each).
                let frames = ((n + d - 1) / d).max(2);
                // The stream's picture, fitted into the size with borders, or the default card.
                let still = match picture {
                    Some(p) => format!(
                        "{} ! videoconvert ! videoscale add-borders=true \
                         ! video/x-raw,format=I420,width={w},height={h},pixel-aspect-ratio=1/1 \
                         ! imagefreeze num-buffers={frames} ! video/x-raw,framerate={n}/{d}",
                        p.decoder()
                    ),
                    None => format!(
                        "videotestsrc pattern=solid-color foreground-color={CARD_COLOUR} num-buffers={frames} \
                         ! video/x-raw,format=I420,width={w},height={h},framerate={n}/{d} \
                         ! textoverlay text=\"{CARD_TEXT}\" valignment=center halignment=center font-desc=\"Sans 20\""
                    ),
                };
                let description = format!(
                    "{still} \
                     ! x264enc tune=zerolatency speed-preset=veryfast bframes=0 key-int-max={frames} \
                     ! video/x-h264,profile={profile} ! h264parse ! video/x-h264,stream-format=avc,alignment=au \
                     ! appsink name=out sync=false"
                );
                let frame = gst::ClockTime::SECOND.mul_div_floor(d as u64, n as u64).unwrap_or(gst::ClockTime::ZERO);
                encoded(&description, frame, picture)
            })
            .transpose()?;
        let audio = key
            .audio
            .map(|(rate, channels)| {
                let description = format!(
                    "audiotestsrc wave=silence num-buffers=8 samplesperbuffer=1024 \
                     ! audio/x-raw,format=S16LE,rate={rate},channels={channels} ! voaacenc ! aacparse \
                     ! audio/mpeg,mpegversion=4,stream-format=raw ! appsink name=out sync=false"
                );
                let frame =
                    gst::ClockTime::SECOND.mul_div_floor(1024, rate as u64).unwrap_or(gst::ClockTime::ZERO);
                // Past the encoder's priming, every frame of silence is the same: one repeats.
                encoded(&description, frame, None).map(|mut t| {
                    t.frames = t.frames.split_off(t.frames.len().saturating_sub(1));
                    t
                })
            })
            .transpose()?;
        if video.is_none() && audio.is_none() {
            return Err("the push had neither video nor audio to make a slate like".into());
        }
        Ok(Slate { key, video, audio })
    }
}

/// Runs `description` (ending in an appsink named `out`, and with an appsrc named `img` that
/// `picture` fills when there is one) to its end: the caps and the buffers.
fn encoded(description: &str, frame: gst::ClockTime, picture: Option<&Picture>) -> Result<Track, String> {
    let (pipeline, sink) = launch_to_sink(description)?;
    if let Some(picture) = picture {
        picture.feed(&pipeline.0)?;
    }
    pipeline.0.set_state(gst::State::Playing).map_err(|e| format!("slate: {e}"))?;
    let deadline = Instant::now() + RENDER_DEADLINE;
    let (mut caps, mut frames) = (None, Vec::new());
    loop {
        match sink.try_pull_sample(gst::ClockTime::from_mseconds(100)) {
            Some(sample) => {
                caps = caps.or_else(|| sample.caps_owned());
                frames.extend(sample.buffer_owned());
            }
            None if sink.is_eos() => break,
            None if Instant::now() > deadline => return Err("slate: encoding took too long".into()),
            None => {}
        }
    }
    let caps = caps.ok_or("slate: no caps")?;
    if frames.is_empty() {
        return Err("slate: nothing encoded".into());
    }
    Ok(Track { caps, frames, frame })
}

/// Builds `description` (ending in an appsink named `out`): the pipeline, stopped when dropped,
/// and its sink.
pub(super) fn launch_to_sink(
    description: &str,
) -> Result<(crate::media::gst::StopOnDrop, gst_app::AppSink), String> {
    let pipeline = gst::parse::launch(description)
        .map_err(|e| format!("slate: {e}"))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| "slate: not a pipeline".to_string())?;
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    let sink = pipeline
        .0
        .by_name("out")
        .and_then(|e| e.downcast::<gst_app::AppSink>().ok())
        .ok_or("slate: no appsink")?;
    Ok((pipeline, sink))
}

/// Feeds a slate's frames into a pipeline's `video` and `audio` tees, in real time, on a thread
/// of its own.
pub struct SlateFeed {
    stream_id: String,
    video: gst::Pad,
    audio: gst::Pad,
    slate: Arc<Slate>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlateFeed {
    pub(crate) fn new(
        pipeline: &gst::Pipeline,
        stream_id: &str,
        slate: Arc<Slate>,
    ) -> Result<SlateFeed, String> {
        let pad = |tee: &str| {
            pipeline
                .by_name(tee)
                .and_then(|e| e.static_pad("sink"))
                .ok_or_else(|| format!("slate pipeline has no {tee} tee"))
        };
        Ok(SlateFeed {
            stream_id: stream_id.to_string(),
            video: pad("video")?,
            audio: pad("audio")?,
            slate,
            stop: Arc::default(),
            thread: None,
        })
    }

    /// Starts the feeding thread: media time zero is wall-clock time `base`, and each track
    /// begins where the push's media of its kind ended (`ends`, none before `base`).
    pub(crate) fn run(&mut self, base: DateTime<Utc>, ends: MediaEnds) -> Result<(), String> {
        let behind = (Utc::now() - base).to_std().unwrap_or_default().min(MAX_CATCH_UP);
        let zero = Instant::now().checked_sub(behind).unwrap_or_else(Instant::now);
        let from = |end: Option<DateTime<Utc>>| {
            let after = end.and_then(|e| (e - base).to_std().ok()).unwrap_or_default();
            gst::ClockTime::from_nseconds(after.min(MAX_CATCH_UP).as_nanos() as u64)
        };
        let tracks: Vec<Start> = [(&self.video, "video", ends.video), (&self.audio, "audio", ends.audio)]
            .into_iter()
            .map(|(pad, kind, end)| Start { pad: pad.clone(), kind, from: from(end) })
            .collect();
        let (slate, stop, id) = (self.slate.clone(), self.stop.clone(), self.stream_id.clone());
        let thread = std::thread::Builder::new()
            .name("slate".into())
            .spawn(move || feed(&slate, &tracks, zero, &stop, &id))
            .map_err(|e| format!("slate thread: {e}"))?;
        self.thread = Some(thread);
        Ok(())
    }

    /// Stops the thread and ends both tracks (EOS into each tee).
    pub(crate) fn end(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        for pad in [&self.video, &self.audio] {
            pad.send_event(gst::event::Eos::new());
        }
    }
}

/// Where a track of the slate starts: its tee's pad, its kind, and the media time of its first
/// frame.
struct Start {
    pad: gst::Pad,
    kind: &'static str,
    from: gst::ClockTime,
}

/// The feeding thread: each track's events, then its frames in turn, the earlier first, each
/// sent when the wall clock reaches it (`zero` + its time).
fn feed(slate: &Slate, tracks: &[Start], zero: Instant, stop: &AtomicBool, stream_id: &str) {
    struct Running<'a> {
        pad: &'a gst::Pad,
        track: &'a Track,
        from: gst::ClockTime,
        sent: u64,
    }
    let mut running = Vec::new();
    for Start { pad, kind, from } in tracks {
        let track = match *kind {
            "video" => slate.video.as_ref(),
            _ => slate.audio.as_ref(),
        };
        pad.send_event(gst::event::StreamStart::new(&format!("slate-{stream_id}/{kind}")));
        let Some(track) = track else { continue };
        pad.send_event(gst::event::Caps::new(&track.caps));
        pad.send_event(gst::event::Segment::new(&gst::FormattedSegment::<gst::ClockTime>::new()));
        running.push(Running { pad, track, from: *from, sent: 0 });
    }
    while !stop.load(Ordering::SeqCst) {
        let Some(next) = running.iter_mut().min_by_key(|r| r.from + r.track.frame * r.sent) else { return };
        let at = next.from + next.track.frame * next.sent;
        let due = zero + Duration::from_nanos(at.nseconds());
        let now = Instant::now();
        if due > now {
            std::thread::sleep((due - now).min(Duration::from_millis(20)));
            continue;
        }
        let frames = &next.track.frames;
        let index = (next.sent % frames.len() as u64) as usize;
        let mut buffer = frames[index].copy();
        if let Some(b) = buffer.get_mut() {
            b.set_pts(at);
            b.set_dts(at);
            b.set_duration(next.track.frame);
            match index {
                0 => b.unset_flags(gst::BufferFlags::DELTA_UNIT),
                _ => b.set_flags(gst::BufferFlags::DELTA_UNIT),
            }
            b.unset_flags(gst::BufferFlags::DISCONT | gst::BufferFlags::HEADER);
        }
        next.sent += 1;
        if let Err(e) = next.pad.chain(buffer) {
            if e != gst::FlowError::Flushing {
                tracing::warn!(stream = %stream_id, flow = ?e, "the slate's pipeline does not take its frames");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests;
