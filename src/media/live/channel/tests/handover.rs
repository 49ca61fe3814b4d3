//! The slate's hand-over on parts with real decode times and dates.

use super::*;

/// An initialization section with timescale `scale` (what `cmaf::timescale` reads).
fn timed_init(scale: u32) -> Chunk {
    use crate::media::cmaf::tests::boxed;
    let mdhd = boxed(b"mdhd", &[&[0u8; 12][..], &scale.to_be_bytes(), &[0; 8]].concat());
    let trak = boxed(b"trak", &boxed(b"mdia", &mdhd));
    Chunk::Init(Bytes::from([boxed(b"ftyp", b"cmf2"), boxed(b"moov", &trak)].concat()))
}

/// A part of `samples` samples of `each` ticks (at timescale `scale`) from decode time `at`,
/// dated `pdt`, starting a segment if `starts`.
fn timed_part(starts: bool, at: u32, samples: u32, each: u32, scale: u32, pdt: DateTime<Utc>) -> Chunk {
    use crate::media::cmaf::tests::boxed;
    let mut trun = [&[0, 0, 0x01, 0x00][..], &samples.to_be_bytes()].concat();
    for _ in 0..samples {
        trun.extend_from_slice(&each.to_be_bytes());
    }
    let tfdt = [&[0, 0, 0, 0][..], &at.to_be_bytes()].concat();
    let traf =
        [boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]), boxed(b"tfdt", &tfdt), boxed(b"trun", &trun)].concat();
    Chunk::Part {
        starts_segment: starts,
        independent: true,
        duration: f64::from(samples * each) / f64::from(scale),
        pdt: Some(pdt),
        data: Bytes::from([boxed(b"moof", &boxed(b"traf", &traf)), boxed(b"mdat", &[0])].concat()),
    }
}

#[tokio::test]
async fn a_hand_over_ends_the_audio_past_the_video_and_closes_each_segment_at_its_last_part() {
    let d0 = DateTime::parse_from_rfc3339("2026-12-04T18:00:00Z").unwrap().with_timezone(&Utc);
    let at = |s: f64| d0 + chrono::Duration::microseconds((s * 1e6) as i64);
    let channels = Channels::default();
    let (c, g) = channels.start_push("st", config());
    let audio = ladder::AUDIO;
    c.add_rendition(g, "360p", video(), TIMING);
    c.add_rendition(g, audio, Kind::Audio { channels: 2 }, TIMING);
    c.feed(g, "360p", timed_init(90_000));
    c.feed(g, audio, timed_init(48_000));
    // 0.2-s video parts, 0.128-s audio parts; a first segment of each, then one open.
    let video_part = |n: u32| timed_part(n < 2, n * 18_000, 6, 3000, 90_000, at(f64::from(n) * 0.2));
    let audio_part = |n: u32| timed_part(n < 2, n * 6144, 6, 1024, 48_000, at(f64::from(n) * 0.128));
    for n in 0..2 {
        c.feed(g, "360p", video_part(n));
        c.feed(g, audio, audio_part(n));
    }
    let t = Duration::from_millis(10);
    let playlist = |name: &'static str| {
        let c = c.clone();
        async move { c.playlist(name, PlaylistQuery::default(), t).await.unwrap().unwrap().to_string() }
    };
    let handing = c.hand_over(g, Duration::from_secs(5));
    let feeding = async {
        tokio::task::yield_now().await;
        // The video's last part ends at 0.6 s; the audio's is the first to end 0.15 s later
        // (at 0.768 s, part 5), and nothing after it is added.
        c.feed(g, "360p", video_part(2));
        c.feed(g, "360p", video_part(3));
        for n in 2..5 {
            c.feed(g, audio, audio_part(n));
            let text = playlist(audio).await;
            assert!(!text.contains("TYPE=MAP"), "part {n} is not the audio's last: {text}");
        }
        c.feed(g, audio, audio_part(5));
        c.feed(g, audio, audio_part(6));
    };
    tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(handing, feeding) })
        .await
        .expect("the hand-over returns once the audio came past the video");
    // Each ends with a closed segment (no part after its last EXTINF) and the next section hinted.
    for (name, parts, last) in [("360p", 3, "0.40000"), (audio, 6, "0.64000")] {
        let text = playlist(name).await;
        assert_eq!(text.matches("#EXT-X-PART:").count(), parts, "{text}");
        let tail = text.rsplit("#EXTINF:").next().unwrap_or_default();
        assert!(
            tail.starts_with(last) && !tail.contains("#EXT-X-PART:"),
            "the last segment is closed: {text}"
        );
        assert!(text.contains("#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"init1.mp4\""), "{text}");
    }
    // The hinted section, asked for while the handing-over generation is still the channel's
    // (shaka's low-latency mode loads a hinted section at once), is held until the next push
    // brings it, not refused; a section nobody hinted is refused at once.
    let early = {
        let c = c.clone();
        tokio::spawn(async move { c.file("360p", "init1.mp4", Duration::from_secs(5)).await })
    };
    tokio::task::yield_now().await;
    assert!(!early.is_finished(), "the hinted section is held, not refused");
    assert_eq!(c.file("360p", "init2.mp4", Duration::from_secs(5)).await, Err(Miss::NotFound));
    let next = c.reconnect();
    c.feed(next, "360p", timed_init(90_000));
    let init = tokio::time::timeout(Duration::from_secs(5), early).await.expect("answered").expect("joined");
    assert!(init.is_ok_and(|b| b.starts_with(&[0, 0, 0])), "the next push's section");
}
