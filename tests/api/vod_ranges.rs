//! VOD objects served by range, streamed from storage (issue 53): a 2 GiB object on the local
//! store, on the real binary, read at its start, middle and end and through a range of 384 MiB
//! read whole by the client, right byte for byte, while the server's resident memory stays flat;
//! hostile `Range` headers, each answered 200 whole or 416, never a failure; and an S3 store
//! that hangs mid-body, which cuts the viewer's answer within `READ_STALL` instead of holding it.
//!
//! The object is a sparse file (no 2 GiB of disk) with marked regions, put in the store's folder
//! as a segment of a complete VOD.

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::{Client, Response};
use serde_json::json;

use crate::support::proxy::Mode;
use crate::support::{
    bootstrap_key, eventually, free_port, json_of, rss_kib, serve_logged, sluice_on, spawn_app,
    spawn_app_with, Backend, TestApp,
};
use crate::vod::{create, finished, make_file, put_file, uploaded};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// The size of the object.
const SIZE: u64 = 2 * GIB;
/// The large range: read whole by the client.
const LARGE: (u64, u64) = (512 * MIB + 12_345, 512 * MIB + 12_345 + 384 * MIB - 1);
/// What the server's resident memory may grow by while serving it all.
const RSS_GROWTH_MAX_KIB: u64 = 64 * 1024;

/// The marked regions of the object: 64 KiB at its start, around its middle, at its end, and
/// every 32 MiB through the large range (one across each of its ends); zeros elsewhere.
fn markers() -> Vec<(u64, Vec<u8>)> {
    let mut at = vec![0, GIB - 32 * 1024, SIZE - 64 * 1024, LARGE.0 - 1000, LARGE.1 - 1000];
    at.extend((LARGE.0..LARGE.1).step_by(32 * MIB as usize).skip(1));
    at.into_iter()
        .map(|offset| {
            // A different byte sequence per region, never all zeros.
            let mut x = offset | 1;
            let bytes = (0..64 * 1024)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8 | 1
                })
                .collect();
            (offset, bytes)
        })
        .collect()
}

/// The sparse object at `path`.
fn write_object(path: &Path, marks: &[(u64, Vec<u8>)]) {
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("folder");
    let mut f = std::fs::File::create(path).expect("object file");
    f.set_len(SIZE).expect("a sparse 2 GiB");
    for (offset, bytes) in marks {
        f.seek(SeekFrom::Start(*offset)).expect("seek");
        f.write_all(bytes).expect("a marker");
    }
}

/// The object's bytes `at..at + len`.
fn expected(marks: &[(u64, Vec<u8>)], at: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let end = at + len as u64;
    for (offset, bytes) in marks {
        let m_end = offset + bytes.len() as u64;
        let (from, to) = ((*offset).max(at), m_end.min(end));
        if from < to {
            out[(from - at) as usize..(to - at) as usize]
                .copy_from_slice(&bytes[(from - offset) as usize..(to - offset) as usize]);
        }
    }
    out
}

/// Reads `resp`'s body as it comes, checking each chunk against the object from `at`, sampling
/// the server's memory as it goes; returns the bytes read and the most memory seen (KiB).
async fn read_checked(mut resp: Response, marks: &[(u64, Vec<u8>)], mut at: u64, pid: u32) -> (u64, u64) {
    let (mut read, mut rss_max, mut chunks) = (0u64, 0u64, 0u64);
    while let Some(chunk) = resp.chunk().await.expect("the body reads to its end") {
        assert!(chunk == expected(marks, at, chunk.len()), "the bytes at {at}..{}", at + chunk.len() as u64);
        at += chunk.len() as u64;
        read += chunk.len() as u64;
        chunks += 1;
        if chunks % 256 == 0 {
            rss_max = rss_max.max(rss_kib(pid));
        }
    }
    (read, rss_max.max(rss_kib(pid)))
}

/// A complete VOD of a 4-s clip, one rung, made through the API of the server at `base`.
async fn complete_vod(client: &Client, base: &str, key: &str, dir: &Path) -> String {
    let file = make_file(dir, "clip.mp4", Some("testsrc2=size=320x240:rate=30"), 4);
    let ladder = json!([{"name": "240p", "width": 320, "height": 240, "videoBitrate": "300k"}]);
    let body = json!({"name": "ranges", "filename": "clip.mp4", "ladder": ladder});
    let created = json_of(client.post(format!("{base}/vod")).bearer_auth(key).json(&body), "create").await;
    let id = created["vod"]["_id"].as_str().expect("VOD id").to_string();
    let upload = created["upload"]["url"].as_str().expect("upload URL");
    let put = client.put(upload).body(std::fs::read(&file).expect("clip")).send().await.expect("upload");
    assert_eq!(put.status(), 200);
    let queued = json_of(client.post(format!("{base}/vod/{id}/uploaded")).bearer_auth(key), "uploaded").await;
    assert_eq!(queued["status"], "queued", "{queued}");
    eventually("the VOD to complete", Duration::from_secs(120), || async {
        let resp = client.get(format!("{base}/vod/{id}")).bearer_auth(key).send().await.ok()?;
        let v: serde_json::Value = resp.json().await.ok()?;
        assert!(!["failed", "cancelled"].contains(&v["status"].as_str().unwrap_or_default()), "{v}");
        (v["status"] == "complete").then_some(())
    })
    .await;
    id
}

/// A complete VOD of a 4-s clip, one rung, on the in-process server `t`.
async fn complete_vod_in(t: &TestApp) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = make_file(dir.path(), "clip.mp4", Some("testsrc2=size=320x240:rate=30"), 4);
    let ladder = json!([{"name": "240p", "width": 320, "height": 240, "videoBitrate": "300k"}]);
    let (vod, url) = create(t, json!({"name": "Clip", "filename": "clip.mp4", "ladder": ladder})).await;
    let id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(t, &url, &file).await.status(), 200);
    assert_eq!(uploaded(t, &id).await.status(), 200);
    let done = finished(t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");
    id
}

fn header<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2_gib_object_is_served_by_range_with_flat_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}", dir.path().join("sluice.db").display());
    let http = free_port();
    let key = bootstrap_key(sluice_on(dir.path(), &database, http));
    let (server, _log) = serve_logged(sluice_on(dir.path(), &database, http), http, "vod-ranges").await;
    let pid = server.0.id();
    let client = Client::builder().timeout(Duration::from_secs(120)).build().expect("client");
    let id =
        complete_vod(&client, &format!("http://127.0.0.1:{http}/v1/projects/demo"), &key, dir.path()).await;

    let marks = markers();
    let object: PathBuf = dir.path().join(format!("storage/vod/{id}/240p/s100000.m4s"));
    write_object(&object, &marks);
    let url = format!("http://127.0.0.1:{http}/play/vod/{id}/240p/s100000.m4s");
    let get = |range: String| client.get(&url).header("Range", range).send();

    // The paths a range takes, taken once, before the baseline.
    let warm = get("bytes=0-1023".into()).await.expect("range");
    assert_eq!(warm.bytes().await.expect("bytes").as_ref(), &expected(&marks, 0, 1024)[..]);
    let head = client.head(&url).send().await.expect("HEAD");
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "content-length"), Some(SIZE.to_string().as_str()));
    assert_eq!(header(&head, "accept-ranges"), Some("bytes"));
    let baseline = rss_kib(pid);
    let mut rss_max = baseline;

    // Its start, middle and last bytes.
    let started = Instant::now();
    let mid = GIB - 20_000;
    for (range, from, len) in [
        ("bytes=0-65535".to_string(), 0, 65_536),
        (format!("bytes={mid}-{}", mid + 99_999), mid, 100_000),
        ("bytes=-70000".to_string(), SIZE - 70_000, 70_000),
        (format!("bytes={}-", SIZE - 5), SIZE - 5, 5),
        (format!("bytes={}-{}", SIZE - 10, SIZE + GIB), SIZE - 10, 10),
    ] {
        let resp = get(range.clone()).await.expect("range");
        assert_eq!(resp.status(), 206, "{range}");
        let content_range = format!("bytes {from}-{}/{SIZE}", from + len - 1);
        assert_eq!(header(&resp, "content-range"), Some(content_range.as_str()), "{range}");
        assert_eq!(header(&resp, "content-length"), Some(len.to_string().as_str()), "{range}");
        assert_eq!(header(&resp, "content-type"), Some("video/mp4"));
        assert_eq!(header(&resp, "cache-control"), Some("public, max-age=31536000, immutable"));
        let (read, rss) = read_checked(resp, &marks, from, pid).await;
        assert_eq!(read, len, "{range}");
        rss_max = rss_max.max(rss);
    }
    let small = started.elapsed();

    // A range of 384 MiB, read whole.
    let started = Instant::now();
    let resp = get(format!("bytes={}-{}", LARGE.0, LARGE.1)).await.expect("large range");
    assert_eq!(resp.status(), 206);
    let (read, rss) = read_checked(resp, &marks, LARGE.0, pid).await;
    assert_eq!(read, LARGE.1 - LARGE.0 + 1);
    rss_max = rss_max.max(rss);
    let large = started.elapsed();

    // Outside: 416 with the size.
    let resp = get(format!("bytes={SIZE}-")).await.expect("outside");
    assert_eq!(resp.status(), 416);
    assert_eq!(header(&resp, "content-range"), Some(format!("bytes */{SIZE}").as_str()));

    println!(
        "RSS {} MiB before, at most {} MiB while serving (+{} MiB); 5 small ranges {small:.2?}, \
         384 MiB in {large:.2?} ({:.0} MiB/s)",
        baseline / 1024,
        rss_max / 1024,
        rss_max.saturating_sub(baseline) / 1024,
        384.0 / large.as_secs_f64()
    );
    assert!(
        rss_max < baseline + RSS_GROWTH_MAX_KIB,
        "the server's memory grew by {} MiB serving ranges of a 2 GiB object",
        (rss_max - baseline) / 1024
    );
}

/// Every `Range` header is answered 200 whole, 206 or 416, with the body it says; the server
/// answers on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_range_headers_get_a_clear_answer() {
    let t = spawn_app(Backend::Sqlite).await;
    let id = complete_vod_in(&t).await;

    let stored = |name: &str| t.app.storage.local_path(&format!("vod/{id}/240p/{name}")).expect("local");
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(stored("s5000.m4s"), &data).expect("object");
    std::fs::write(stored("s5001.m4s"), b"").expect("empty object");
    let url = |name: &str| format!("{}/play/vod/{id}/240p/{name}", t.base);
    let ask = |name: &str, range: Vec<u8>| {
        let value = reqwest::header::HeaderValue::from_bytes(&range).expect("a header value");
        t.client.get(url(name)).header("Range", value).send()
    };

    let long = format!("bytes={}-", "9".repeat(4000));
    let ignored: Vec<&[u8]> = vec![
        b"bytes=0-1,5-6",
        b"bytes=0-1, 900-",
        b"items=0-5",
        b"bytes=abc",
        b"bytes=5-1",
        b"bytes=",
        b"bytes=-",
        b"bytes=--5",
        b"bytes=1-2-3",
        b"bytes=99999999999999999999999-",
        b"bytes=\xff-\xfe",
        long.as_bytes(),
    ];
    for range in ignored {
        let resp = ask("s5000.m4s", range.to_vec()).await.expect("answer");
        let shown = String::from_utf8_lossy(range);
        assert_eq!(resp.status(), 200, "{shown}");
        assert_eq!(header(&resp, "content-length"), Some("1000"), "{shown}");
        assert_eq!(resp.bytes().await.expect("body").as_ref(), &data[..], "{shown}: the whole object");
    }
    for (range, content_range, want) in [
        ("bytes=-5", "bytes 995-999/1000", &data[995..]),
        ("bytes=990-", "bytes 990-999/1000", &data[990..]),
        ("bytes= 10-19 ", "bytes 10-19/1000", &data[10..20]),
        ("bytes=998-5000", "bytes 998-999/1000", &data[998..]),
        ("bytes=-5000", "bytes 0-999/1000", &data[..]),
    ] {
        let resp = ask("s5000.m4s", range.into()).await.expect("answer");
        assert_eq!(resp.status(), 206, "{range}");
        assert_eq!(header(&resp, "content-range"), Some(content_range), "{range}");
        assert_eq!(resp.bytes().await.expect("body").as_ref(), want, "{range}");
    }
    for (name, range, size) in [
        ("s5000.m4s", "bytes=1000-", 1000),
        ("s5000.m4s", "bytes=5000-6000", 1000),
        ("s5000.m4s", "bytes=-0", 1000),
        ("s5001.m4s", "bytes=0-", 0),
        ("s5001.m4s", "bytes=-1", 0),
    ] {
        let resp = ask(name, range.into()).await.expect("answer");
        assert_eq!(resp.status(), 416, "{name} {range}");
        assert_eq!(
            header(&resp, "content-range"),
            Some(format!("bytes */{size}").as_str()),
            "{name} {range}"
        );
    }
    // HEAD: the same statuses and lengths, no body.
    for (range, status, length) in
        [("bytes=-5", 206, "5"), ("bytes=0-1,2-3", 200, "1000"), ("bytes=1000-", 416, "")]
    {
        let resp = t.client.head(url("s5000.m4s")).header("Range", range).send().await.expect("HEAD");
        assert_eq!(resp.status(), status, "HEAD {range}");
        if !length.is_empty() {
            assert_eq!(header(&resp, "content-length"), Some(length), "HEAD {range}");
        }
    }
    let resp = t.client.get(url("s5001.m4s")).send().await.expect("empty");
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.expect("body").is_empty());
    let resp = ask("s9999.m4s", b"bytes=0-".to_vec()).await.expect("answer");
    assert_eq!(resp.status(), 404, "no such object, ranged");
    assert_eq!(t.client.get(t.url("/healthz")).send().await.expect("healthz").status(), 200);
}

/// A viewer's answer whose S3 store hangs mid-body is cut within `READ_STALL` (10 s): the
/// client sees the body end in an error, short of its length, and the origin answers on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_hangs_mid_body_cuts_the_answer() {
    let (_moto, proxy, storage) = crate::vod_s3::moto_behind_proxy().await;
    let t = spawn_app_with(Backend::Sqlite, |a| a.storage_url = Some(storage)).await;
    let id = complete_vod_in(&t).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let len = 48usize << 20;
    std::fs::write(dir.path().join("big"), vec![7u8; len]).expect("write");
    let key = format!("vod/{id}/240p/s5000.m4s");
    t.app.storage.put_file(&key, &dir.path().join("big")).await.expect("put in parts");

    // No client deadline: only the server ends this answer.
    let client = Client::new();
    let url = format!("{}/play/vod/{id}/240p/s5000.m4s", t.base);
    let mut resp = client.get(&url).send().await.expect("answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-length"), Some(len.to_string().as_str()));
    let mut read = resp.chunk().await.expect("a first chunk").expect("bytes").len();
    proxy.set(Mode::Hang);
    let hung = Instant::now();
    let cut = loop {
        match tokio::time::timeout(Duration::from_secs(60), resp.chunk()).await.expect("the answer ends") {
            Ok(Some(bytes)) => read += bytes.len(),
            Ok(None) => panic!("the body ended as if whole after {read} of {len} bytes"),
            Err(e) => break e,
        }
    };
    let took = hung.elapsed();
    println!("the store hung after {read} of {len} bytes; the answer was cut {took:.2?} later: {cut}");
    assert!(read < len);
    assert!(took < Duration::from_secs(15), "cut {took:?} after the store hung");
    proxy.set(Mode::Open);
    let again = client.get(&url).header("Range", "bytes=-4").send().await.expect("answer");
    assert_eq!(again.status(), 206);
    assert_eq!(again.bytes().await.expect("body").as_ref(), &[7u8; 4]);
}
