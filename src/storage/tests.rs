//! Reads by range and puts in parts on the local store.

use super::*;

#[test]
fn ranges_within_an_object() {
    use ByteRange::*;
    assert_eq!(Span(0, 99).within(1000), Some((0, 99)));
    assert_eq!(Span(990, 2000).within(1000), Some((990, 999)));
    assert_eq!(Span(5, 1).within(1000), None);
    assert_eq!(From(900).within(1000), Some((900, 999)));
    assert_eq!(From(1000).within(1000), None);
    assert_eq!(Last(100).within(1000), Some((900, 999)));
    assert_eq!(Last(5000).within(1000), Some((0, 999)));
    assert_eq!(Last(0).within(1000), None);
    assert_eq!(From(0).within(0), None);
    assert_eq!(Span(0, u64::MAX).get_range(), GetRange::Offset(0));
}

/// Bytes that differ at every offset within a part (a part stored twice or out of order
/// would not compare equal).
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ (i / 251 % 256) as u8).collect()
}

async fn read_all(storage: &Storage, key: &str, range: Option<ByteRange>) -> (u64, Range<u64>, Vec<u8>) {
    match storage.read(key, range).await.expect("read").expect("found") {
        Read::Found { size, range, body } => {
            let chunks: Vec<Bytes> = body.map(|b| b.expect("bytes")).collect::<Vec<_>>().await;
            (size, range, chunks.concat())
        }
        Read::Outside { size } => panic!("{range:?} outside {size} bytes"),
    }
}

/// A file of two and a half parts is stored in parts and reads back byte for byte, whole
/// and by range; a file of one part in one request.
#[tokio::test]
async fn files_go_in_parts_and_come_back_by_range() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Storage::open(&format!("file://{}/store", dir.path().display())).expect("open");
    let data = pattern(2 * PART_SIZE + PART_SIZE / 2 + 7);
    let file = dir.path().join("big");
    std::fs::write(&file, &data).expect("write");
    storage.put_file("vod/x/big", &file).await.expect("put in parts");
    let (size, range, whole) = read_all(&storage, "vod/x/big", None).await;
    assert_eq!((size, range), (data.len() as u64, 0..data.len() as u64));
    assert!(whole == data, "the object reads back as the file");

    let len = data.len() as u64;
    for (asked, want) in [
        (ByteRange::Span(PART_SIZE as u64 - 3, PART_SIZE as u64 + 3), PART_SIZE - 3..PART_SIZE + 4),
        (ByteRange::From(len - 10), data.len() - 10..data.len()),
        (ByteRange::Last(5), data.len() - 5..data.len()),
        (ByteRange::Span(len - 2, len + 100), data.len() - 2..data.len()),
    ] {
        let (size, range, got) = read_all(&storage, "vod/x/big", Some(asked)).await;
        assert_eq!(size, len);
        assert_eq!(range, want.start as u64..want.end as u64, "{asked:?}");
        assert!(got == data[want.clone()], "{asked:?} reads {want:?}");
    }
    for asked in [ByteRange::From(len), ByteRange::Span(len + 5, len + 9), ByteRange::Last(0)] {
        let read = storage.read("vod/x/big", Some(asked)).await.expect("read");
        assert!(matches!(read, Some(Read::Outside { size }) if size == len), "{asked:?}");
    }
    assert!(storage.read("vod/x/none", None).await.expect("read").is_none());
    assert!(storage.read("vod/x/none", Some(ByteRange::From(5))).await.expect("read").is_none());

    let small = dir.path().join("small");
    std::fs::write(&small, &data[..PART_SIZE]).expect("write");
    storage.put_file("vod/x/small", &small).await.expect("put");
    let (size, _, got) = read_all(&storage, "vod/x/small", None).await;
    assert_eq!(size, PART_SIZE as u64);
    assert!(got == data[..PART_SIZE]);
    // An empty object has no range, but reads whole.
    std::fs::write(&small, b"").expect("write");
    storage.put_file("vod/x/empty", &small).await.expect("put");
    assert_eq!(read_all(&storage, "vod/x/empty", None).await.2, b"");
    let read = storage.read("vod/x/empty", Some(ByteRange::Last(3))).await.expect("read");
    assert!(matches!(read, Some(Read::Outside { size: 0 })));
}

/// A file that cannot be read stores nothing.
#[tokio::test]
async fn a_missing_file_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Storage::open(&format!("file://{}/store", dir.path().display())).expect("open");
    let err = storage.put_file("vod/x/f", &dir.path().join("nothing")).await.expect_err("no file");
    assert!(matches!(err, StorageError::Io { .. }), "{err}");
    assert_eq!(storage.size("vod/x/f").await.expect("head"), None);
}
