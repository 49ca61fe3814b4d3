use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;

/// The first frame `scaler` makes of a 1280x720 SMPTE-bars frame in `format`, scaled to
/// 854x480: its caps and its bytes.
fn scaled(scaler: &str, format: &str) -> Result<(gst::Caps, Vec<u8>), String> {
    super::super::init()?;
    super::super::register_builtin()?;
    let pipeline = gst::parse::launch(&format!(
        "videotestsrc num-buffers=1 pattern=smpte75 ! video/x-raw,format={format},width=1280,height=720,colorimetry=bt709 \
         ! {scaler} ! video/x-raw,width=854,height=480,colorimetry=bt709 ! appsink name=out sync=false"
    ))
    .map_err(|e| e.to_string())?
    .downcast::<gst::Pipeline>()
    .map_err(|_| "not a pipeline")?;
    let _stop = super::super::StopOnDrop(pipeline.clone());
    let sink =
        pipeline.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).ok_or("no appsink")?;
    pipeline.set_state(gst::State::Playing).map_err(|e| e.to_string())?;
    let sample = sink.try_pull_sample(gst::ClockTime::from_seconds(10)).ok_or("no frame")?;
    let caps = sample.caps().ok_or("no caps")?.to_owned();
    let map = sample.buffer().ok_or("no buffer")?.map_readable().map_err(|e| e.to_string())?;
    Ok((caps, map.as_slice().to_vec()))
}

/// Peak signal-to-noise ratio of `a` against `b` (same length), dB.
fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse =
        a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum::<f64>() / a.len() as f64;
    10.0 * (255.0 * 255.0 / mse.max(1e-9)).log10()
}

#[test]
fn it_scales_every_format_it_takes_as_videoscale_does() {
    // The same picture as GStreamer's own scaler (both keeping BT.709): a plane put in the
    // wrong place (YV12's swapped chroma, NV12's interleaved one) or at the wrong size would
    // be far off. (Where the bars meet, the two filters differ: about 30 dB in chroma.)
    for format in ["I420", "YV12", "Y42B", "Y444", "NV12"] {
        let (caps, ours) = scaled("sluicescale", format).expect("sluicescale scales");
        let (_, theirs) = scaled("videoscale method=catrom", format).expect("videoscale scales");
        let s = caps.structure(0).expect("caps");
        assert_eq!(s.get::<i32>("width"), Ok(854), "{format}: {caps}");
        assert_eq!(s.get::<i32>("height"), Ok(480), "{format}: {caps}");
        assert_eq!(s.get::<&str>("format"), Ok(format), "{format}: {caps}");
        assert_eq!(ours.len(), theirs.len(), "{format}");
        let p = psnr(&ours, &theirs);
        assert!(p > 30.0, "{format}: {p:.1} dB from videoscale's");
    }
}

#[test]
fn equal_sizes_pass_through_and_other_formats_are_refused() {
    super::super::init().expect("GStreamer");
    super::super::register_builtin().expect("built-in elements");
    let run = |description: &str| -> Result<usize, String> {
        let pipeline = gst::parse::launch(description)
            .map_err(|e| e.to_string())?
            .downcast::<gst::Pipeline>()
            .map_err(|_| "not a pipeline")?;
        let _stop = super::super::StopOnDrop(pipeline.clone());
        pipeline.set_state(gst::State::Playing).map_err(|e| e.to_string())?;
        let bus = pipeline.bus().ok_or("no bus")?;
        let mut frames = 0;
        let sink =
            pipeline.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).ok_or("no sink")?;
        while let Some(_s) = sink.try_pull_sample(gst::ClockTime::from_seconds(5)) {
            frames += 1;
        }
        if let Some(m) = bus.pop_filtered(&[gst::MessageType::Error]) {
            if let gst::MessageView::Error(e) = m.view() {
                return Err(e.error().to_string());
            }
        }
        Ok(frames)
    };
    let same = "videotestsrc num-buffers=3 ! video/x-raw,format=I420,width=320,height=240 ! sluicescale \
                ! video/x-raw,width=320,height=240 ! appsink name=out sync=false";
    assert_eq!(run(same), Ok(3));
    let rgb = "videotestsrc num-buffers=3 ! video/x-raw,format=RGBx,width=320,height=240 ! sluicescale \
               ! video/x-raw,width=160,height=120 ! appsink name=out sync=false";
    assert!(run(rgb).is_err(), "RGB is not linked");
}
