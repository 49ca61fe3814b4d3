//! Stills (CONTRACT: Clips, downloads, thumbnails): a VOD's picture at any time
//! (`/vod/<id>/thumb.jpg?time=S&width=W`) and a live stream's newest keyframe
//! (`/live/<id>/thumb.jpg`: its newest picture, decoded from the keyframe before it). Each is decoded from the stored or live CMAF
//! ([`crate::media::still`]) under the origin's [`Decodes`] bound: a flood of distinct asks costs
//! CPU at a fixed rate, and past the waiting room is answered 503 with `Retry-After` at once.
//! A VOD's stills are kept in storage by (time in tenths of a second, width); a live stream's
//! newest one for as long as its keyframe is the newest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use poem::http::{header, HeaderValue, StatusCode};
use poem::{Request, Response};

use super::origin::{source, status, Carried, Source, RELAY_WAIT};
use super::ranges::in_time;
use super::relay::Kind;
use super::{authorize, Origin, Resource};
use crate::media::hls::{master::read_variants, vod::read};
use crate::media::still::{picture, Ask, Decodes, WIDTHS};
use crate::storage::vod_prefix;

/// Stills are cached by shared caches a minute: an archived VOD's stop playing within it.
const STILL_CACHE: &str = "public, max-age=60";
/// A live still is the newest picture: a second at most.
const LIVE_CACHE: &str = "public, max-age=1";
/// Stills decoded at once on a node, and how many asks may wait for a turn.
pub const DECODES_AT_ONCE: usize = 2;
pub const DECODES_WAITING: usize = 16;
/// A live stream's still is made again once older than this (at most two decodes a second per
/// stream, however many ask).
const LIVE_KEEP: Duration = Duration::from_millis(500);
/// Live stills kept at most (one per stream asked for recently).
const LIVE_KEPT: usize = 1024;

/// A VOD still's query: `time` in seconds (rounded to a tenth), `width` 16–1920.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StillQuery {
    pub tenths: u64,
    pub width: Option<u32>,
}

impl StillQuery {
    /// `None` when the query asks for neither (the stored thumbnail); an error names the field.
    pub fn parse(query: &str) -> Result<Option<StillQuery>, String> {
        let (mut time, mut width) = (None, None);
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "time" => time = Some(v.into_owned()),
                "width" => width = Some(v.into_owned()),
                _ => {}
            }
        }
        if time.is_none() && width.is_none() {
            return Ok(None);
        }
        let tenths = match time {
            None => 0,
            Some(t) => match t.parse::<f64>() {
                Ok(s) if s.is_finite() && (0.0..=1e9).contains(&s) => (s * 10.0).round() as u64,
                _ => return Err("time must be a number of seconds, 0 or more".into()),
            },
        };
        let width = match width {
            None => None,
            Some(w) => match w.parse::<u32>() {
                Ok(w) if WIDTHS.contains(&w) => Some(w),
                _ => {
                    return Err(format!(
                        "width must be an integer from {} to {}",
                        WIDTHS.start(),
                        WIDTHS.end()
                    ))
                }
            },
        };
        Ok(Some(StillQuery { tenths, width }))
    }

    pub fn seconds(&self) -> f64 {
        self.tenths as f64 / 10.0
    }
}

/// The origin's stills: the decode bound, and each live stream's newest.
pub struct Stills {
    pub decodes: Decodes,
    /// One storyboard is made at a time ([`super::storyboard`]).
    pub storyboards: tokio::sync::Mutex<()>,
    live: Mutex<HashMap<String, LiveStill>>,
}

struct LiveStill {
    jpeg: Bytes,
    at: Instant,
}

impl Default for Stills {
    fn default() -> Self {
        Stills {
            decodes: Decodes::new(DECODES_AT_ONCE, DECODES_WAITING),
            storyboards: tokio::sync::Mutex::new(()),
            live: Mutex::default(),
        }
    }
}

pub(super) fn bad_request(message: String) -> Response {
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, "no-store")
        .content_type("text/plain; charset=utf-8")
        .body(message)
}

pub(super) fn busy() -> Response {
    let mut resp = status(StatusCode::SERVICE_UNAVAILABLE, "too many thumbnails being made; retry later");
    resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

fn jpeg(bytes: Bytes, cache: &'static str) -> Response {
    Response::builder()
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, cache)
        .content_type("image/jpeg")
        .body(bytes)
}

fn storage_failed(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "stills: reading storage");
    status(StatusCode::BAD_GATEWAY, "storage unavailable")
}

/// `/vod/<id>/thumb.jpg?time=S&width=W`.
pub(super) async fn vod(req: &Request, app: &Origin, id: &str, ask: StillQuery) -> Response {
    if let Err(r) = authorize(app, req, &Resource::Vod(id)).await {
        return r.response();
    }
    let prefix = vod_prefix(id);
    let kept = format!("{prefix}/thumbs/{}-{}.jpg", ask.tenths, ask.width.unwrap_or(0));
    match in_time(&kept, app.storage.get(&kept, None)).await {
        Ok(Some(b)) => return jpeg(b, STILL_CACHE),
        Ok(None) => {}
        Err(e) => return storage_failed(e),
    }
    let read_text = |key: String| async move {
        match in_time(&key, app.storage.get(&key, None)).await {
            Ok(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Ok(None) => Err(status(StatusCode::NOT_FOUND, "not found")),
            Err(e) => Err(storage_failed(e)),
        }
    };
    let master = match read_text(format!("{prefix}/master.m3u8")).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    // The smallest rendition at least as wide as asked (the cheapest decode that needs no
    // enlarging), else the widest.
    let mut variants = read_variants(&master);
    variants.sort_by_key(|(_, w, _)| *w);
    let chosen = match ask.width {
        Some(want) => variants.iter().find(|(_, w, _)| *w >= want).or(variants.last()),
        None => variants.last(),
    };
    let Some((uri, _, _)) = chosen else { return status(StatusCode::NOT_FOUND, "no video") };
    let Some(folder) = uri.strip_suffix("/index.m3u8") else {
        return status(StatusCode::NOT_FOUND, "no video");
    };
    let text = match read_text(format!("{prefix}/{uri}")).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let Some(segments) = read(&text) else {
        return status(StatusCode::INTERNAL_SERVER_ERROR, "damaged playlist");
    };
    let total: f64 = segments.iter().map(|s| s.duration).sum();
    let at = ask.seconds();
    if at > total + 0.05 {
        return bad_request(format!("time must be at most {total:.1}, the VOD's duration"));
    }
    // The segment holding `at` (the last one for the very end), and where in it.
    let mut start = 0.0;
    let mut found = None;
    for (i, s) in segments.iter().enumerate() {
        if at < start + s.duration || i + 1 == segments.len() {
            found = Some((i, s, (at - start).max(0.0)));
            break;
        }
        start += s.duration;
    }
    let Some((index, segment, offset)) = found else { return status(StatusCode::NOT_FOUND, "no video") };
    if segment.gap {
        return status(StatusCode::NOT_FOUND, "the media at that time was lost");
    }
    let Some(turn) = app.stills.decodes.enter().await else { return busy() };
    let (init_key, segment_key) =
        (format!("{prefix}/{folder}/{}", segment.init), format!("{prefix}/{folder}/{}", segment.uri));
    let (init, data) = match (
        in_time(&init_key, app.storage.get(&init_key, None)).await,
        in_time(&segment_key, app.storage.get(&segment_key, None)).await,
    ) {
        (Ok(Some(i)), Ok(Some(d))) => (i, d),
        (Err(e), _) | (_, Err(e)) => return storage_failed(e),
        _ => return status(StatusCode::NOT_FOUND, "not found"),
    };
    let data = if text.contains("#EXT-X-KEY:METHOD=AES-128") {
        // IV: the sequence number, which starts at 0.
        match app.policies.content_key(&Resource::Vod(id), false).await {
            Ok(Some(key)) => match key.decrypt(index as u64, &data) {
                Some(clear) => Bytes::from(clear),
                None => return status(StatusCode::INTERNAL_SERVER_ERROR, "a segment does not decrypt"),
            },
            _ => return status(StatusCode::SERVICE_UNAVAILABLE, "the key is not available; retry later"),
        }
    } else {
        data
    };
    let still = Ask { at: offset, width: ask.width, height: None, raw: false };
    let made = tokio::task::spawn_blocking(move || picture(&init, &data, still)).await;
    let bytes = match made {
        Ok(Ok(b)) => Bytes::from(b),
        Ok(Err(e)) => {
            tracing::warn!(vod = %id, error = %e, "stills: no picture");
            return status(StatusCode::INTERNAL_SERVER_ERROR, "no picture could be made");
        }
        Err(e) => {
            tracing::error!(vod = %id, error = %e, "stills: the decode panicked");
            return status(StatusCode::INTERNAL_SERVER_ERROR, "no picture could be made");
        }
    };
    drop(turn);
    // Kept for the next ask; a store that does not take it costs only the next decode.
    if let Err(e) = in_time(&kept, app.storage.put(&kept, bytes.clone())).await {
        tracing::warn!(vod = %id, error = %e, "stills: keeping a thumbnail");
    }
    jpeg(bytes, STILL_CACHE)
}

/// `/live/<id>/thumb.jpg`: the stream's newest picture, made at most once a second.
pub(super) async fn live(req: &Request, app: &Origin, id: &str) -> Response {
    let channel = match source(app, req, id, Carried::Query).await {
        Ok((Source::Local(c), _)) => c,
        Ok((Source::Remote(holder), _)) => {
            let answer =
                app.relay.get(&holder, &format!("/live/{id}/thumb.jpg"), Kind::Playlist, RELAY_WAIT).await;
            if !answer.ok() || answer.content_type != "image/jpeg" {
                return status(StatusCode::BAD_GATEWAY, "the node holding the stream gave no thumbnail");
            }
            return jpeg(answer.body, LIVE_CACHE);
        }
        Err(r) => return r.response(),
    };
    let Some((init, part)) = channel.newest_pictures() else {
        return status(StatusCode::NOT_FOUND, "stream has no picture yet");
    };
    let kept = |stills: &Stills| {
        let live = stills.live.lock().unwrap_or_else(|p| p.into_inner());
        live.get(id).filter(|s| s.at.elapsed() < LIVE_KEEP).map(|s| s.jpeg.clone())
    };
    if let Some(b) = kept(&app.stills) {
        return jpeg(b, LIVE_CACHE);
    }
    let Some(turn) = app.stills.decodes.enter().await else { return busy() };
    // Another request may have made it while this one waited.
    if let Some(b) = kept(&app.stills) {
        return jpeg(b, LIVE_CACHE);
    }
    let data = part;
    let made = tokio::task::spawn_blocking(move || picture(&init, &data, Ask::LAST)).await;
    drop(turn);
    let bytes = match made {
        Ok(Ok(b)) => Bytes::from(b),
        Ok(Err(e)) => {
            tracing::warn!(stream = %id, error = %e, "stills: no live picture");
            return status(StatusCode::INTERNAL_SERVER_ERROR, "no picture could be made");
        }
        Err(e) => {
            tracing::error!(stream = %id, error = %e, "stills: the decode panicked");
            return status(StatusCode::INTERNAL_SERVER_ERROR, "no picture could be made");
        }
    };
    let mut live = app.stills.live.lock().unwrap_or_else(|p| p.into_inner());
    if live.len() >= LIVE_KEPT {
        live.retain(|_, s| s.at.elapsed() < LIVE_KEEP);
    }
    if live.len() < LIVE_KEPT {
        live.insert(id.to_string(), LiveStill { jpeg: bytes.clone(), at: Instant::now() });
    }
    drop(live);
    jpeg(bytes, LIVE_CACHE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_what_is_wrong() {
        assert_eq!(StillQuery::parse(""), Ok(None));
        assert_eq!(StillQuery::parse("token=abc"), Ok(None));
        assert_eq!(
            StillQuery::parse("time=12.34&width=320"),
            Ok(Some(StillQuery { tenths: 123, width: Some(320) }))
        );
        assert_eq!(StillQuery::parse("width=16"), Ok(Some(StillQuery { tenths: 0, width: Some(16) })));
        for bad in ["time=-1", "time=nan", "time=inf", "time=", "time=1e12"] {
            assert!(StillQuery::parse(bad).is_err_and(|e| e.starts_with("time ")), "{bad}");
        }
        for bad in ["width=15", "width=1921", "width=3.5", "width=-16", "width="] {
            assert!(StillQuery::parse(bad).is_err_and(|e| e.starts_with("width ")), "{bad}");
        }
    }
}
