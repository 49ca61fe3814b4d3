//! `SIGTERM` drains (CONTRACT: The program): the real `sluice serve` ends a live push cleanly —
//! a viewer blocked on the next part gets the ended playlist (`EXT-X-ENDLIST`) — and the stream
//! is back to `idle` when the process has exited.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sluice::store::Db;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{bootstrap_key, eventually, ffmpeg_push, sluice_command as sluice, wait_ready, Killed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_live_pushes_and_their_playlists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = crate::support::free_port();
    let key = bootstrap_key(sluice(dir.path(), port));
    let mut server = Killed(sluice(dir.path(), port).arg("serve").stdout(Stdio::null()).spawn().unwrap());
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let api = format!("http://127.0.0.1:{port}/v1/projects/demo");
    wait_ready(port).await;
    let stream: Value = client
        .post(format!("{api}/streams"))
        .bearer_auth(&key)
        .json(&json!({"name": "drain", "qualities": ["240p"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let _pusher = ffmpeg_push(stream["ingestUrl"].as_str().unwrap(), "testsrc=size=426x240:rate=15", 30, &[]);
    let master_url = stream["playbackUrls"]["hls"].as_str().unwrap().to_string();
    let master = eventually("the master playlist", Duration::from_secs(30), || async {
        let r = client.get(&master_url).send().await.ok()?;
        if r.status() != 200 {
            return None;
        }
        r.text().await.ok()
    })
    .await;
    let uri = master
        .lines()
        .find(|l| l.split('?').next().is_some_and(|p| p.ends_with("/240p/index.m3u8")))
        .expect("240p variant");
    // Without its playback session (`vs=`): the test adds its own query.
    let uri = uri.split('?').next().unwrap_or(uri);
    let playlist_url = format!("{}{uri}", master_url.trim_end_matches("master.m3u8"));
    let text = client.get(&playlist_url).send().await.unwrap().text().await.unwrap();
    // The open segment's number: the first listed plus the complete ones.
    let first: u64 =
        text.lines().find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:")).unwrap().parse().unwrap();
    let msn = first + text.lines().filter(|l| l.starts_with("#EXTINF:")).count() as u64;

    // A viewer blocks on the segment after the open one; then the process is asked to stop.
    // The request is written on its own connection before the stop, so that it is in the
    // server's hands when SIGTERM comes: a /healthz answered on a later connection shows the
    // server has taken up the connections made before it.
    let blocked = {
        let url = reqwest::Url::parse(&format!("{playlist_url}?_HLS_msn={}", msn + 1)).unwrap();
        let target = format!("{}?{}", url.path(), url.query().unwrap_or_default());
        let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!("GET {target} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
        conn.write_all(request.as_bytes()).await.unwrap();
        tokio::spawn(async move {
            let mut answer = Vec::new();
            tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer)).await.ok()?.ok()?;
            String::from_utf8(answer).ok()
        })
    };
    // (A new client: a pooled connection would be older than the viewer's.)
    let health = reqwest::Client::new().get(format!("http://127.0.0.1:{port}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let term = Command::new("kill").args(["-TERM", &server.0.id().to_string()]).status().unwrap();
    assert!(term.success());
    let ended = blocked.await.unwrap().expect("the blocked viewer gets an answer");
    assert!(ended.contains("#EXT-X-ENDLIST"), "{ended}");

    let until = Instant::now() + Duration::from_secs(30);
    while server.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "sluice did not exit after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let db = Db::connect(&format!("sqlite://{}/sluice.db", dir.path().display())).await.unwrap();
    let row = db.stream_by_key(stream["streamKey"].as_str().unwrap()).await.unwrap().unwrap();
    assert_eq!(row.status, "idle", "the push was ended before the process exited");
}
