//! The muxers' threads of a live push's rungs run as `SCHED_BATCH` while they mux, so that a
//! frame handed to a muxer does not take the core from the encoder's thread
//! (`media::live::threads::schedule_muxer_thread`, docs/live-ingest.md), and the process's other
//! threads stay ordinary. The `source` and `audio` renditions have no muxer thread: they are
//! packaged on the thread that read their frames (`media::live::pack`).

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
    // One rung below the pushed size: its muxer is the one a push has.
    let stream = s.create_stream(json!({"name": "threads", "qualities": ["240p"]})).await;
    let pusher = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=640x360:rate=30",
        60,
        &[],
    );

    let muxing = eventually("the rung muxer's thread, batch", Duration::from_secs(60), || async {
        let all = threads(pid);
        let muxers: Vec<_> = all.iter().filter(|(name, _)| name.starts_with("mux_")).collect();
        let named = |n: &str| muxers.iter().any(|(name, _)| name == n);
        (named("mux_240p:src") && muxers.iter().all(|(_, p)| *p == SCHED_BATCH)).then_some(all)
    })
    .await;
    let passthrough: Vec<_> = muxing
        .iter()
        .filter(|(name, _)| name.starts_with("mux_source") || name.starts_with("mux_audio"))
        .collect();
    assert!(passthrough.is_empty(), "the source and audio renditions have no muxer thread: {passthrough:?}");
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
