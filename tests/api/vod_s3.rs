//! The S3 storage path against a real S3-compatible server (moto's, installed by
//! `scripts/moto.sh`): the upload URL is the store's own presigned PUT, the transcode reads the
//! source over a presigned GET, the outputs land in the bucket and play from the origin.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{eventually, spawn_app_with, Backend, Killed};
use crate::vod::{create, delete_vod, finished, make_file, probe_video, put_file, uploaded};

/// moto's server on a free port, with an empty bucket `sluice`.
pub(crate) async fn moto() -> (Killed, String) {
    let bin = std::env::var("SLUICE_TEST_MOTO")
        .unwrap_or_else(|_| format!("{}/target/moto/bin/moto_server", env!("CARGO_MANIFEST_DIR")));
    let port = crate::support::free_port();
    let child = Command::new(&bin)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} runs (bash scripts/moto.sh installs it): {e}"));
    let server = Killed(child);
    let endpoint = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    eventually("moto to listen", Duration::from_secs(30), || async {
        client.put(format!("{endpoint}/sluice")).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    (server, endpoint)
}

/// The storage URL of moto's bucket `sluice` at `endpoint` (`http://host:port`).
pub(crate) fn s3_url(endpoint: &str) -> String {
    format!("s3://sluice?endpoint={endpoint}&region=us-east-1&access_key_id=test&secret_access_key=test")
}

/// moto behind a proxy a test can cut or hang: the server, the proxy, and the storage URL
/// through the proxy.
pub(crate) async fn moto_behind_proxy() -> (Killed, crate::support::proxy::Proxy, String) {
    let (moto, endpoint) = moto().await;
    let port = url::Url::parse(&endpoint).ok().and_then(|u| u.port()).expect("moto's port");
    let proxy = crate::support::proxy::Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
    let storage = s3_url(&format!("http://{}", proxy.addr));
    (moto, proxy, storage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vod_on_s3() {
    let (_moto, endpoint) = moto().await;
    let storage = s3_url(&endpoint);
    let t = spawn_app_with(Backend::Sqlite, |a| a.storage_url = Some(storage)).await;
    assert_eq!(t.client.get(t.url("/readyz")).send().await.expect("readyz").status(), 200);

    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "s3.mp4", Some("testsrc2=size=640x360:rate=30"), 5);
    let ladder = json!([
        {"name": "360p", "width": 640, "height": 360, "videoBitrate": "800k"},
        {"name": "240p", "width": 426, "height": 240, "videoBitrate": "400k"},
    ]);
    let (vod, url) = create(&t, json!({"name": "S3", "filename": "s3.mp4", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert!(url.starts_with(&format!("{endpoint}/sluice/vod/{id}/source?")), "{url}");
    assert!(url.contains("X-Amz-Signature="), "the store's own presigned URL: {url}");

    // Nothing landed yet; then the PUT goes straight to the bucket.
    let resp = uploaded(&t, &id).await;
    assert_eq!(resp.status(), 409);
    assert_eq!(put_file(&t, &url, &file).await.status(), 200);
    let stored = t.app.storage.size(&format!("vod/{id}/source")).await.expect("head");
    assert_eq!(stored, Some(std::fs::metadata(&file).expect("meta").len()));

    let resp = uploaded(&t, &id).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.expect("json")["status"], "queued");
    let done = finished(&t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");

    // The outputs are in the bucket, and the origin plays them from there.
    assert!(t.app.storage.local_path("x").is_none(), "the store is S3");
    for key in
        ["master.m3u8", "thumb.jpg", "360p/index.m3u8", "360p/init.mp4", "240p/s0.m4s", "audio/index.m3u8"]
    {
        let size = t.app.storage.size(&format!("vod/{id}/{key}")).await.expect("head");
        assert!(size.is_some_and(|s| s > 0), "{key} in the bucket");
    }
    assert_eq!(probe_video(&format!("{}/play/vod/{id}/240p/index.m3u8", t.base)), "h264,426,240");
    let thumb = t.client.get(format!("{}/play/vod/{id}/thumb.jpg", t.base)).send().await.expect("thumb");
    assert_eq!(thumb.status(), 200);
    let range = t
        .client
        .get(format!("{}/play/vod/{id}/360p/init.mp4", t.base))
        .header("Range", "bytes=4-7")
        .send()
        .await
        .expect("range");
    assert_eq!(range.status(), 206);
    assert_eq!(range.bytes().await.expect("bytes").as_ref(), b"ftyp");

    // Cancelling an unfinished VOD removes its objects.
    let (vod, url) = create(&t, json!({"name": "Gone", "filename": "g.mp4"})).await;
    let gone = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(&t, &url, &file).await.status(), 200);
    let resp = delete_vod(&t, &gone).await;
    assert_eq!(resp.json::<Value>().await.expect("json")["status"], "cancelled");
    let left = t.app.storage.size(&format!("vod/{gone}/source")).await.expect("head");
    assert_eq!(left, None, "the cancelled VOD's source is removed");
}
