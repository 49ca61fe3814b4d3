//! Byte ranges of media answers (RFC 9110 14), with the one `Range` parser of the origin: live
//! media answered from memory ([`ranged`]) and VOD objects streamed from storage ([`stored`]),
//! of which only the bytes asked for are read.
//!
//! One range, `bytes=a-b`, `bytes=a-` or `bytes=-n`, is answered 206 with `Content-Range`, or 416
//! with `Content-Range: bytes */<size>` when none of it lies within. Any other `Range` (another
//! unit, several ranges, a malformed one) is ignored and the whole answered 200, as RFC 9110
//! 14.2 lets a server (and requires of a unit it does not know).

use bytes::Bytes;
use futures_util::TryStreamExt;
use poem::http::{header, HeaderMap, Method, StatusCode};
use poem::{Body, Request, Response};

use super::origin::status;
use crate::storage::{ByteRange, Read, Storage, StorageError, READ_DEADLINE};

/// The one byte range a `Range` value asks for, or `None` for anything the origin ignores.
/// Public for the fuzz target.
pub fn parse(value: &str) -> Option<ByteRange> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    match (a.trim(), b.trim()) {
        ("", n) => Some(ByteRange::Last(n.parse().ok()?)),
        (a, "") => Some(ByteRange::From(a.parse().ok()?)),
        (a, b) => {
            let (a, b) = (a.parse().ok()?, b.parse().ok()?);
            // RFC 9110 14.1.1: a last position before the first makes the range invalid.
            (a <= b).then_some(ByteRange::Span(a, b))
        }
    }
}

/// The range a request's `Range` header asks for, if one.
fn asked(headers: &HeaderMap) -> Option<ByteRange> {
    headers.get(header::RANGE).and_then(|v| v.to_str().ok()).and_then(parse)
}

/// What of a body of `size` bytes an answer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    /// The first and last byte.
    Range(u64, u64),
    /// Nothing: the range asked for lies outside.
    Outside,
}

fn part_of(asked: Option<ByteRange>, size: u64) -> Part {
    match asked.map(|r| r.within(size)) {
        None => Part::Whole,
        Some(Some((start, end))) => Part::Range(start, end),
        Some(None) => Part::Outside,
    }
}

/// The answer holding `part` of a body of `size` bytes (`body`: those bytes, or empty for HEAD).
fn answer(part: Part, size: u64, body: Body, content_type: &str, cache: &str) -> Response {
    let base = Response::builder()
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_EXPOSE_HEADERS, "Content-Range, Content-Length")
        .header(header::ACCESS_CONTROL_ALLOW_HEADERS, "Range")
        .header(header::CACHE_CONTROL, cache)
        .header(header::ACCEPT_RANGES, "bytes")
        .content_type(content_type);
    match part {
        Part::Whole => base.header(header::CONTENT_LENGTH, size).body(body),
        Part::Range(start, end) => base
            .status(StatusCode::PARTIAL_CONTENT)
            .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"))
            .header(header::CONTENT_LENGTH, end - start + 1)
            .body(body),
        Part::Outside => base
            .status(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_RANGE, format!("bytes */{size}"))
            .body(Body::empty()),
    }
}

/// The whole body, or the one byte range of it the request asks for.
pub(super) fn ranged(
    headers: &HeaderMap,
    method: &Method,
    bytes: Bytes,
    content_type: &str,
    cache: &str,
) -> Response {
    let size = bytes.len() as u64;
    let part = part_of(asked(headers), size);
    let body = match part {
        _ if method == Method::HEAD => Body::empty(),
        Part::Whole => Body::from(bytes),
        // Within `bytes`, whose length fits a usize.
        Part::Range(start, end) => Body::from(bytes.slice(start as usize..=end as usize)),
        Part::Outside => Body::empty(),
    };
    answer(part, size, body, content_type, cache)
}

/// A read of object `key` that gives up after [`READ_DEADLINE`] (on S3 the store's own
/// deadlines and retries add up to minutes).
pub(super) async fn in_time<T>(
    key: &str,
    read: impl std::future::Future<Output = Result<T, StorageError>>,
) -> Result<T, StorageError> {
    tokio::time::timeout(READ_DEADLINE, read).await.unwrap_or_else(|_| {
        Err(StorageError::Timeout { what: format!("reading {key}"), within: READ_DEADLINE })
    })
}

/// An object of the store, found: answered by [`Stored::answer`] once the caller has done what
/// it does for an object that exists.
pub(super) struct Stored(Found);

enum Found {
    /// HEAD: the size only.
    Head {
        size: u64,
        part: Part,
    },
    Read(Read, Option<ByteRange>),
}

/// Looks up object `key` for `req`, reading (on GET) only the range it asks for: 404 when there
/// is none, 502 when the store fails or does not answer within [`READ_DEADLINE`].
pub(super) async fn stored(req: &Request, storage: &Storage, key: &str) -> Result<Stored, Response> {
    let range = asked(req.headers());
    let found = if req.method() == Method::HEAD {
        in_time(key, storage.size(key))
            .await
            .map(|s| s.map(|size| Found::Head { size, part: part_of(range, size) }))
    } else {
        storage.read(key, range).await.map(|r| r.map(|read| Found::Read(read, range)))
    };
    match found {
        Ok(Some(found)) => Ok(Stored(found)),
        Ok(None) => Err(status(StatusCode::NOT_FOUND, "no such file")),
        Err(e) => {
            tracing::error!(error = %e, "playback: reading storage");
            Err(status(StatusCode::BAD_GATEWAY, "storage unavailable"))
        }
    }
}

impl Stored {
    /// The answer, its body streamed from the store as the client takes it. A body the store
    /// stops giving ends short of its `Content-Length`, so the client sees it cut, never whole.
    pub(super) fn answer(self, content_type: &str, cache: &str) -> Response {
        match self.0 {
            Found::Head { size, part } => answer(part, size, Body::empty(), content_type, cache),
            Found::Read(Read::Outside { size }, _) => {
                answer(Part::Outside, size, Body::empty(), content_type, cache)
            }
            Found::Read(Read::Found { size, range, body }, asked) => {
                let part = match asked {
                    None => Part::Whole,
                    Some(_) => Part::Range(range.start, range.end.saturating_sub(1)),
                };
                let body = Body::from_bytes_stream(body.map_err(|e| {
                    tracing::warn!(error = %e, "playback: a streamed body ended early");
                    std::io::Error::other(e)
                }));
                answer(part, size, body, content_type, cache)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_range_is_parsed_and_anything_else_ignored() {
        assert_eq!(parse("bytes=0-99"), Some(ByteRange::Span(0, 99)));
        assert_eq!(parse(" bytes=900-"), Some(ByteRange::From(900)));
        assert_eq!(parse("bytes=-100"), Some(ByteRange::Last(100)));
        assert_eq!(parse("bytes=-0"), Some(ByteRange::Last(0)));
        for ignored in [
            "bytes=5-1",
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-2-3",
            "bytes=99999999999999999999999-",
            "",
        ] {
            assert_eq!(parse(ignored), None, "{ignored}");
        }
        let within = |v: &str, len| parse(v).and_then(|r| r.within(len));
        assert_eq!(within("bytes=990-2000", 1000), Some((990, 999)));
        assert_eq!(within("bytes=1000-", 1000), None);
    }

    fn header(r: &Response, name: header::HeaderName) -> Option<&str> {
        r.headers().get(name).and_then(|v| v.to_str().ok())
    }

    #[tokio::test]
    async fn answers_in_memory() {
        let bytes = Bytes::from_static(b"0123456789");
        let with = |range: Option<&str>| {
            let mut h = HeaderMap::new();
            if let Some(r) = range {
                h.insert(header::RANGE, r.parse().expect("header"));
            }
            h
        };
        let r = ranged(&with(Some("bytes=2-4")), &Method::GET, bytes.clone(), "video/mp4", "c");
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(header(&r, header::CONTENT_RANGE), Some("bytes 2-4/10"));
        assert_eq!(r.into_body().into_bytes().await.expect("body").as_ref(), b"234");
        for whole in [None, Some("bytes=0-1,4-5"), Some("nonsense")] {
            let r = ranged(&with(whole), &Method::GET, bytes.clone(), "video/mp4", "c");
            assert_eq!(r.status(), StatusCode::OK, "{whole:?}");
            assert_eq!(header(&r, header::ACCEPT_RANGES), Some("bytes"));
            assert_eq!(r.into_body().into_bytes().await.expect("body"), bytes);
        }
        let r = ranged(&with(Some("bytes=10-")), &Method::GET, bytes.clone(), "video/mp4", "c");
        assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
        assert_eq!(header(&r, header::CONTENT_RANGE), Some("bytes */10"));
        let r = ranged(&with(Some("bytes=-3")), &Method::HEAD, bytes, "video/mp4", "c");
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
        assert_eq!(header(&r, header::CONTENT_LENGTH), Some("3"));
        assert!(r.into_body().into_bytes().await.expect("body").is_empty());
    }
}
