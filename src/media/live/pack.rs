//! The `source` and `audio` renditions, packaged on the thread that brings their frames: an
//! `appsink` behind the push's tee hands each frame to a [`Packager`], which cuts where its
//! [`Splitter`] says and writes each part's CMAF chunk itself ([`crate::media::cmaf::write`])
//! into the channel.
//!
//! Why not `cmafmux`, as the rungs have: a muxer is an aggregator, whose own thread takes what
//! its pad is given, so each passthrough push had two more threads to wake a few times a part
//! and the futex calls of the aggregator's queue on every frame, most of what a push that only
//! passes through cost beyond nginx-rtmp's (docs/live-ingest.md). Nothing is encoded here and
//! the frames are already what a CMAF track holds (H.264 in `avc1` form, raw AAC), so writing
//! the boxes is copying the frames and a few hundred bytes of `moof`. The boxes are
//! `cmafmux`'s for the same track, and the timeline too: running time, the first part starting
//! at its earliest presentation time; the decode times of later parts continue the earlier
//! parts' exactly ([`Packager::write`]).

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

use super::channel::Chunk;
use super::mux::{note_caps, Declared, Target};
use super::split::{lasts_until_next, Plan, Split, Splitter};
use crate::media::cmaf::write::{self, Sample, Track};

/// The video's timescale: 90 kHz, which holds a publisher's millisecond timestamps exactly.
const VIDEO_TIMESCALE: u32 = 90_000;
/// The most frames or bytes a part holds: a part has far fewer (20 at 60 fps and 333-ms parts);
/// past this (a publisher's clock that stands still, say) the frames go out as a part at once.
const MAX_HELD: usize = 256;
const MAX_HELD_BYTES: usize = 32 << 20;

/// How a rendition is cut.
pub(super) enum Cutting {
    /// The `source` variant: by this splitter, in decode order, with segments at the publisher's
    /// keyframes (those without `DELTA_UNIT`).
    Source(Splitter),
    /// AAC: by a splitter made from the first caps, whose sample rate sets the frame (1024
    /// samples) and so the part ([`Plan::aac`]); every frame can start a segment. Its segments
    /// keep to the video's 2-s grid, half a part after it, so that no audio part is published
    /// at the moment a video part is: video.js (VHS 3) skips loading audio while its video
    /// SourceBuffer is updating and looks again only 500 ms later, and a segment's first audio
    /// and video parts published together left its audio buffer to run dry
    /// (docs/live-hls.md, "Players").
    Audio { segment: f64, part: f64, video: Arc<AtomicU64> },
}

/// A frame held for the open part: running times (ns; negative before the segment's start).
struct Held {
    buffer: gst::Buffer,
    pts: i64,
    dts: i64,
    sync: bool,
}

/// One rendition's packaging state, fed frame by frame.
pub(super) struct Packager {
    name: String,
    to: Target,
    declared: Declared,
    /// The audio's segment, part and the video's origin, until its first caps make its splitter.
    audio: Option<(f64, f64, Arc<AtomicU64>)>,
    splitter: Option<Splitter>,
    caps: Option<gst::Caps>,
    /// The track of the last initialization section fed, and its timescale.
    track: Option<(Track, u32)>,
    /// The frames of the open part, and whether it starts a segment (`None`: no part is open;
    /// frames before the next keyframe are dropped, as a muxer drops what precedes one).
    held: Vec<Held>,
    held_bytes: usize,
    open: Option<bool>,
    /// Presentation less decode time of the track's first part, in ticks ([`Packager::write`]).
    shift: Option<i64>,
    sequence: u32,
}

impl Packager {
    pub(super) fn new(name: &str, to: Target, declared: Declared, cutting: Cutting) -> Packager {
        let (splitter, audio) = match cutting {
            Cutting::Source(s) => (Some(s), None),
            Cutting::Audio { segment, part, video } => (None, Some((segment, part, video))),
        };
        Packager {
            name: name.to_string(),
            to,
            declared,
            audio,
            splitter,
            caps: None,
            track: None,
            held: Vec::new(),
            held_bytes: 0,
            open: None,
            shift: None,
            sequence: 0,
        }
    }

    /// Takes one frame with the caps and segment it came with.
    pub(super) fn frame(
        &mut self,
        buffer: gst::Buffer,
        caps: Option<&gst::CapsRef>,
        segment: Option<&gst::Segment>,
    ) {
        if let Some(caps) = caps {
            // Frame after frame the same caps come: compared by pointer first (comparing their
            // fields each frame was 6 % of a passthrough push's CPU).
            match &self.caps {
                Some(c) if c.as_ptr() == caps.as_ptr() => {}
                Some(c) if c.as_ref() == caps => self.caps = Some(caps.to_owned()),
                _ => self.new_caps(caps),
            }
        }
        let Some(timescale) = self.track.as_ref().map(|(_, t)| *t) else { return };
        let Some(pts) = buffer.pts() else { return };
        let dts = buffer.dts().unwrap_or(pts);
        let running = |t: gst::ClockTime| -> i64 {
            let signed = segment
                .and_then(|s| s.downcast_ref::<gst::ClockTime>())
                .and_then(|s| s.to_running_time_full(t))
                .unwrap_or(gst::Signed::Positive(t));
            match signed {
                gst::Signed::Positive(t) => i64::try_from(t.nseconds()).unwrap_or(i64::MAX),
                gst::Signed::Negative(t) => -i64::try_from(t.nseconds()).unwrap_or(i64::MAX),
            }
        };
        let audio = self.audio.is_some();
        let flagged = !buffer.flags().contains(gst::BufferFlags::DELTA_UNIT);
        let split =
            self.splitter.as_mut().and_then(|s| s.next(pts.nseconds(), dts.nseconds(), flagged || audio));
        let split = split.map(|split| {
            if split == Split::Segment && !flagged {
                return Split::Part;
            }
            split
        });
        let held = Held { pts: running(pts), dts: running(dts), sync: flagged || audio, buffer };
        if self.open.is_none() {
            // The first segment starts at the first keyframe (the splitter makes no cut before
            // its first frame), as a muxer's first fragment does.
            if !held.sync {
                return;
            }
            self.open = Some(true);
        } else if let Some(split) = split {
            self.write(Some(held.dts), timescale);
            self.open = Some(split == Split::Segment);
        } else if self.held.len() >= MAX_HELD || self.held_bytes >= MAX_HELD_BYTES {
            self.write(Some(held.dts), timescale);
        }
        self.held_bytes += held.buffer.size();
        self.held.push(held);
    }

    /// The end of the stream: the open part goes out, its last frame lasting its own duration.
    pub(super) fn end(&mut self) {
        if let Some(timescale) = self.track.as_ref().map(|(_, t)| *t) {
            self.write(None, timescale);
        }
        self.open = None;
    }

    /// New caps. The first give the initialization section; a later change of the track (a
    /// publisher that changes its resolution mid-push) is noted and its frames go on under the
    /// first section, as `cmafmux`, which refuses such a change, left them (docs/live-ingest.md).
    fn new_caps(&mut self, caps: &gst::CapsRef) {
        self.caps = Some(caps.to_owned());
        note_caps(&self.to, &self.name, &self.declared, caps);
        let Some(s) = caps.structure(0) else { return };
        if let (Some((segment, part, video)), None) = (&self.audio, &self.splitter) {
            let rate = s.get::<i32>("rate").unwrap_or(48_000);
            let plan = Plan::aac(*segment, *part, rate);
            // The first caps make the plan: an AAC stream keeps its rate.
            // Half a part after the video's lines: see [`Cutting::Audio`].
            self.splitter =
                Some(Splitter::at_any_frame(*segment, plan).on_the_videos_grid(video.clone(), part / 2.0));
        }
        let track = track_of(s);
        match (&self.track, track) {
            (Some((first, _)), Some(track)) if *first != track => {
                tracing::info!(rendition = %self.name, caps = %caps, "the track changed mid-push; it goes on under its first initialization section");
            }
            (Some(_), _) => {}
            (None, None) => {
                tracing::warn!(rendition = %self.name, caps = %caps, "caps that cannot be packaged; frames dropped");
            }
            (None, Some(track)) => {
                let timescale = match &track {
                    Track::Video { .. } => VIDEO_TIMESCALE,
                    Track::Audio { rate, .. } => (*rate).max(1),
                };
                let init = write::init(&track, timescale);
                self.to.channel.feed(self.to.generation, &self.name, Chunk::Init(Bytes::from(init)));
                self.track = Some((track, timescale));
            }
        }
    }

    /// Writes the held frames as one part, the last lasting until `next` (the decode time of
    /// the frame after it) or, without one, its own duration.
    fn write(&mut self, next: Option<i64>, timescale: u32) {
        let Some(starts_segment) = self.open else { return };
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        self.held_bytes = 0;
        let ticks =
            |ns: i64| -> i64 { (i128::from(ns) * i128::from(timescale)).div_euclid(1_000_000_000) as i64 };
        let last = held.len() - 1;
        let end = |i: usize| -> i64 {
            let own = held[i].buffer.duration().map(gst::ClockTime::nseconds);
            let until = |n: i64| lasts_until_next(u64::try_from(n - held[i].dts).unwrap_or(0), own);
            match held.get(i + 1).map(|h| h.dts).or(next) {
                Some(n) if i < last || until(n) => n.max(held[i].dts),
                // Its own length; without one, as long as the frame before it.
                _ => {
                    let before = || i.checked_sub(1).map_or(0, |p| held[i].dts - held[p].dts);
                    held[i].dts + own.map_or_else(before, |d| i64::try_from(d).unwrap_or(i64::MAX))
                }
            }
        };
        let earliest = held.iter().map(|h| h.pts).min().unwrap_or(0);
        // Decode times are the frames' own, moved by one shift for the whole track: the first
        // part's earliest presentation time less its first decode time, so that the first part
        // starts at its earliest presentation time, as `cmafmux` writes it. Each part's decode
        // times then continue the last part's exactly. (Taken afresh for each part, as
        // `cmafmux` takes it, the shift changes with where a part starts among a publisher's
        // B-frames, and the decode times of a part overlap the last part's or leave a gap, which
        // a browser's Media Source treats as a discontinuity.)
        let shift = *self.shift.get_or_insert(ticks(earliest) - ticks(held[0].dts));
        let decode_time = (ticks(held[0].dts) + shift).max(0);
        let mut samples = Vec::with_capacity(held.len());
        let mut total = 0i64;
        for (i, h) in held.iter().enumerate() {
            let duration = (ticks(end(i)) - ticks(h.dts)).max(0);
            total += duration;
            // Presented at its own time: its decode time plus this offset.
            let offset = ticks(h.pts) - (ticks(h.dts) + shift);
            samples.push(Sample {
                size: u32::try_from(h.buffer.size()).unwrap_or(u32::MAX),
                duration: u32::try_from(duration).unwrap_or(u32::MAX),
                composition_offset: i32::try_from(offset).unwrap_or(0),
                sync: h.sync,
            });
        }
        self.sequence = self.sequence.wrapping_add(1);
        let data = write::chunk(self.sequence, decode_time as u64, &samples, starts_segment, |v| {
            for h in &held {
                if let Ok(map) = h.buffer.map_readable() {
                    v.extend_from_slice(&map);
                }
            }
        });
        let pdt = self.to.wall.get().map(|base| *base + chrono::Duration::nanoseconds(earliest));
        let chunk = Chunk::Part {
            starts_segment,
            // Every AAC frame decodes on its own (each is `sync`): each audio part is independent
            // (RFC 8216bis 4.4.4.9). A source part is when it starts with the publisher's keyframe.
            independent: starts_segment || held[0].sync,
            duration: total as f64 / f64::from(timescale),
            pdt,
            data: Bytes::from(data),
        };
        self.to.channel.feed(self.to.generation, &self.name, chunk);
        // The open part after this one is a part of the same segment unless a cut says more.
        self.open = Some(false);
    }
}

/// The track that caps describe: H.264 in `avc` form with its `avcC`, or raw AAC with its
/// AudioSpecificConfig.
fn track_of(s: &gst::StructureRef) -> Option<Track> {
    let codec_data = s.get::<gst::Buffer>("codec_data").ok()?;
    let data = codec_data.map_readable().ok()?.to_vec();
    match s.name().as_str() {
        "video/x-h264" if s.get::<&str>("stream-format").ok() == Some("avc") => Some(Track::Video {
            width: u16::try_from(s.get::<i32>("width").ok()?).ok()?,
            height: u16::try_from(s.get::<i32>("height").ok()?).ok()?,
            avcc: data,
        }),
        "audio/mpeg" if s.get::<i32>("mpegversion").ok() == Some(4) => Some(Track::Audio {
            channels: u16::try_from(s.get::<i32>("channels").unwrap_or(2).max(1)).ok()?,
            rate: u32::try_from(s.get::<i32>("rate").ok()?).ok()?,
            asc: data,
        }),
        _ => None,
    }
}

/// The sink that packages a rendition on the thread that pushes into it, to be added to the
/// push's pipeline and linked to its tee (no bin: a ghost pad would be one more hop a frame).
/// It holds nothing: each frame is handed to the [`Packager`] as it comes.
pub(super) fn sink(packager: Packager) -> gst::Element {
    let sink = gst_app::AppSink::builder()
        .name(format!("pack_{}", packager.name))
        .sync(false)
        .async_(false)
        .enable_last_sample(false)
        .qos(false)
        .max_buffers(1)
        .drop(false)
        .build();
    let packager = Arc::new(Mutex::new(packager));
    let at_eos = packager.clone();
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                if let Some(buffer) = sample.buffer_owned() {
                    let mut p = packager.lock().unwrap_or_else(|p| p.into_inner());
                    p.frame(buffer, sample.caps(), sample.segment());
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .eos(move |_| at_eos.lock().unwrap_or_else(|p| p.into_inner()).end())
            .build(),
    );
    sink.upcast()
}

#[cfg(test)]
pub(super) mod tests;
