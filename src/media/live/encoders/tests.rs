use super::*;
use crate::media::live::channel::{Channel, ChannelConfig};

fn push(generation: u32, offset: u64, started: bool, ended: bool) -> Push {
    let config = ChannelConfig { part: 0.2, segment: 2.0, dvr: None, key: None };
    let target = Target { channel: Channel::new(config), generation, wall: Default::default() };
    Push { target, offset, started, ended }
}

#[test]
fn a_frame_belongs_to_the_latest_push_that_started_at_or_before_it() {
    let mut t = Timeline::default();
    assert!(t.of(0).is_none(), "no push yet");
    t.pushes.push(push(0, 0, true, true));
    t.pushes.push(push(1, 5_100_000_000, true, false));
    // A push that joined but sent nothing yet owns no frame.
    t.pushes.push(push(2, 0, false, false));
    let of = |t: &Timeline, at: u64| t.of(at).map(|p| p.target.generation);
    assert_eq!(of(&t, 0), Some(0));
    assert_eq!(of(&t, 5_000_000_000), Some(0), "the first push's last frames, still in the decoder");
    assert_eq!(of(&t, 5_100_000_000), Some(1), "the second push from its first frame on");
    assert_eq!(of(&t, 60_000_000_000), Some(1));
}

#[test]
fn the_built_in_descriptions_fill_every_placeholder_and_thread_by_size() {
    let d = Descriptions::load(None);
    let rung =
        |height| Rung { name: format!("{height}p"), width: height * 16 / 9, height, video_kbps: 1_400 };
    let has = |d: &str, t: &str| d.split_whitespace().any(|w| w == t);
    let small = d.rung(&rung(720), 120, "bt709");
    assert!(!small.contains('{'), "{small}");
    assert!(has(&small, "threads=1") && small.contains("width=1280,height=720"), "{small}");
    assert!(has(&small, "bitrate=1400") && has(&small, "key-int-max=120"), "{small}");
    let large = d.rung(&rung(2160), 120, "bt709");
    assert!(has(&large, "threads=0"), "x264 threads its own way above 1080p: {large}");
    // It parses, as the encoders put it between elements: every element and property named is
    // there.
    crate::media::gst::init().expect("GStreamer");
    crate::media::gst::register_builtin().expect("built-in elements");
    gstreamer::parse::bin_from_description(&format!("{} ! h264parse", small.trim()), true)
        .expect("the rung description parses");
    let decoder = d.decoder(720);
    assert!(has(&decoder, "max-threads=1") && !decoder.contains('{'), "{decoder}");
    assert!(has(&d.decoder(2160), "max-threads=0"), "{}", d.decoder(2160));
    gstreamer::parse::bin_from_description(&decoder, true).expect("the decoder description parses");
}
