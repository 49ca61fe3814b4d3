//! The RTMP front of a push's pipeline: RTMP's audio and video messages are already its
//! elementary streams, one frame each with its timestamps (FLV tag bodies), so they go into the
//! `video` and `audio` tees as they came, on the thread that read them: no FLV tag is written to
//! be demuxed again, and no parser copies or re-reads each frame.
//!
//! GStreamer still reads what describes the media: a sequence header (the AVC configuration or
//! the AudioSpecificConfig) is given, as `codec_data`, to a standalone `h264parse` or `aacparse`,
//! and the caps it answers with (size, frame rate, colorimetry, profile, level; sample rate and
//! channels) are the tee's, as they were when every frame went through those parsers. A frame
//! lasts one frame at those caps' rate (the parsers' durations). Timestamps are made as
//! `flvdemux` made them ([`Clock`]).
//!
//! Why not `flvdemux ! h264parse` and `aacparse`, as before: with the packagers on the reading
//! thread (`media::live::pack`), those three elements and their pads were most of what a
//! passthrough push still cost in GStreamer, for frames they passed on unchanged
//! (docs/live-ingest.md, "Packaged on the reading thread").

use bytes::Bytes;
use gstreamer as gst;
use gstreamer::prelude::*;

use crate::media::ingest::flv::{self, Audio, Clock, Tag, Video};

/// The samples of an AAC frame.
const AAC_FRAME: u64 = 1024;

/// One track of the push: the tee it enters and what it was last told.
struct Track {
    pad: gst::Pad,
    kind: &'static str,
    /// The element that reads this codec's configuration into caps.
    parser: &'static str,
    /// The configuration the current caps were read from, and a frame's duration at them.
    config: Option<Bytes>,
    duration: Option<gst::ClockTime>,
    clock: Clock,
    /// Whether stream-start (and, with the first caps, the segment) was sent.
    started: bool,
    /// After a change of configuration mid-push, its SPS and PPS, put before every keyframe's
    /// own NAL units: the renditions keep their first initialization section, so the new
    /// frames carry what decodes them.
    in_band: Option<Vec<u8>>,
}

impl Track {
    fn new(pipeline: &gst::Pipeline, tee: &'static str, parser: &'static str) -> Result<Track, String> {
        let pad = pipeline
            .by_name(tee)
            .and_then(|e| e.static_pad("sink"))
            .ok_or_else(|| format!("ingest pipeline has no {tee} tee"))?;
        Ok(Track {
            pad,
            kind: tee,
            parser,
            config: None,
            duration: None,
            clock: Clock::default(),
            started: false,
            in_band: None,
        })
    }

    /// A sequence header: caps read from it by the parser, sent when they are new.
    fn configure(&mut self, stream_id: &str, caps: gst::Caps, config: Bytes) -> Result<(), String> {
        if self.config.as_ref() == Some(&config) {
            return Ok(());
        }
        let caps = parsed(self.parser, &caps).ok_or_else(|| {
            format!("the {} sequence header does not parse ({} bytes)", self.kind, config.len())
        })?;
        let s = caps.structure(0).ok_or("caps without a structure")?;
        self.duration = match self.kind {
            "audio" => {
                s.get::<i32>("rate").ok().and_then(|r| u64::try_from(r).ok()).filter(|r| *r > 0).map(|r| {
                    gst::ClockTime::SECOND.mul_div_floor(AAC_FRAME, r).unwrap_or(gst::ClockTime::ZERO)
                })
            }
            _ => s.get::<gst::Fraction>("framerate").ok().and_then(|f| {
                let (n, d) = (u64::try_from(f.numer()).ok()?, u64::try_from(f.denom()).ok()?);
                (n > 0 && d > 0).then(|| gst::ClockTime::SECOND.mul_div_floor(d, n)).flatten()
            }),
        };
        let first = !self.started;
        if self.kind == "video" && self.config.is_some() {
            self.in_band = flv::parameter_sets(&config);
        }
        self.start(stream_id);
        let mut sent = self.pad.send_event(gst::event::Caps::new(&caps));
        if first {
            let segment = gst::FormattedSegment::<gst::ClockTime>::new();
            sent &= self.pad.send_event(gst::event::Segment::new(&segment));
        }
        if !sent {
            return Err(format!("ingest pipeline did not take the {} caps {caps}", self.kind));
        }
        self.config = Some(config);
        Ok(())
    }

    fn start(&mut self, stream_id: &str) {
        if !std::mem::replace(&mut self.started, true) {
            self.pad.send_event(gst::event::StreamStart::new(&format!("{stream_id}/{}", self.kind)));
        }
    }

    /// One frame stamped `timestamp` (ms), `cts` ms later in presentation. Frames before the
    /// first sequence header have nothing to be read with and are left out.
    fn frame(
        &mut self,
        timestamp: u32,
        cts: i32,
        key: bool,
        data: Bytes,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        let dts = self.clock.decode_time(timestamp);
        if self.config.is_none() {
            return Ok(gst::FlowSuccess::Ok);
        }
        let mut buffer = match &self.in_band {
            Some(sets) if key => gst::Buffer::from_mut_slice([sets.as_slice(), &data].concat()),
            _ => gst::Buffer::from_slice(data),
        };
        if let Some(b) = buffer.get_mut() {
            let ms = |t: i64| gst::ClockTime::from_mseconds(u64::try_from(t).unwrap_or(0));
            b.set_dts(ms(dts));
            b.set_pts(ms(dts + i64::from(cts)));
            b.set_duration(self.duration);
            if !key {
                b.set_flags(gst::BufferFlags::DELTA_UNIT);
            }
        }
        self.pad.chain(buffer)
    }

    fn end(&mut self, stream_id: &str) {
        self.start(stream_id);
        self.pad.send_event(gst::event::Eos::new());
    }
}

/// What a push's RTMP media enters its pipeline through.
pub(crate) struct FlvFront {
    stream_id: String,
    video: Track,
    audio: Track,
    /// Frames the pipeline did not take.
    dropped: u64,
}

impl FlvFront {
    /// The front of `pipeline`, whose tees are named `video` and `audio`.
    pub(crate) fn new(pipeline: &gst::Pipeline, stream_id: &str) -> Result<FlvFront, String> {
        Ok(FlvFront {
            stream_id: format!("ingest-{stream_id}"),
            video: Track::new(pipeline, "video", "h264parse")?,
            audio: Track::new(pipeline, "audio", "aacparse")?,
            dropped: 0,
        })
    }

    /// Takes one RTMP audio or video message. Errs with why the push must end: a codec Sluice
    /// does not take, a sequence header that does not parse, or an element that refused the
    /// media for good (`not-negotiated`, `error`, `not-supported`). A frame not taken for
    /// another reason (the pipeline stopping) is counted and logged now and then.
    pub(crate) fn push(&mut self, tag: Tag, timestamp: u32, body: &Bytes) -> Result<(), String> {
        let flow = match tag {
            Tag::Video => match flv::video(body)? {
                Video::Config(config) => {
                    let caps = gst::Caps::builder("video/x-h264")
                        .field("stream-format", "avc")
                        .field("alignment", "au")
                        .field("codec_data", gst::Buffer::from_slice(config.clone()))
                        .build();
                    return self.video.configure(&self.stream_id, caps, config);
                }
                Video::Frame { key, cts, data } => self.video.frame(timestamp, cts, key, data),
                Video::Skip => return Ok(()),
            },
            Tag::Audio => match flv::audio(body)? {
                Audio::Config(config) => {
                    let caps = gst::Caps::builder("audio/mpeg")
                        .field("mpegversion", 4i32)
                        .field("stream-format", "raw")
                        .field("framed", true)
                        .field("codec_data", gst::Buffer::from_slice(config.clone()))
                        .build();
                    return self.audio.configure(&self.stream_id, caps, config);
                }
                Audio::Frame(data) => self.audio.frame(timestamp, 0, true, data),
                Audio::Skip => return Ok(()),
            },
        };
        match flow {
            Ok(_) => Ok(()),
            Err(
                e @ (gst::FlowError::NotNegotiated | gst::FlowError::Error | gst::FlowError::NotSupported),
            ) => {
                let what = if tag == Tag::Video { "video" } else { "audio" };
                Err(format!("ingest pipeline failed: it refused the {what} ({e:?})"))
            }
            Err(e) => {
                self.dropped += 1;
                if self.dropped.is_power_of_two() {
                    tracing::warn!(pipeline = %self.stream_id, dropped = self.dropped, flow = ?e, "ingest pipeline does not take input; dropping it");
                }
                Ok(())
            }
        }
    }

    /// Ends both tracks (EOS into each tee).
    pub(crate) fn end(mut self) {
        self.video.end(&self.stream_id);
        self.audio.end(&self.stream_id);
    }
}

/// The caps `parser` (`h264parse`, `aacparse`) gives for input `caps`, in the same stream
/// format: a standalone element, given the caps event and no buffer, reads their `codec_data`
/// and sets its source caps (a capsfilter behind it holds it to the input's format; without a
/// peer `h264parse` would choose byte-stream).
fn parsed(parser: &str, caps: &gst::Caps) -> Option<gst::Caps> {
    let s = caps.structure(0)?;
    let format = gst::Caps::builder(s.name().as_str())
        .field("stream-format", s.get::<&str>("stream-format").ok()?)
        .build();
    let element = gst::ElementFactory::make(parser).build().ok()?;
    let filter = gst::ElementFactory::make("capsfilter").property("caps", &format).build().ok()?;
    let bin = gst::Bin::new();
    bin.add_many([&element, &filter]).ok()?;
    element.link(&filter).ok()?;
    let (sink, out) = (element.static_pad("sink")?, filter.static_pad("sink")?);
    if bin.set_state(gst::State::Paused).is_err() {
        // An element is never dropped outside NULL.
        let _ = bin.set_state(gst::State::Null);
        return None;
    }
    let taken =
        sink.send_event(gst::event::StreamStart::new("caps")) && sink.send_event(gst::event::Caps::new(caps));
    let out = out.current_caps().filter(|c| taken && c.is_fixed());
    let _ = bin.set_state(gst::State::Null);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An AVC configuration of 320x240 H.264 at 30 fps (x264's, with VUI timing), and AAC-LC
    /// 44.1 kHz stereo's AudioSpecificConfig.
    fn avc_config() -> Bytes {
        crate::media::gst::init().expect("GStreamer");
        let pipeline = gst::parse::launch(
            "videotestsrc num-buffers=1 ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 \
             ! x264enc speed-preset=ultrafast ! h264parse ! video/x-h264,stream-format=avc ! fakesink name=out",
        )
        .expect("builds")
        .downcast::<gst::Pipeline>()
        .expect("a pipeline");
        pipeline.set_state(gst::State::Paused).expect("pauses");
        let _ = pipeline.state(gst::ClockTime::from_seconds(10));
        let caps = pipeline.by_name("out").and_then(|e| e.static_pad("sink")).and_then(|p| p.current_caps());
        pipeline.set_state(gst::State::Null).expect("stops");
        let caps = caps.expect("x264's caps");
        let data =
            caps.structure(0).and_then(|s| s.get::<gst::Buffer>("codec_data").ok()).expect("codec_data");
        let map = data.map_readable().expect("readable");
        Bytes::copy_from_slice(&map)
    }

    #[test]
    fn the_parsers_read_the_sequence_headers() {
        let config = avc_config();
        let caps = gst::Caps::builder("video/x-h264")
            .field("stream-format", "avc")
            .field("alignment", "au")
            .field("codec_data", gst::Buffer::from_slice(config))
            .build();
        let video = parsed("h264parse", &caps).expect("h264parse reads the configuration");
        let s = video.structure(0).expect("a structure");
        assert_eq!((s.get::<i32>("width"), s.get::<i32>("height")), (Ok(320), Ok(240)), "{video}");
        assert_eq!(s.get::<gst::Fraction>("framerate"), Ok(gst::Fraction::new(30, 1)), "{video}");
        assert_eq!(s.get::<&str>("stream-format"), Ok("avc"));
        assert_eq!(s.get::<&str>("alignment"), Ok("au"));
        assert!(s.has_field("profile") && s.has_field("codec_data"), "{video}");

        let caps = gst::Caps::builder("audio/mpeg")
            .field("mpegversion", 4i32)
            .field("stream-format", "raw")
            .field("framed", true)
            .field("codec_data", gst::Buffer::from_slice([0x12u8, 0x10]))
            .build();
        let audio = parsed("aacparse", &caps).expect("aacparse reads the configuration");
        let s = audio.structure(0).expect("a structure");
        assert_eq!((s.get::<i32>("rate"), s.get::<i32>("channels")), (Ok(44_100), Ok(2)), "{audio}");

        let garbage = gst::Caps::builder("video/x-h264")
            .field("stream-format", "avc")
            .field("alignment", "au")
            .field("codec_data", gst::Buffer::from_slice([1u8, 2, 3]))
            .build();
        assert_eq!(parsed("h264parse", &garbage), None, "a configuration that does not parse gives no caps");
    }

    /// FLV of 2 s of 320x240 H.264 with B-frames and AAC, made by GStreamer's `flvmux` (the AAC
    /// by `voaacenc`, not gst-libav: see `pipeline::tests`).
    fn flv() -> Vec<u8> {
        crate::media::gst::init().expect("GStreamer");
        let pipeline = gst::parse::launch(
            "flvmux name=mux streamable=true ! appsink name=out sync=false \
             videotestsrc num-buffers=60 ! video/x-raw,format=I420,width=320,height=240,framerate=30/1 \
             ! x264enc speed-preset=ultrafast bframes=2 key-int-max=30 ! h264parse ! mux. \
             audiotestsrc num-buffers=40 samplesperbuffer=1024 ! voaacenc ! aacparse ! mux.",
        )
        .expect("builds")
        .downcast::<gst::Pipeline>()
        .expect("a pipeline");
        let sink = pipeline.by_name("out").and_downcast::<gstreamer_app::AppSink>().expect("appsink");
        pipeline.set_state(gst::State::Playing).expect("plays");
        let mut flv = Vec::new();
        while let Ok(sample) = sink.pull_sample() {
            flv.extend_from_slice(&sample.buffer().expect("a buffer").map_readable().expect("readable"));
        }
        pipeline.set_state(gst::State::Null).expect("stops");
        flv
    }

    /// (pts, dts, delta unit, bytes) of each buffer an appsink got, and its last caps.
    type Got = (Vec<(Option<gst::ClockTime>, Option<gst::ClockTime>, bool, Vec<u8>)>, Option<gst::Caps>);

    fn drain(sink: &gstreamer_app::AppSink) -> Got {
        let (mut frames, mut caps) = (Vec::new(), None);
        while let Some(sample) = sink.try_pull_sample(gst::ClockTime::from_mseconds(500)) {
            let b = sample.buffer().expect("a buffer");
            let data = b.map_readable().expect("readable").to_vec();
            frames.push((b.pts(), b.dts(), b.flags().contains(gst::BufferFlags::DELTA_UNIT), data));
            caps = sample.caps().map(|c| c.to_owned());
        }
        (frames, caps)
    }

    /// What the front puts into the tees is what `flvdemux ! h264parse` and `aacparse` put there
    /// from the same FLV (the parsers without in-band parameter sets): the same frames, bytes,
    /// timestamps, keyframe flags and sizes.
    #[test]
    fn the_front_gives_the_tees_what_flvdemux_gave() {
        let flv = flv();
        let sinks = "appsink name=v sync=false async=false wait-on-eos=false appsink name=a sync=false async=false wait-on-eos=false";
        let launch = |text: &str| {
            let p =
                gst::parse::launch(text).expect("builds").downcast::<gst::Pipeline>().expect("a pipeline");
            let sink = |n| p.by_name(n).and_downcast::<gstreamer_app::AppSink>().expect("appsink");
            let (v, a) = (sink("v"), sink("a"));
            (p, v, a)
        };

        let (demuxed, v, a) = launch(&format!(
            "appsrc name=src caps=video/x-flv ! flvdemux name=demux \
             demux.video ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! v. \
             demux.audio ! aacparse ! a. {sinks}"
        ));
        let src = demuxed.by_name("src").and_downcast::<gstreamer_app::AppSrc>().expect("appsrc");
        demuxed.set_state(gst::State::Playing).expect("plays");
        src.push_buffer(gst::Buffer::from_slice(flv.clone())).expect("pushed");
        src.end_of_stream().expect("eos");
        let (want_video, want_audio) = (drain(&v), drain(&a));
        demuxed.set_state(gst::State::Null).expect("stops");

        let (fronted, v, a) = launch(&format!("tee name=video ! v. tee name=audio ! a. {sinks}"));
        fronted.set_state(gst::State::Playing).expect("plays");
        let mut front = FlvFront::new(&fronted, "test").expect("a front");
        for (kind, timestamp, body) in flv::flv_tags(&flv) {
            let tag = if kind == Tag::Video as u8 { Tag::Video } else { Tag::Audio };
            if kind == 8 || kind == 9 {
                front.push(tag, timestamp, &Bytes::from(body)).expect("taken");
            }
        }
        front.end();
        let (got_video, got_audio) = (drain(&v), drain(&a));
        fronted.set_state(gst::State::Null).expect("stops");

        assert_eq!(got_video.0.len(), 60, "every frame");
        assert!(got_audio.0.len() >= 39, "the audio: {} frames", got_audio.0.len());
        assert!(got_video.0.iter().any(|f| f.0 != f.1), "B-frames: presentation after decode");
        for (what, got, want) in
            [("video", &got_video.0, &want_video.0), ("audio", &got_audio.0, &want_audio.0)]
        {
            // `flvmux` writes x264's first, negative, decode times as 0, and `h264parse` times
            // frames whose decode time does not move on by their frame rate instead: those
            // first frames (before the first tag stamped later than the first) are compared by
            // their bytes and flags, every later one whole.
            let settled = if what == "video" { 3 } else { 0 };
            let differs = got.iter().zip(want.iter()).enumerate().position(|(i, (g, w))| {
                if i < settled {
                    (g.2, &g.3) != (w.2, &w.3)
                } else {
                    g != w
                }
            });
            let brief = |f: &(Option<gst::ClockTime>, Option<gst::ClockTime>, bool, Vec<u8>)| {
                (f.0, f.1, f.2, f.3.len())
            };
            assert!(
                differs.is_none() && got.len() == want.len(),
                "{what}: {} frames against {}; first difference at {differs:?}: {:?} against {:?}",
                got.len(),
                want.len(),
                differs.and_then(|i| got.get(i)).map(brief),
                differs.and_then(|i| want.get(i)).map(brief),
            );
        }
        let size = |c: &Option<gst::Caps>| {
            let s = c.as_ref().and_then(|c| c.structure(0).map(|s| s.to_owned())).expect("caps");
            (
                s.get::<i32>("width").ok(),
                s.get::<i32>("height").ok(),
                s.get::<gst::Fraction>("framerate").ok(),
            )
        };
        assert_eq!(size(&got_video.1), size(&want_video.1));
        assert_eq!(size(&got_video.1), (Some(320), Some(240), Some(gst::Fraction::new(30, 1))));
    }
}
