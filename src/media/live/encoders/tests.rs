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
