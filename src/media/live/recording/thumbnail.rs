//! A recording's thumbnail: the first picture of a recorded video segment (fMP4: its
//! initialization section and one segment, which starts with a keyframe), as JPEG.

use std::time::Duration;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

const DESCRIPTION: &str = "appsrc name=src format=bytes ! qtdemux ! h264parse ! avdec_h264 \
     ! videoconvert ! jpegenc quality=85 ! appsink name=out sync=false max-buffers=1";
/// Decoding one picture takes milliseconds; this bounds a stuck pipeline.
const DEADLINE: Duration = Duration::from_secs(10);

/// The JPEG of the first picture of `init` + `segment`. Blocking.
pub fn first_picture(init: &[u8], segment: &[u8]) -> Result<Vec<u8>, String> {
    crate::media::gst::init()?;
    let pipeline = gst::parse::launch(DESCRIPTION)
        .map_err(|e| format!("thumbnail pipeline: {e}"))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| "thumbnail pipeline is not a pipeline".to_string())?;
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    let src =
        pipeline.0.by_name("src").and_then(|e| e.downcast::<gst_app::AppSrc>().ok()).ok_or("no appsrc")?;
    let out =
        pipeline.0.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).ok_or("no appsink")?;
    pipeline.0.set_state(gst::State::Playing).map_err(|e| format!("thumbnail pipeline: {e}"))?;
    let mut bytes = Vec::with_capacity(init.len() + segment.len());
    bytes.extend_from_slice(init);
    bytes.extend_from_slice(segment);
    src.push_buffer(gst::Buffer::from_slice(bytes)).map_err(|e| format!("thumbnail: {e}"))?;
    let _ = src.end_of_stream();
    let sample = out
        .try_pull_sample(gst::ClockTime::from_nseconds(DEADLINE.as_nanos() as u64))
        .ok_or("no picture decoded from the recording's first segment")?;
    let buffer = sample.buffer().ok_or("an empty picture")?;
    let map = buffer.map_readable().map_err(|e| e.to_string())?;
    Ok(map.as_slice().to_vec())
}
