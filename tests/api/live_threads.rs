//! The muxers' threads of a live push run as `SCHED_BATCH` while they mux, so that a frame
//! handed to a muxer does not take the core from the thread that read it
//! (`live_hls::threads::schedule_muxer_thread`, docs/live-ingest.md), and the process's other
//! threads stay ordinary.

use std::time::Duration;

use serde_json::json;

use crate::support::{eventually, ffmpeg_push, Sluice};

const SCHED_BATCH: u32 = 3;

/// Every thread of process `pid`: its name and scheduling policy (`/proc/<pid>/task/<tid>/stat`,
/// field 41).
fn threads(pid: u32) -> Vec<(String, u32)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let (open, close) = (stat.find('(')?, stat.rfind(')')?);
            let name = stat.get(open + 1..close)?.to_string();
            // After the name: field 3 (state) is the first; policy is field 41.
            let policy = stat.get(close + 2..)?.split(' ').nth(41 - 3)?.parse().ok()?;
            Some((name, policy))
        })
        .collect()
}

#[tokio::test]
async fn muxer_threads_are_batch_while_they_mux_and_ordinary_after() {
    let s = Sluice::start(&[]).await;
    let pid = s.proc.0.id();
    // Above the pushed size: `source` and `audio` only, the two muxers a passthrough push has.
    let stream = s.create_stream(json!({"name": "threads", "qualities": ["1080p"]})).await;
    let pusher = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=640x360:rate=30",
        60,
        &[],
    );

    let muxing = eventually("both muxers' threads, batch", Duration::from_secs(60), || async {
        let all = threads(pid);
        let muxers: Vec<_> = all.iter().filter(|(name, _)| name.starts_with("mux_")).collect();
        let named = |n: &str| muxers.iter().any(|(name, _)| name == n);
        (named("mux_source:src") && named("mux_audio:src") && muxers.iter().all(|(_, p)| *p == SCHED_BATCH))
            .then_some(all)
    })
    .await;
    let others: Vec<_> = muxing.iter().filter(|(name, p)| !name.starts_with("mux_") && *p != 0).collect();
    assert!(others.is_empty(), "only the muxers' threads are batch: {others:?}");

    // The push ends; the pipeline stops within its drain (2 s) and the muxers' threads leave
    // their tasks with the ordinary policy. GLib keeps two idle threads for 15 s before ending
    // them, so a thread that kept its policy would still be there after 10 s.
    drop(pusher);
    eventually("no batch thread left", Duration::from_secs(10), || async {
        let batch: Vec<_> = threads(pid).into_iter().filter(|(_, p)| *p == SCHED_BATCH).collect();
        batch.is_empty().then_some(())
    })
    .await;
    let listed =
        s.client.get(format!("{}/streams", s.api)).bearer_auth(&s.key).send().await.expect("the API answers");
    assert_eq!(listed.status(), 200, "still serving");
}
