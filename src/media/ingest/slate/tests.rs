use super::*;

fn format(width: i32, height: i32, rate: i32) -> Format {
    Format {
        video: Some(
            gst::Caps::builder("video/x-h264")
                .field("width", width)
                .field("height", height)
                .field("framerate", gst::Fraction::new(30, 1))
                .build(),
        ),
        audio: Some(gst::Caps::builder("audio/mpeg").field("rate", rate).field("channels", 2i32).build()),
    }
}

#[test]
fn a_slate_is_a_second_of_h264_from_a_keyframe_and_one_frame_of_silence() {
    crate::media::gst::init().expect("GStreamer");
    let slate = Slate::of(&format(320, 240, 44_100), None).expect("renders");
    let video = slate.video.as_ref().expect("video");
    let s = video.caps.structure(0).expect("caps");
    assert_eq!(s.name().as_str(), "video/x-h264");
    assert_eq!((s.get::<i32>("width").ok(), s.get::<i32>("height").ok()), (Some(320), Some(240)));
    assert_eq!(s.get::<&str>("stream-format").ok(), Some("avc"));
    assert!(s.has_field("codec_data"), "{s}");
    assert_eq!(video.frames.len(), 30, "one second at 30 fps");
    assert!(!video.frames[0].flags().contains(gst::BufferFlags::DELTA_UNIT), "it starts with a keyframe");
    assert!(video.frames[1..].iter().all(|f| f.flags().contains(gst::BufferFlags::DELTA_UNIT)));
    assert_eq!(video.frame, gst::ClockTime::from_nseconds(33_333_333));
    let audio = slate.audio.as_ref().expect("audio");
    let a = audio.caps.structure(0).expect("caps");
    assert_eq!((a.get::<i32>("rate").ok(), a.get::<i32>("channels").ok()), (Some(44_100), Some(2)));
    assert!(a.has_field("codec_data"), "{a}");
    assert_eq!(audio.frames.len(), 1);
    // The same format again is the slate kept.
    assert!(Arc::ptr_eq(&slate, &Slate::of(&format(320, 240, 44_100), None).expect("kept")));
    // Nothing to make it like, or sizes out of reason: refused.
    assert!(Slate::of(&Format::default(), None).is_err());
    assert!(Slate::of(&Format { video: format(100_000, 240, 8).video, audio: None }, None).is_err());
}

#[test]
fn the_feed_catches_up_to_now_then_keeps_to_the_clock() {
    crate::media::gst::init().expect("GStreamer");
    let slate = Slate::of(&format(160, 120, 48_000), None).expect("renders");
    let pipeline = gst::parse::launch(
        "tee name=video ! appsink name=v sync=false async=false wait-on-eos=false \
         tee name=audio ! appsink name=a sync=false async=false wait-on-eos=false",
    )
    .expect("builds")
    .downcast::<gst::Pipeline>()
    .expect("a pipeline");
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    pipeline.0.set_state(gst::State::Playing).expect("plays");
    let mut feed = SlateFeed::new(&pipeline.0, "st", slate).expect("tees");
    let started = Instant::now();
    // The push's video ended half a second ago, its audio 200 ms later: each track starts at
    // its own end.
    let base = Utc::now() - chrono::Duration::milliseconds(500);
    let ends = MediaEnds { video: Some(base), audio: Some(base + chrono::Duration::milliseconds(200)) };
    feed.run(base, ends).expect("runs");
    let sink = |name: &str| {
        pipeline.0.by_name(name).and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("sink")
    };
    let (v, a) = (sink("v"), sink("a"));
    let mut times = Vec::new();
    // Half a second behind: the first 15 frames come at once.
    while times.len() < 15 {
        let sample = v.try_pull_sample(gst::ClockTime::from_seconds(2)).expect("a frame");
        times.push(sample.buffer().and_then(|b| b.pts()).expect("pts"));
    }
    assert!(started.elapsed() < Duration::from_millis(300), "caught up in {:?}", started.elapsed());
    // Then one frame a frame's time.
    while times.len() < 45 {
        let sample = v.try_pull_sample(gst::ClockTime::from_seconds(2)).expect("a frame");
        times.push(sample.buffer().and_then(|b| b.pts()).expect("pts"));
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "45 frames from 0.5 s behind take a second: {took:?}");
    for (i, t) in times.iter().enumerate() {
        assert_eq!(*t, gst::ClockTime::from_nseconds(33_333_333) * i as u64, "frame {i}");
    }
    let audio = a.try_pull_sample(gst::ClockTime::from_seconds(2)).expect("audio");
    assert_eq!(audio.buffer().and_then(|b| b.pts()), Some(gst::ClockTime::from_mseconds(200)));
    feed.end();
    // The end reaches the tees: what was sent is taken, then EOS.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !v.is_eos() && Instant::now() < deadline {
        let _ = v.try_pull_sample(gst::ClockTime::from_mseconds(100));
    }
    assert!(v.is_eos(), "EOS after the end");
}

#[test]
fn the_slate_takes_the_pushs_aac_configuration_when_the_format_is_the_same() {
    crate::media::gst::init().expect("GStreamer");
    // ffmpeg's AAC-LC, 48 kHz stereo: five bytes (with the SBR sync extension), not voaacenc's two.
    let config = gst::Buffer::from_slice([0x11u8, 0x90, 0x56, 0xe5, 0x00]);
    let aac = |rate: i32, stream_format: &str| {
        gst::Caps::builder("audio/mpeg")
            .field("mpegversion", 4i32)
            .field("stream-format", stream_format)
            .field("rate", rate)
            .field("channels", 2i32)
            .field("codec_data", config.clone())
            .build()
    };
    let push = Format { video: None, audio: Some(aac(48_000, "raw")) };
    let slate = Slate::of(&push, None).expect("renders");
    assert_eq!(slate.audio.as_ref().map(|a| &a.caps), push.audio.as_ref(), "the push's configuration");
    // Not the same format (ADTS): the slate keeps its own.
    let adts = Format { video: None, audio: Some(aac(48_000, "adts")) };
    let own = Slate::of(&adts, None).expect("renders");
    let caps = &own.audio.as_ref().expect("audio").caps;
    assert_ne!(Some(caps), adts.audio.as_ref());
    assert_ne!(
        caps.structure(0).and_then(|s| s.get::<gst::Buffer>("codec_data").ok()).map(|b| b.size()),
        Some(5)
    );
}

/// The mean of each of a decoded I420 frame's planes' middles: (Y, U, V).
fn middle_yuv(frame: &gst::BufferRef, width: usize, height: usize) -> (u8, u8, u8) {
    let map = frame.map_readable().expect("readable");
    let (y, chroma) = (width * height, (width / 2) * (height / 2));
    let at = |plane: usize, w: usize, h: usize| map[plane + (h / 2) * w + w / 2];
    (at(0, width, height), at(y, width / 2, height / 2), at(y + chroma, width / 2, height / 2))
}

#[test]
fn a_streams_picture_is_its_slate_fitted_with_borders() {
    crate::media::gst::init().expect("GStreamer");
    // A red 4:3 picture (PNG) for a 16:9 stream: red in the middle, black borders at the sides.
    let png = {
        let pipeline = gst::parse::launch(
            "videotestsrc pattern=red num-buffers=1 ! video/x-raw,width=160,height=120 ! videoconvert ! pngenc ! appsink name=out sync=false",
        )
        .expect("builds")
        .downcast::<gst::Pipeline>()
        .expect("a pipeline");
        let pipeline = crate::media::gst::StopOnDrop(pipeline);
        let sink =
            pipeline.0.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("sink");
        pipeline.0.set_state(gst::State::Playing).expect("plays");
        let sample = sink.pull_sample().expect("a picture");
        let bytes = sample.buffer().expect("bytes").map_readable().expect("readable").to_vec();
        bytes
    };
    let picture = picture::check(picture::Kind::Png, png).expect("a good PNG");
    let slate = Slate::of(&format(320, 180, 48_000), Some(&picture)).expect("renders");
    let card = Slate::of(&format(320, 180, 48_000), None).expect("renders");
    assert!(!Arc::ptr_eq(&slate, &card), "the picture's slate is not the card's");
    let video = slate.video.as_ref().expect("video");
    // Decode its keyframe and look at the middle and the left edge.
    let pipeline = gst::parse::launch(
        "appsrc name=in ! h264parse ! avdec_h264 ! videoconvert ! video/x-raw,format=I420 ! appsink name=out sync=false",
    )
    .expect("builds")
    .downcast::<gst::Pipeline>()
    .expect("a pipeline");
    let pipeline = crate::media::gst::StopOnDrop(pipeline);
    let src = pipeline.0.by_name("in").and_then(|e| e.downcast::<gst_app::AppSrc>().ok()).expect("src");
    src.set_caps(Some(&video.caps));
    let sink = pipeline.0.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("sink");
    pipeline.0.set_state(gst::State::Playing).expect("plays");
    let mut key = video.frames[0].copy();
    key.get_mut().expect("writable").set_pts(gst::ClockTime::ZERO);
    src.push_buffer(key).expect("taken");
    src.end_of_stream().expect("eos");
    let frame = sink.try_pull_sample(gst::ClockTime::from_seconds(5)).expect("decoded");
    let frame = frame.buffer().expect("a frame");
    let (y, u, v) = middle_yuv(frame, 320, 180);
    // BT.601 red: Y ≈ 81, U ≈ 90, V ≈ 240.
    assert!(v > 200 && u < 120 && (60..110).contains(&y), "the middle is red: Y {y} U {u} V {v}");
    let map = frame.map_readable().expect("readable");
    assert!(map[90 * 320 + 4] < 30, "the left border is black: Y {}", map[90 * 320 + 4]);
}
