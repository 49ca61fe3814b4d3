//! Tests of the channel on plain values: serving, reconnects, the master, and the DVR writer
//! (slow and stuck disks).

use super::*;
use crate::media::live::dvr::WRITE_QUEUE;
use crate::media::live::ladder;

mod handover;

const TIMING: Timing = Timing { target_duration: 2, part_target: 0.37 };

fn config() -> ChannelConfig {
    ChannelConfig { part: 1.0 / 3.0, segment: 2.0, dvr: None, key: None }
}

fn part(starts_segment: bool, byte: u8) -> Chunk {
    Chunk::Part {
        starts_segment,
        independent: starts_segment,
        duration: 1.0 / 3.0,
        pdt: None,
        data: Bytes::from(vec![byte; 100]),
    }
}

fn video() -> Kind {
    Kind::Video { width: 640, height: 360, kbps: Some(800), frame_rate: Some(30.0) }
}

impl Channel {
    /// Whether segment `msn` of `rendition` is held in memory.
    fn in_memory(&self, rendition: &str, msn: u64) -> bool {
        self.lock().renditions.get(rendition).is_some_and(|r| r.segments.contains_key(&msn))
    }

    /// Segments of `rendition` in memory, and how many of them wait for the writer.
    fn held(&self, rendition: &str) -> (usize, usize) {
        self.lock().renditions.get(rendition).map_or((0, 0), |r| (r.segments.len(), r.pending.len()))
    }
}

/// Feeds `segments` segments of six parts to rendition `name`.
fn feed(c: &Channel, generation: u32, name: &str, segments: usize) {
    for _ in 0..segments {
        for i in 0..6 {
            c.feed(generation, name, part(i == 0, i as u8));
        }
    }
}

#[tokio::test]
async fn parts_and_segments_are_served_and_segments_are_their_parts() {
    let c = Channel::new(config());
    c.add_rendition(0, "360p", video(), TIMING);
    c.feed(0, "360p", Chunk::Init(Bytes::from_static(b"init")));
    feed(&c, 0, "360p", 2);
    c.feed(0, "360p", part(true, 9)); // closes segment 1
    let t = Duration::from_millis(10);
    assert_eq!(c.file("360p", "init0.mp4", t).await.unwrap(), Bytes::from_static(b"init"));
    assert_eq!(c.file("360p", "p3.m4s", t).await.unwrap(), Bytes::from(vec![3u8; 100]));
    let seg = c.file("360p", "s1.m4s", t).await.unwrap();
    assert_eq!(seg.len(), 600);
    assert_eq!(&seg[..100], &[0u8; 100][..]);
    assert_eq!(c.file("360p", "s2.m4s", t).await, Err(Miss::NotFound), "segment 2 is open");
    assert_eq!(c.file("360p", "p99.m4s", t).await, Err(Miss::NotFound));
    assert_eq!(c.file("360p", "x.m4s", t).await, Err(Miss::NotFound));
    assert_eq!(c.file("480p", "p0.m4s", t).await, Err(Miss::NotFound));
    let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
    assert!(text.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p13.m4s\""));
    assert!(text.contains("#EXT-X-MAP:URI=\"init0.mp4\""));
}

/// Every rendition lists as long as `source` must (three of its 6-s target durations), so
/// each playlist's window starts at about the same moment (video.js without LL-HLS joins on
/// `source` 18 s back and looks for audio there).
#[tokio::test]
async fn every_playlist_lists_as_long_as_the_source_variant_must() {
    let c = Channel::new(config());
    let source = Timing { target_duration: SOURCE_TARGET_DURATION, part_target: 0.37 };
    c.add_rendition(0, ladder::SOURCE, video(), source);
    c.add_rendition(0, ladder::AUDIO, Kind::Audio { channels: 2 }, TIMING);
    for name in [ladder::SOURCE, ladder::AUDIO] {
        feed(&c, 0, name, 20);
    }
    let t = Duration::from_millis(10);
    for name in [ladder::SOURCE, ladder::AUDIO] {
        let text = c.playlist(name, PlaylistQuery::default(), t).await.unwrap().unwrap();
        let listed: f64 = text
            .lines()
            .filter_map(|l| l.strip_prefix("#EXTINF:"))
            .filter_map(|d| d.trim_end_matches(',').parse::<f64>().ok())
            .sum();
        assert!((18.0 - 1e-6..20.0).contains(&listed), "{name}: {listed} s listed");
    }
}

#[tokio::test]
async fn a_blocked_request_wakes_when_its_part_arrives() {
    let c = Channel::new(config());
    c.add_rendition(0, "360p", video(), TIMING);
    feed(&c, 0, "360p", 1);
    c.feed(0, "360p", part(true, 1)); // msn 1, part 0
    let q = PlaylistQuery { msn: Some(1), part: Some(1), skip: false };
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.playlist("360p", q, Duration::from_secs(5)).await })
    };
    let hint = {
        let c = c.clone();
        tokio::spawn(async move { c.file("360p", "p7.m4s", Duration::from_secs(5)).await })
    };
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    c.feed(0, "360p", part(false, 7));
    let text = waiter.await.unwrap().unwrap().unwrap();
    assert!(text.contains("URI=\"p7.m4s\""));
    assert!(text.held, "held until its part came: caches may keep the answer");
    assert_eq!(hint.await.unwrap().unwrap(), Bytes::from(vec![7u8; 100]));
    // The same request again, its part there already: answered at once, for no cache to keep
    // (video.js asks so again and again after a segment closed with no part after it).
    let again = c.playlist("360p", q, Duration::from_secs(5)).await.unwrap().unwrap();
    assert!(!again.held);
    assert_eq!(again.text, text.text);
    // Too far ahead: refused at once.
    let far = PlaylistQuery { msn: Some(9), part: None, skip: false };
    assert_eq!(c.playlist("360p", far, Duration::from_secs(5)).await, Err(Miss::TooFarAhead));
    // Not there within the timeout: no answer.
    let next = PlaylistQuery { msn: Some(1), part: Some(3), skip: false };
    assert_eq!(c.playlist("360p", next, Duration::from_millis(20)).await, Ok(None));
}

#[tokio::test]
async fn a_reconnect_continues_after_a_discontinuity_and_the_end_ends_the_playlists() {
    let channels = Channels::default();
    let (c, g) = channels.start_push("st", config());
    assert_eq!(g, 0);
    c.add_rendition(g, "360p", video(), TIMING);
    feed(&c, g, "360p", 2);
    c.push_ended(g);
    let (again, g1) = channels.start_push("st", config());
    assert!(Arc::ptr_eq(&c, &again), "the same channel continues");
    assert_eq!(g1, 1);
    c.feed(0, "360p", part(true, 5)); // a late chunk of the old push is ignored
    c.add_rendition(g1, "360p", video(), TIMING);
    feed(&c, g1, "360p", 1);
    c.feed(g1, "360p", part(true, 1));
    let t = Duration::from_millis(10);
    let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 1);
    assert!(text.contains("#EXT-X-MAP:URI=\"init1.mp4\""));
    assert_eq!(text.matches("#EXTINF:").count(), 3, "two segments before, one after");
    assert!(!c.finish(g), "an old generation cannot end the playlists");
    c.push_ended(g1);
    assert!(c.finish(g1));
    let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
    assert!(text.ends_with("#EXT-X-ENDLIST\n") || text.contains("#EXT-X-ENDLIST\n"));
    assert_eq!(text.matches("#EXTINF:").count(), 4, "the open segment was closed at the end");
    // After the end a push starts afresh.
    let (fresh, g) = channels.start_push("st", config());
    assert!(!Arc::ptr_eq(&c, &fresh));
    assert_eq!(g, 0);
}

#[tokio::test]
async fn the_master_waits_for_every_rendition_and_lists_audio() {
    let c = Channel::new(config());
    c.add_rendition(0, "360p", video(), TIMING);
    c.add_rendition(0, ladder::AUDIO, Kind::Audio { channels: 2 }, TIMING);
    feed(&c, 0, "360p", 2);
    c.set_codec(0, "360p", "avc1.64001e".into());
    assert_eq!(c.master(), None, "audio has no media yet");
    feed(&c, 0, ladder::AUDIO, 1);
    c.set_codec(0, ladder::AUDIO, "mp4a.40.2".into());
    assert_eq!(c.master(), None, "audio's first segment is still open: its playlist would be empty");
    feed(&c, 0, ladder::AUDIO, 1);
    let master = c.master().unwrap();
    assert!(master.contains(&format!("\n{}/360p/index.m3u8\n", c.session)), "{master}");
    assert!(master.contains("RESOLUTION=640x360,CODECS=\"avc1.64001e,mp4a.40.2\""), "{master}");
    assert!(master.contains("BANDWIDTH=1040000"), "880k video + 160k audio: {master}");
}

#[tokio::test]
async fn dvr_segments_leave_memory_for_disk_and_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let c = Channel::new(ChannelConfig { dvr: Some((60.0, dir.path().to_path_buf())), ..config() });
    c.add_rendition(0, "360p", video(), TIMING);
    feed(&c, 0, "360p", 16);
    c.feed(0, "360p", part(true, 1));
    let t = Duration::from_millis(10);
    // Served throughout: from memory while the writer works, then from the DVR folder.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.in_memory("360p", 0) {
        assert_eq!(c.file("360p", "s0.m4s", t).await.unwrap().len(), 600, "from memory");
        assert!(std::time::Instant::now() < deadline, "segment 0 never left memory");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(dir.path().join("360p/s0.m4s").exists(), "it left memory only once on disk");
    let s0 = c.file("360p", "s0.m4s", t).await.unwrap();
    assert_eq!(s0.len(), 600, "segment 0 is read back from the DVR folder");
    assert!(c.in_memory("360p", 15), "the newest segments stay in memory");
    let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
    assert!(text.contains("#EXT-X-MEDIA-SEQUENCE:0"), "16 segments of 2 s fit in 60 s");
}

#[tokio::test]
async fn a_channel_that_leaves_the_map_has_its_dvr_folder_removed_once_written() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("push");
    let channels = Channels::default();
    let dvr = ChannelConfig { dvr: Some((60.0, folder.clone())), ..config() };
    let (c, g) = channels.start_push("st", dvr);
    c.add_rendition(g, "360p", video(), TIMING);
    feed(&c, g, "360p", 3);
    c.feed(g, "360p", part(true, 1));
    channels.remove("st");
    assert!(channels.get("st").is_none());
    // The channel is still held (by its pipeline here) and yet its writer ends and its folder
    // goes. (The folder's absence alone says nothing: the writer may not have made it yet.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !c.dvr_finished() {
        assert!(std::time::Instant::now() < deadline, "the DVR writer never ended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(!folder.exists(), "the DVR folder was removed");
    c.feed(g, "360p", part(true, 2)); // a late segment is not written any more
    c.feed(g, "360p", part(true, 3));
    drop(c);
    assert!(!folder.exists(), "nothing was written after the channel left the map");
}

#[tokio::test]
async fn a_channel_that_leaves_the_map_writes_none_of_its_queued_segments() {
    let disk = Arc::new(SlowDisk { delay: Duration::from_millis(200), writes: 0.into() });
    let dir = tempfile::tempdir().unwrap();
    let dvr = ChannelConfig { dvr: Some((60.0, dir.path().join("push"))), ..config() };
    let c = Channel::with_sink(dvr, disk.clone());
    c.add_rendition(0, "360p", video(), TIMING);
    feed(&c, 0, "360p", 6); // five segments queued behind a disk that takes 0.2 s for each
    c.feed(0, "360p", part(true, 1));
    c.retire();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !c.dvr_finished() {
        assert!(std::time::Instant::now() < deadline, "the DVR writer never ended");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // At most the one being written when the channel left.
    let writes = disk.writes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(writes <= 1, "{writes} segments were written after the channel left its map");
}

/// A disk that takes `delay` for every segment (and keeps nothing).
struct SlowDisk {
    delay: Duration,
    writes: std::sync::atomic::AtomicUsize,
}

impl SegmentSink for SlowDisk {
    fn write(&self, _: &std::path::Path, _: &[u8]) -> std::io::Result<()> {
        std::thread::sleep(self.delay);
        self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn remove_all(&self, _: &std::path::Path) -> std::io::Result<()> {
        Ok(())
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// 200 blocking playlist requests (`_HLS_msn`/`_HLS_part`) wait for each part while a slow
/// disk writes DVR segments: each wakes within a few milliseconds of the part being fed,
/// however far behind the writer is, and no later at the end than at the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_readers_wake_promptly_while_dvr_segments_are_written_slowly() {
    use std::time::Instant;
    const READERS: usize = 200;
    const SEGMENTS: u64 = 12;
    const PARTS: u64 = 6;
    let write = Duration::from_millis(100);
    let disk = Arc::new(SlowDisk { delay: write, writes: 0.into() });
    let dir = tempfile::tempdir().unwrap();
    let dvr = ChannelConfig { dvr: Some((600.0, dir.path().to_path_buf())), ..config() };
    let c = Channel::with_sink(dvr, disk.clone());
    c.add_rendition(0, "360p", video(), TIMING);
    // The first segment, whole: until one is complete, every request waits for it.
    c.feed(0, "360p", part(true, 0));
    for n in 1..PARTS {
        c.feed(0, "360p", part(false, n as u8));
    }
    let mut rounds: Vec<Vec<Duration>> = Vec::new();
    let mut writing = 0;
    for n in PARTS..SEGMENTS * PARTS {
        let (msn, p) = (n / PARTS, n % PARTS);
        let q = PlaylistQuery { msn: Some(msn), part: Some(p), skip: false };
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(
                    async move { (c.playlist("360p", q, Duration::from_secs(10)).await, Instant::now()) },
                )
            })
            .collect();
        // Every reader is blocked: each holds a subscription while it waits.
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.version.receiver_count() < READERS {
            assert!(Instant::now() < deadline, "the readers never blocked");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(readers.iter().all(|r| !r.is_finished()), "a reader answered before its part");
        if c.held("360p").1 > 0 {
            writing += 1;
        }
        // Fed from a thread of its own, as GStreamer's streaming thread does.
        let fed_at = {
            let c = c.clone();
            tokio::task::spawn_blocking(move || {
                let at = Instant::now();
                c.feed(0, "360p", part(p == 0, n as u8));
                at
            })
            .await
            .unwrap()
        };
        let mut round = Vec::with_capacity(READERS);
        for r in readers {
            let (text, at) = r.await.unwrap();
            let text = text.unwrap().unwrap();
            assert!(text.contains(&format!("URI=\"p{n}.m4s\"")), "part {n} is listed");
            round.push(at.saturating_duration_since(fed_at));
        }
        round.sort();
        rounds.push(round);
        let (in_memory, _) = c.held("360p");
        assert!(in_memory <= MEMORY_SEGMENTS + WRITE_QUEUE + 1, "memory is bounded");
    }
    let mut all: Vec<Duration> = rounds.iter().flatten().copied().collect();
    all.sort();
    let (p50, p99) = (percentile(&all, 0.5), percentile(&all, 0.99));
    // Growth is judged on the typical round of a stretch (the median of the rounds' p99), so
    // that one round slowed by a busy machine does not count as a trend.
    let typical = |rounds: &[Vec<Duration>]| {
        let mut each: Vec<Duration> = rounds.iter().map(|r| percentile(r, 0.99)).collect();
        each.sort();
        percentile(&each, 0.5)
    };
    let three = (3 * PARTS) as usize;
    let early = typical(&rounds[PARTS as usize..][..three]);
    let late = typical(&rounds[rounds.len() - three..]);
    eprintln!(
        "wake latency of {READERS} readers with {write:?} writes: p50 {p50:?}, p99 {p99:?}, max {:?}; \
         typical round p99 {early:?} in segments 1-3, {late:?} in the last 3; \
         {writing} of {} parts fed while writes were pending",
        all[all.len() - 1],
        rounds.len()
    );
    assert!(p99 < write / 4, "p99 wake latency {p99:?} is not far below a write ({write:?})");
    assert!(
        late <= early * 3 + Duration::from_millis(5),
        "wake latency grows: {early:?} early, {late:?} late"
    );
    assert!(writing >= 2 * PARTS, "the readers waited while the disk was busy ({writing} parts)");
    // The writer catches up and memory shrinks back to the live window.
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.held("360p") != (MEMORY_SEGMENTS, 0) {
        assert!(Instant::now() < deadline, "the writer never caught up: {:?}", c.held("360p"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(disk.writes.load(std::sync::atomic::Ordering::SeqCst), (SEGMENTS - 1) as usize);
}

/// A disk that hangs until the test lets it go.
struct StuckDisk(std::sync::RwLock<()>);

impl SegmentSink for StuckDisk {
    fn write(&self, _: &std::path::Path, _: &[u8]) -> std::io::Result<()> {
        drop(self.0.read());
        Ok(())
    }

    fn remove_all(&self, _: &std::path::Path) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_stuck_disk_costs_dvr_segments_never_the_media_thread_nor_unbounded_memory() {
    let disk = Arc::new(StuckDisk(std::sync::RwLock::new(())));
    let stuck = disk.0.write();
    let dir = tempfile::tempdir().unwrap();
    let dvr = ChannelConfig { dvr: Some((600.0, dir.path().to_path_buf())), ..config() };
    let c = Channel::with_sink(dvr, disk.clone());
    c.add_rendition(0, "360p", video(), TIMING);
    let feeding = {
        let c = c.clone();
        tokio::task::spawn_blocking(move || feed(&c, 0, "360p", 60))
    };
    tokio::time::timeout(Duration::from_secs(10), feeding)
        .await
        .expect("the media thread waited for the disk")
        .unwrap();
    let (in_memory, pending) = c.held("360p");
    assert!(pending <= WRITE_QUEUE + 1, "{pending} segments wait for the writer");
    assert!(in_memory <= MEMORY_SEGMENTS + WRITE_QUEUE + 1, "{in_memory} segments in memory");
    drop(stuck);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.held("360p") != (MEMORY_SEGMENTS, 0) {
        assert!(std::time::Instant::now() < deadline, "the writer never caught up: {:?}", c.held("360p"));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A playlist is rendered once per version of its channel: reloads between two changes share
/// the same bytes (and URI offsets for signed sessions); a change renders it again.
#[tokio::test]
async fn a_playlist_is_rendered_once_per_version() {
    let c = Channel::new(config());
    c.add_rendition(0, "360p", video(), TIMING);
    feed(&c, 0, "360p", 2);
    let t = Duration::from_millis(10);
    let plain = PlaylistQuery::default();
    let skip = PlaylistQuery { skip: true, ..plain };
    let a = c.playlist("360p", plain, t).await.unwrap().unwrap();
    let b = c.playlist("360p", plain, t).await.unwrap().unwrap();
    assert_eq!(a.text.as_ptr(), b.text.as_ptr(), "the same bytes, not a second rendering");
    assert_eq!(&a.uri_ends[..], &crate::media::hls::uris::ends(&a)[..], "the URI ends of that text");
    let signed = String::from_utf8(crate::media::hls::uris::splice(&a.text, &a.uri_ends, "T")).unwrap();
    assert_eq!(signed.matches("?token=T").count(), a.uri_ends.len());
    assert!(signed.contains("URI=\"p1.m4s?token=T\""), "{signed}");
    let s = c.playlist("360p", skip, t).await.unwrap().unwrap();
    assert_ne!(s.text.as_ptr(), a.text.as_ptr(), "a delta update is its own rendering");
    c.feed(0, "360p", part(false, 99));
    let d = c.playlist("360p", plain, t).await.unwrap().unwrap();
    assert_ne!(d.text.as_ptr(), a.text.as_ptr(), "a change renders it again");
    let parts = |text: &str| text.matches("#EXT-X-PART:").count();
    assert_eq!(parts(&d), parts(&a) + 1, "the new part is listed: {d:?}");
}

/// A disk that takes nothing (full): every write fails.
struct FullDisk;

impl SegmentSink for FullDisk {
    fn write(&self, _: &std::path::Path, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::StorageFull))
    }

    fn remove_all(&self, _: &std::path::Path) -> std::io::Result<()> {
        Ok(())
    }
}

/// A DVR segment the disk did not take is served from memory while it is there, then listed as
/// a gap (`EXT-X-GAP`): the timeline does not move and no player asks for what would be a 404.
#[tokio::test]
async fn a_dvr_segment_the_disk_did_not_take_becomes_a_gap_as_it_leaves_memory() {
    let dir = tempfile::tempdir().unwrap();
    let dvr = ChannelConfig { dvr: Some((600.0, dir.path().join("push"))), ..config() };
    let c = Channel::with_sink(dvr, Arc::new(FullDisk));
    c.add_rendition(0, "360p", video(), TIMING);
    let t = Duration::from_millis(10);
    let gaps = || async {
        let text = c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap();
        let text = String::from_utf8(text.text.to_vec()).unwrap();
        (text.matches("#EXT-X-GAP").count(), text)
    };
    feed(&c, 0, "360p", 3);
    c.feed(0, "360p", part(true, 1));
    // The writer fails them at once; they are still in memory, so served, and not gaps.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while c.held("360p").1 > 0 {
        assert!(std::time::Instant::now() < deadline, "the writer never answered");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(gaps().await.0, 0);
    assert_eq!(c.file("360p", "s0.m4s", t).await.unwrap().len(), 600);
    // Ten more segments push the first ones out of memory: those are gaps now, the rest not.
    feed(&c, 0, "360p", MEMORY_SEGMENTS);
    c.feed(0, "360p", part(true, 1));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (n, text) = loop {
        let (n, text) = gaps().await;
        if n == 4 || std::time::Instant::now() > deadline {
            break (n, text);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    assert_eq!(n, 4, "segments 0 to 3 left memory unwritten: {text}");
    assert!(text.contains("#EXT-X-MEDIA-SEQUENCE:0"), "{text}");
    let first_gap = text.find("#EXT-X-GAP").unwrap();
    assert!(text[first_gap..].starts_with("#EXT-X-GAP\n#EXTINF:2.00000,\ns0.m4s"), "{text}");
    assert!(!c.in_memory("360p", 0));
}

/// An initialization section written at `time` (its `mvhd` creation time) for a track `width`
/// wide.
fn init_section(time: u8, width: u8) -> Chunk {
    use crate::media::cmaf::tests::boxed;
    let mvhd = boxed(b"mvhd", &[&[1, 0, 0, 0][..], &[time; 16], &[0; 8]].concat());
    let trak =
        boxed(b"trak", &boxed(b"tkhd", &[&[1, 0, 0, 0][..], &[time; 16], &[0, 0, 0, 1, width]].concat()));
    Chunk::Init(Bytes::from([boxed(b"ftyp", b"cmf2"), boxed(b"moov", &[mvhd, trak].concat())].concat()))
}

/// A push of `st` with two segments of rendition `360p` after its section (written at 1).
fn two_segments(channels: &Channels) -> (Arc<Channel>, u32) {
    let (c, g) = channels.start_push("st", config());
    c.add_rendition(g, "360p", video(), TIMING);
    c.feed(g, "360p", init_section(1, 64));
    feed(&c, g, "360p", 2);
    (c, g)
}

#[tokio::test]
async fn a_reconnect_with_the_same_section_keeps_it_and_another_gets_its_own() {
    let channels = Channels::default();
    let (c, g) = two_segments(&channels);
    c.push_ended(g);
    let t = Duration::from_millis(10);
    let playlist =
        || async { c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap().to_string() };

    // The same section but for its times: a discontinuity, and players keep init0.mp4.
    let (_, g1) = channels.start_push("st", config());
    c.add_rendition(g1, "360p", video(), TIMING);
    assert!(!playlist().await.contains("#EXT-X-DISCONTINUITY"), "not before the new push's media");
    c.feed(g1, "360p", init_section(2, 64));
    assert!(!playlist().await.contains("TYPE=MAP"), "no new section is hinted");
    feed(&c, g1, "360p", 1);
    let text = playlist().await;
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 1);
    assert_eq!(text.matches("#EXT-X-MAP:").count(), 1, "{text}");
    assert!(!text.contains("init1.mp4"));

    // Another size: its own section after the discontinuity.
    c.push_ended(g1);
    let (_, g2) = channels.start_push("st", config());
    c.add_rendition(g2, "360p", video(), TIMING);
    c.feed(g2, "360p", init_section(3, 80));
    assert!(playlist().await.contains("#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"init2.mp4\""));
    feed(&c, g2, "360p", 1);
    let text = playlist().await;
    assert_eq!(text.matches("#EXT-X-DISCONTINUITY\n").count(), 2);
    assert!(text.contains("#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"init2.mp4\""), "{text}");
    for (uri, time) in [("init0.mp4", 1), ("init2.mp4", 3)] {
        let served = c.file("360p", uri, t).await.unwrap();
        // ftyp (12 bytes), the moov's header (8), the mvhd's (8), version and flags (4).
        assert_eq!(served[32], time, "{uri} is its own push's section");
    }
}

#[tokio::test]
async fn a_hand_over_hints_the_next_push_before_its_media_and_adds_nothing_after() {
    let channels = Channels::default();
    let (c, g) = two_segments(&channels);
    let t = Duration::from_millis(10);
    let playlist =
        || async { c.playlist("360p", PlaylistQuery::default(), t).await.unwrap().unwrap().to_string() };
    assert!(playlist().await.contains("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p12.m4s\"\n"));

    // The hand-over waits for the generation's next part: that one is the part hinted, and the
    // playlist that adds it hints the next push's first part and section.
    let handing = c.hand_over(g, Duration::from_secs(5));
    let feeding = async {
        tokio::task::yield_now().await;
        c.feed(g, "360p", part(true, 7));
    };
    tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(handing, feeding) })
        .await
        .expect("the hand-over returns once the part came");
    let text = playlist().await;
    assert!(text.contains("p12.m4s"), "{text}");
    assert!(
        text.contains(
            "#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p13.m4s\"\n#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"init1.mp4\""
        ),
        "{text}"
    );

    // Nothing more of that generation is added, and neither its end nor the next push moves the
    // hint: the next push's first part is the one hinted.
    c.feed(g, "360p", part(false, 8));
    assert_eq!(playlist().await, text);
    c.push_ended(g);
    let (_, g1) = channels.start_push("st", config());
    c.add_rendition(g1, "360p", video(), TIMING);
    c.feed(g1, "360p", init_section(2, 80));
    feed(&c, g1, "360p", 1);
    let text = playlist().await;
    assert!(text.contains("#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"init1.mp4\""), "{text}");
    let after = text.split("#EXT-X-DISCONTINUITY\n").nth(1).expect("after the discontinuity");
    assert!(after.contains("URI=\"p13.m4s\""), "{text}");

    // A hand-over with no part to come returns after its timeout; the part it waited for is
    // then skipped as at any push's end.
    let started = std::time::Instant::now();
    c.hand_over(g1, Duration::from_millis(100)).await;
    assert!(started.elapsed() >= Duration::from_millis(100));
}
