//! `Storage` on S3 (moto's server, `scripts/moto.sh`): a file larger than a part is stored in
//! parts and reads back byte for byte, whole and by streamed range; a streamed read whose store
//! hangs mid-body ends in an error within [`READ_STALL`] instead of holding its reader.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use object_store::ObjectStore;
use sluice::storage::{ByteRange, Read, Storage, PART_SIZE, READ_STALL};

use crate::support::proxy::Mode;

/// Bytes that differ at every offset within a part.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i / 251 % 256) as u8).collect()
}

/// The object's ETag as S3 tells it: `"<md5>-<parts>"` for one stored in parts.
async fn etag(endpoint: &str, key: &str) -> String {
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name("sluice")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .expect("S3 client");
    s3.head(&key.into()).await.expect("head").e_tag.expect("an ETag")
}

async fn read_all(
    storage: &Storage,
    key: &str,
    range: Option<ByteRange>,
) -> (u64, std::ops::Range<u64>, Vec<u8>) {
    match storage.read(key, range).await.expect("read").expect("found") {
        Read::Found { size, range, body } => {
            let chunks: Vec<bytes::Bytes> = body.map(|b| b.expect("bytes")).collect().await;
            (size, range, chunks.concat())
        }
        Read::Outside { size } => panic!("{range:?} outside {size} bytes"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_go_to_s3_in_parts_and_come_back_by_range() {
    let (_moto, endpoint) = crate::vod_s3::moto().await;
    let storage = Storage::open(&crate::vod_s3::s3_url(&endpoint)).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = pattern(2 * PART_SIZE + 12_345);
    let file = dir.path().join("big");
    std::fs::write(&file, &data).expect("write");
    storage.put_file("vod/x/big", &file).await.expect("put in parts");
    let tag = etag(&endpoint, "vod/x/big").await;
    assert!(tag.trim_matches('"').ends_with("-3"), "stored in 3 parts: ETag {tag}");

    let len = data.len() as u64;
    let (size, range, whole) = read_all(&storage, "vod/x/big", None).await;
    assert_eq!((size, range), (len, 0..len));
    assert!(whole == data, "the object reads back as the file");
    let boundary = PART_SIZE as u64;
    for (asked, want) in [
        (ByteRange::Span(boundary - 3, boundary + 3), boundary - 3..boundary + 4),
        (ByteRange::Span(len - 2, len + 100), len - 2..len),
        (ByteRange::From(len - 10), len - 10..len),
        (ByteRange::Last(5), len - 5..len),
        (ByteRange::Last(len + 5), 0..len),
    ] {
        let (size, range, got) = read_all(&storage, "vod/x/big", Some(asked)).await;
        assert_eq!((size, range.clone()), (len, want.clone()), "{asked:?}");
        assert!(got == data[want.start as usize..want.end as usize], "{asked:?}");
    }
    for asked in [ByteRange::From(len), ByteRange::Span(len + 1, len + 9), ByteRange::Last(0)] {
        let read = storage.read("vod/x/big", Some(asked)).await.expect("read");
        assert!(matches!(read, Some(Read::Outside { size }) if size == len), "{asked:?}");
    }
    assert!(storage.read("vod/x/none", None).await.expect("read").is_none());
    assert!(storage.read("vod/x/none", Some(ByteRange::Last(3))).await.expect("read").is_none());

    // One part's worth goes in one request.
    std::fs::write(&file, &data[..PART_SIZE]).expect("write");
    storage.put_file("vod/x/one", &file).await.expect("put");
    let tag = etag(&endpoint, "vod/x/one").await;
    assert!(!tag.contains('-'), "stored in one request: ETag {tag}");
    assert!(read_all(&storage, "vod/x/one", None).await.2 == data[..PART_SIZE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_hangs_mid_body_ends_the_read() {
    let (_moto, proxy, storage) = crate::vod_s3::moto_behind_proxy().await;
    let storage = Storage::open(&storage).expect("open");
    let dir = tempfile::tempdir().expect("tempdir");
    // More than the sockets and the proxy hold on their way.
    let data = pattern(48 << 20);
    std::fs::write(dir.path().join("big"), &data).expect("write");
    storage.put_file("vod/x/big", &dir.path().join("big")).await.expect("put");

    let Some(Read::Found { size, mut body, .. }) = storage.read("vod/x/big", None).await.expect("read")
    else {
        panic!("the object is there");
    };
    assert_eq!(size, data.len() as u64);
    let first = body.next().await.expect("a first chunk").expect("bytes");
    proxy.set(Mode::Hang);
    let hung = Instant::now();
    let mut read = first.len();
    let ended = loop {
        match tokio::time::timeout(READ_STALL * 3, body.next()).await.expect("the read ends on its own") {
            Some(Ok(bytes)) => read += bytes.len(),
            Some(Err(e)) => break e,
            None => panic!("the body ended without an error after {read} bytes"),
        }
    };
    let took = hung.elapsed();
    println!("hung after {read} of {} bytes; the read ended in {took:.2?}: {ended}", data.len());
    assert!(read < data.len(), "the store hung before the end");
    assert!(took < READ_STALL + Duration::from_secs(5), "ended {took:?} after the store hung");
    assert!(ended.to_string().contains("no answer within"), "{ended}");
    proxy.set(Mode::Open);
}
