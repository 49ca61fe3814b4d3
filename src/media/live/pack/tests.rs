//! The packager against GStreamer's own reader: what it writes into a channel, read back
//! through `qtdemux`, is the frames it was given, each at its time, cut where its splitter said.

use std::time::Duration;

use gstreamer_app as gst_app;

use super::*;
use crate::media::live::channel::{Channel, ChannelConfig, Kind, Timing};
use crate::media::live::ladder;

/// Frames encoded by GStreamer (`desc` ends in an appsink named `out`), with their caps (the
/// rungs' cut tests use them too).
pub(in crate::media::live) fn encoded(desc: &str) -> (gst::Caps, Vec<gst::Buffer>) {
    gst::init().expect("GStreamer");
    let pipeline = gst::parse::launch(desc).expect("builds").downcast::<gst::Pipeline>().expect("a pipeline");
    let sink = pipeline.by_name("out").and_downcast::<gst_app::AppSink>().expect("appsink");
    pipeline.set_state(gst::State::Playing).expect("plays");
    let (mut caps, mut frames) = (None, Vec::new());
    while let Ok(sample) = sink.pull_sample() {
        caps = caps.or_else(|| sample.caps().map(|c| c.to_owned()));
        frames.extend(sample.buffer_owned());
    }
    pipeline.set_state(gst::State::Null).expect("stops");
    (caps.expect("caps"), frames)
}

/// `n` AAC frames at 48 kHz with millisecond timestamps, as FLV brings them (21, 21, 22 ms…);
/// a packager does not decode, so their bytes are made up.
fn aac_frames(n: u64) -> (gst::Caps, Vec<gst::Buffer>) {
    gst::init().expect("GStreamer");
    let caps = gst::Caps::builder("audio/mpeg")
        .field("mpegversion", 4i32)
        .field("stream-format", "raw")
        .field("rate", 48_000i32)
        .field("channels", 2i32)
        .field("codec_data", gst::Buffer::from_slice([0x11u8, 0x90]))
        .build();
    let frames = (0..n)
        .map(|i| {
            let mut buffer = gst::Buffer::from_slice(vec![(i % 251) as u8; 200 + (i % 7) as usize * 30]);
            let b = buffer.get_mut().expect("writable");
            b.set_pts(gst::ClockTime::from_mseconds(i * 1024 * 1000 / 48_000));
            b.set_duration(gst::ClockTime::from_mseconds(21));
            buffer
        })
        .collect();
    (caps, frames)
}

/// What `qtdemux` reads from `file`: each sample's presentation and decode times (ns), size and
/// whether it is a sync sample.
fn read_back(file: &std::path::Path) -> Vec<(u64, u64, usize, bool)> {
    let desc = format!("filesrc location={} ! qtdemux ! appsink name=out sync=false", file.display());
    let (_, frames) = encoded(&desc);
    frames
        .iter()
        .map(|b| {
            let pts = b.pts().expect("pts").nseconds();
            let dts = b.dts().map_or(pts, |d| d.nseconds());
            (pts, dts, b.size(), !b.flags().contains(gst::BufferFlags::DELTA_UNIT))
        })
        .collect()
}

/// Feeds `frames` to a packager of rendition `name` and returns the channel's initialization
/// section and parts, in order.
async fn package(
    name: &str,
    caps: &gst::Caps,
    frames: &[gst::Buffer],
    cutting: Cutting,
    declared: Declared,
) -> (Bytes, Vec<Bytes>) {
    let channel = Channel::new(ChannelConfig { part: 0.2, segment: 2.0, dvr: None, key: None });
    let kind = Kind::Video { width: 320, height: 240, kbps: None, frame_rate: Some(30.0) };
    if name == ladder::SOURCE {
        channel.add_rendition(0, name, kind, Timing { target_duration: 6, part_target: 0.27 });
    }
    let to = Target { channel: channel.clone(), generation: 0, wall: Default::default() };
    let mut p = Packager::new(name, to, declared, cutting);
    let segment = gst::FormattedSegment::<gst::ClockTime>::new().upcast();
    for f in frames {
        p.frame(f.clone(), Some(caps.as_ref()), Some(&segment));
    }
    p.end();
    let t = Duration::from_millis(10);
    let init = channel.file(name, "init0.mp4", t).await.expect("an initialization section");
    let mut parts = Vec::new();
    while let Ok(part) = channel.file(name, &format!("p{}.m4s", parts.len()), t).await {
        parts.push(part);
    }
    (init, parts)
}

fn write_file(init: &Bytes, parts: &[Bytes]) -> tempfile::NamedTempFile {
    use std::io::Write as _;
    let mut f = tempfile::NamedTempFile::new().expect("a temporary file");
    f.write_all(init).expect("written");
    for p in parts {
        f.write_all(p).expect("written");
    }
    f
}

/// The publisher's H.264 with B-frames (x264's and OBS's default): every frame read back at its
/// own presentation and decode times, with its bytes and its keyframe flag; the parts hold
/// exactly the frames between the splitter's cuts, and the segments start at keyframes.
#[tokio::test]
async fn source_with_b_frames_reads_back_frame_for_frame() {
    let (caps, frames) = encoded(
        "videotestsrc num-buffers=150 ! video/x-raw,width=320,height=240,framerate=30/1 ! x264enc bframes=2 key-int-max=60 speed-preset=ultrafast ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! appsink name=out sync=false",
    );
    assert!(frames.iter().any(|f| f.dts() < f.pts()), "the clip has B-frames");
    let plan = Plan::video(2.0, 0.2, Some(30.0));
    let mut splitter = Splitter::at_keyframes(2.0, plan);
    // The first part opens at the first frame, a keyframe; the splitter cuts after it.
    let mut cuts = vec![0];
    for (i, f) in frames.iter().enumerate() {
        let (pts, dts) = (f.pts().expect("pts").nseconds(), f.dts().expect("dts").nseconds());
        if splitter.next(pts, dts, !f.flags().contains(gst::BufferFlags::DELTA_UNIT)).is_some() {
            cuts.push(i);
        }
    }
    let cutting = Cutting::Source(Splitter::at_keyframes(2.0, plan));
    let (init, parts) = package(ladder::SOURCE, &caps, &frames, cutting, Declared::Video).await;
    assert_eq!(crate::media::cmaf::timescale(&init), Some(VIDEO_TIMESCALE));
    let sizes: Vec<u64> = parts.iter().map(|p| crate::media::cmaf::samples(p).expect("a chunk")).collect();
    let expected: Vec<u64> =
        cuts.iter().zip(cuts.iter().skip(1).chain([&frames.len()])).map(|(a, b)| (b - a) as u64).collect();
    assert_eq!(sizes, expected, "a part a cut");
    assert!(parts.len() >= 20, "{} parts", parts.len());
    let file = write_file(&init, &parts);
    let back = read_back(file.path());
    assert_eq!(back.len(), frames.len(), "every frame is read back");
    // Presentation times are the frames' own; decode times keep their steps (the chunk's
    // decode times start at its earliest presentation time, as `cmafmux` writes them).
    let pts0 = frames.iter().map(|f| f.pts().expect("pts").nseconds()).min().expect("frames");
    let back_pts0 = back.iter().map(|b| b.0).min().expect("frames");
    let (dts0, back_dts0) = (frames[0].dts().expect("dts").nseconds(), back[0].1);
    for (i, (f, b)) in frames.iter().zip(&back).enumerate() {
        let pts = f.pts().expect("pts").nseconds() - pts0;
        let dts = f.dts().expect("dts").nseconds() - dts0;
        let near = |a: u64, b: u64| a.abs_diff(b) <= 20_000;
        assert!(near(b.0 - back_pts0, pts), "frame {i}: presented at {} for {pts}", b.0 - back_pts0);
        assert!(near(b.1 - back_dts0, dts), "frame {i}: decoded at {} for {dts}", b.1 - back_dts0);
        assert_eq!((b.2, b.3), (f.size(), !f.flags().contains(gst::BufferFlags::DELTA_UNIT)), "frame {i}");
    }
    for (p, data) in parts.iter().enumerate() {
        let first = cuts[p];
        let key = !frames[first].flags().contains(gst::BufferFlags::DELTA_UNIT);
        assert_eq!(crate::media::cmaf::starts_with_sync_sample(data), Some(key), "part {p}");
    }
}

/// AAC: every frame read back, with its bytes, its timeline continuous from part to part
/// (no gap or overlap of a tick), and each part about 200 ms.
#[tokio::test]
async fn aac_reads_back_frame_for_frame_on_a_continuous_timeline() {
    let (caps, frames) = aac_frames(300);
    let video = Arc::new(AtomicU64::new(0));
    let cutting = Cutting::Audio { segment: 2.0, part: 0.2, video };
    let declared = Declared::Audio { target_duration: 2, segment: 2.0, part: 0.2 };
    let (init, parts) = package(ladder::AUDIO, &caps, &frames, cutting, declared).await;
    assert_eq!(crate::media::cmaf::timescale(&init), Some(48_000));
    let mut next = 0;
    for (i, p) in parts.iter().enumerate() {
        let at = crate::media::cmaf::decode_time(p).expect("a tfdt");
        assert!(at.abs_diff(next) <= 1, "part {i} starts at {at}, the last ended at {next}");
        let ticks = crate::media::cmaf::duration_ticks(p).expect("durations");
        let last = i + 1 == parts.len();
        let target = Plan::aac(2.0, 0.2, 48_000).part_target();
        assert!(last || (8_000..=(target * 48_000.0) as u64).contains(&ticks), "part {i}: {ticks} ticks");
        next = at + ticks;
        assert_eq!(crate::media::cmaf::starts_with_sync_sample(p), Some(true));
    }
    let file = write_file(&init, &parts);
    let back = read_back(file.path());
    assert_eq!(back.len(), frames.len(), "every frame is read back");
    for (f, b) in frames.iter().zip(&back) {
        assert_eq!(b.2, f.size());
        assert!(
            b.0.abs_diff(f.pts().expect("pts").nseconds()) <= 25_000,
            "{} for {}",
            b.0,
            f.pts().expect("pts")
        );
    }
}

/// Frames before the first cut (a publisher's stream that starts between keyframes) are not
/// packaged; caps that cannot be packaged (Annex B H.264) give no initialization section and
/// no part.
#[tokio::test]
async fn frames_before_a_keyframe_and_caps_it_cannot_package_are_dropped() {
    let (caps, frames) = encoded(
        "videotestsrc num-buffers=40 ! video/x-raw,width=320,height=240,framerate=30/1 ! x264enc bframes=0 key-int-max=30 speed-preset=ultrafast ! h264parse ! video/x-h264,stream-format=avc,alignment=au ! appsink name=out sync=false",
    );
    let plan = Plan::video(2.0, 0.2, Some(30.0));
    let cutting = Cutting::Source(Splitter::at_keyframes(2.0, plan));
    let (_, parts) = package(ladder::SOURCE, &caps, &frames[1..], cutting, Declared::Video).await;
    let packaged: u64 = parts.iter().map(|p| crate::media::cmaf::samples(p).expect("a chunk")).sum();
    assert_eq!(packaged, (frames.len() - 30) as u64, "from the next keyframe on");

    let annex_b = gst::Caps::builder("video/x-h264").field("stream-format", "byte-stream").build();
    let channel = Channel::new(ChannelConfig { part: 0.2, segment: 2.0, dvr: None, key: None });
    let to = Target { channel: channel.clone(), generation: 0, wall: Default::default() };
    let mut p = Packager::new(
        ladder::SOURCE,
        to,
        Declared::Video,
        Cutting::Source(Splitter::at_keyframes(2.0, plan)),
    );
    let segment = gst::FormattedSegment::<gst::ClockTime>::new().upcast();
    for f in &frames {
        p.frame(f.clone(), Some(annex_b.as_ref()), Some(&segment));
    }
    p.end();
    assert!(channel.file(ladder::SOURCE, "p0.m4s", Duration::from_millis(10)).await.is_err());
}
