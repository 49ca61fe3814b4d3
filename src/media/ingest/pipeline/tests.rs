//! Tests of the ingest pipeline: it builds, and what it tells the RTMP server about a push.

use super::*;
use crate::media::ingest::flv::flv_tags;

#[tokio::test]
async fn the_pipeline_description_builds() {
    let (p, _rx) = IngestPipeline::start("test", Outputs::default())
        .await
        .expect("GStreamer plugins of scripts/deps.sh are installed");
    drop(p.stop(PushEnd::Reconnectable));
}

#[tokio::test]
async fn the_ts_pipeline_description_builds() {
    let (p, _rx) = IngestPipeline::start_ts("test", Outputs::default())
        .await
        .expect("GStreamer plugins of scripts/deps.sh are installed");
    let mut feeder = p.feeder().expect("the TS front has a source");
    assert!(feeder.feed(&[0x47; 188]), "a TS packet is taken");
    drop(p.stop(PushEnd::Reconnectable));
}

#[tokio::test]
async fn a_pipeline_dropped_without_stop_is_set_to_null() {
    let (p, _rx) =
        IngestPipeline::start("test", Outputs::default()).await.expect("GStreamer plugins are installed");
    let pipeline = p.pipeline.0.clone();
    assert_ne!(pipeline.current_state(), gst::State::Null, "started");
    drop(p);
    assert_eq!(pipeline.current_state(), gst::State::Null, "no PLAYING pipeline is left to dispose");
}

/// FLV tags (type, timestamp, body) of one second of 320x240 H.264 (a keyframe first), made by
/// GStreamer; x264 and flvmux, not gst-libav (it brings a second libsrt into the test process,
/// and the two crash at its exit).
fn h264_tags() -> Vec<(Tag, u32, Vec<u8>)> {
    init().expect("GStreamer");
    let pipeline = gst::parse::launch(
        "videotestsrc num-buffers=30 ! video/x-raw,width=320,height=240,framerate=30/1 \
         ! x264enc speed-preset=ultrafast key-int-max=30 ! h264parse ! flvmux streamable=true \
         ! appsink name=out sync=false",
    )
    .expect("the encoding pipeline builds")
    .downcast::<gst::Pipeline>()
    .expect("a pipeline");
    let sink = pipeline.by_name("out").and_downcast::<gst_app::AppSink>().expect("appsink");
    pipeline.set_state(gst::State::Playing).expect("plays");
    let mut flv = Vec::new();
    while let Ok(sample) = sink.pull_sample() {
        let buffer = sample.buffer().expect("a buffer");
        flv.extend_from_slice(&buffer.map_readable().expect("readable"));
    }
    pipeline.set_state(gst::State::Null).expect("stops");
    let tags: Vec<_> = flv_tags(&flv)
        .into_iter()
        .filter(|t| t.0 == Tag::Video as u8)
        .map(|(_, timestamp, body)| (Tag::Video, timestamp, body))
        .collect();
    assert!(tags.len() > 30, "a sequence header and 30 frames: {} tags", tags.len());
    tags
}

/// Whether the push of [`h264_tags`] to a stream of `qualities` (offered over RTSP if asked)
/// is passthrough-only before its first tag and after the last. (A WebRTC tap is not tried: its
/// audio branch decodes with gst-libav.)
async fn passthrough_only(qualities: &[&str], rtsp: bool) -> (bool, bool) {
    use crate::domain::stream::Quality;
    use crate::media::live::channel::{ChannelConfig, Channels};
    use crate::media::live::pipeline::{Descriptions, LiveOutput};
    use crate::media::live::taps::Taps;

    let channels = Channels::default();
    let config = ChannelConfig { part: 1.0 / 3.0, segment: 2.0, dvr: None, key: None };
    let (channel, generation) = channels.start_push("st", config);
    let live = LiveOutput {
        channel,
        generation,
        qualities: qualities.iter().map(|q| Quality::parse(q).expect("a quality")).collect(),
        // The rung's decoder and encoder pass the H.264 on (no gst-libav, above): what is
        // tested is that a rung is planned, not what it makes.
        descriptions: Descriptions { decoder: "identity".into(), rung: "identity".into() },
        transcodes: Default::default(),
        encoders: Default::default(),
    };
    let taps = Arc::new(Taps::default());
    let tap = rtsp.then(|| taps.open("st", false, true));
    let outputs = Outputs { live: Some(live), tap, ..Default::default() };
    let (mut p, _rx) = IngestPipeline::start("st", outputs).await.expect("GStreamer plugins are installed");
    let before = p.passthrough_only();
    for (tag, timestamp, body) in h264_tags() {
        p.push(tag, timestamp, &bytes::Bytes::from(body)).expect("the pipeline takes the push");
    }
    let after = p.passthrough_only();
    drop(p.stop(PushEnd::Reconnectable));
    (before, after)
}

#[tokio::test]
async fn only_a_push_that_encodes_nothing_is_passthrough_only() {
    assert_eq!(
        passthrough_only(&["1080p"], false).await,
        (true, true),
        "a quality above the 240p source is left out: nothing is encoded"
    );
    assert_eq!(
        passthrough_only(&["240p"], false).await,
        (true, false),
        "a 240p rung is planned at the first video caps"
    );
    assert_eq!(passthrough_only(&["1080p"], true).await, (false, false), "RTSP viewers watch close to live");
}
