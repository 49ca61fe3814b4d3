//! A VOD's storyboard (CONTRACT: Clips, downloads, thumbnails): `/vod/<id>/storyboard.vtt`, a
//! WebVTT track of one cue per 10 s whose text is a tile of `/vod/<id>/storyboard.jpg` (a
//! sprite of 160-px-wide pictures, ten to a row, `#xywh=`), for players' scrubbing previews.
//! Made once, at the first ask after the VOD completes (one storyboard at a time a node, under
//! the decode bound of [`super::stills`]), from the narrowest rendition, and kept in storage.

use bytes::Bytes;
use poem::http::{header, StatusCode};
use poem::{Request, Response};

use super::origin::status;
use super::ranges::in_time;
use super::{authorize, Origin, Resource};
use crate::media::hls::{master::read_variants, vod::read};
use crate::media::still::{jpeg_of_rgbx, picture, Ask};
use crate::storage::vod_prefix;

/// Seconds between two pictures.
const EVERY: f64 = 10.0;
const TILE_WIDTH: u32 = 160;
const COLUMNS: u32 = 10;
/// More pictures than this (a VOD of over 5.5 hours) space them further apart.
const MAX_TILES: u32 = 2000;
const CACHE: &str = "public, max-age=60";

/// `storyboard.vtt` or `storyboard.jpg` of VOD `id`.
pub(super) async fn serve(req: &Request, app: &Origin, id: &str, file: &str) -> Response {
    let grant = match authorize(app, req, &Resource::Vod(id)).await {
        Ok(grant) => grant,
        Err(r) => return r.response(),
    };
    let prefix = vod_prefix(id);
    let stored = |name: &str| {
        let key = format!("{prefix}/{name}");
        async move { in_time(&key, app.storage.get(&key, None)).await }
    };
    let mut found = match stored(file).await {
        Ok(found) => found,
        Err(e) => return unserved(e),
    };
    if found.is_none() {
        // One storyboard is made at a time here; whoever waited finds it made.
        let _one = app.stills.storyboards.lock().await;
        found = match stored(file).await {
            Ok(found) => found,
            Err(e) => return unserved(e),
        };
        if found.is_none() {
            let Some(_turn) = app.stills.decodes.enter().await else { return super::stills::busy() };
            let (vtt, jpg) = match make(app, id).await {
                Ok(made) => made,
                Err(r) => return r,
            };
            // The picture first: a track is never stored without its sprite.
            for (name, bytes) in [("storyboard.jpg", jpg.clone()), ("storyboard.vtt", vtt.clone())] {
                let key = format!("{prefix}/{name}");
                if let Err(e) = in_time(&key, app.storage.put(&key, bytes)).await {
                    tracing::warn!(vod = %id, error = %e, "storyboard: keeping it");
                }
            }
            found = Some(if file.ends_with(".vtt") { vtt } else { jpg });
        }
    }
    let Some(bytes) = found else { return status(StatusCode::NOT_FOUND, "not found") };
    let (kind, body) = if file.ends_with(".vtt") {
        // A signed session's token goes on the sprite's URL too.
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let text = match &grant.child_token {
            Some(token) => text.replace("storyboard.jpg#", &format!("storyboard.jpg?token={token}#")),
            None => text,
        };
        ("text/vtt; charset=utf-8", Bytes::from(text))
    } else {
        ("image/jpeg", bytes)
    };
    Response::builder()
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::CACHE_CONTROL, if grant.child_token.is_some() { "private, no-store" } else { CACHE })
        .content_type(kind)
        .body(body)
}

fn unserved(e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "storyboard: reading storage");
    status(StatusCode::BAD_GATEWAY, "storage unavailable")
}

/// The track and the sprite of VOD `id`, from its narrowest rendition.
async fn make(app: &Origin, id: &str) -> Result<(Bytes, Bytes), Response> {
    let prefix = vod_prefix(id);
    let get = |key: String| async move {
        match in_time(&key, app.storage.get(&key, None)).await {
            Ok(Some(b)) => Ok(b),
            Ok(None) => Err(status(StatusCode::NOT_FOUND, "not found")),
            Err(e) => Err(unserved(e)),
        }
    };
    let master = get(format!("{prefix}/master.m3u8")).await?;
    let master = String::from_utf8_lossy(&master).into_owned();
    let mut variants = read_variants(&master);
    variants.sort_by_key(|(_, w, _)| *w);
    let Some(&(uri, width, height)) = variants.first() else {
        return Err(status(StatusCode::NOT_FOUND, "no video"));
    };
    let folder = uri.trim_end_matches("/index.m3u8");
    let text = get(format!("{prefix}/{uri}")).await?;
    let text = String::from_utf8_lossy(&text).into_owned();
    let Some(segments) = read(&text) else {
        return Err(status(StatusCode::INTERNAL_SERVER_ERROR, "damaged playlist"));
    };
    let key = if text.contains("#EXT-X-KEY:METHOD=AES-128") {
        match app.policies.content_key(&Resource::Vod(id), false).await {
            Ok(Some(key)) => Some(key),
            _ => {
                return Err(status(StatusCode::SERVICE_UNAVAILABLE, "the key is not available; retry later"))
            }
        }
    } else {
        None
    };
    let duration: f64 = segments.iter().map(|s| s.duration).sum();
    let plan = Plan::new(duration, width.max(2), height.max(2));
    let mut sprite = vec![0u8; (plan.sprite_width() * plan.sprite_height() * 4) as usize];
    let mut inits: std::collections::HashMap<&str, Bytes> = Default::default();
    for tile in 0..plan.tiles {
        let at = f64::from(tile) * plan.every;
        let Some((index, offset)) = locate(&segments, at) else { continue };
        let s = &segments[index];
        if s.gap {
            continue;
        }
        if !inits.contains_key(s.init) {
            inits.insert(s.init, get(format!("{prefix}/{folder}/{}", s.init)).await?);
        }
        let init = inits.get(s.init).cloned().unwrap_or_default();
        let data = get(format!("{prefix}/{folder}/{}", s.uri)).await?;
        let data = match &key {
            Some(key) => key.decrypt(index as u64, &data).unwrap_or_default(),
            None => data.to_vec(),
        };
        let ask = Ask { at: offset, width: Some(TILE_WIDTH), height: Some(plan.tile_height), raw: true };
        let Ok(Ok(rgbx)) = tokio::task::spawn_blocking(move || picture(&init, &data, ask)).await else {
            tracing::warn!(vod = %id, tile, "storyboard: a picture was not decoded; left black");
            continue;
        };
        plan.blit(&mut sprite, tile, &rgbx);
    }
    let (w, h) = (plan.sprite_width(), plan.sprite_height());
    let jpg = tokio::task::spawn_blocking(move || jpeg_of_rgbx(sprite, w, h)).await;
    let Ok(Ok(jpg)) = jpg else {
        return Err(status(StatusCode::INTERNAL_SERVER_ERROR, "no sprite could be made"));
    };
    Ok((Bytes::from(plan.track(duration)), Bytes::from(jpg)))
}

/// The segment holding `at` and where in it.
fn locate(segments: &[crate::media::hls::vod::Listed], at: f64) -> Option<(usize, f64)> {
    let mut start = 0.0;
    for (i, s) in segments.iter().enumerate() {
        if at < start + s.duration {
            return Some((i, at - start));
        }
        start += s.duration;
    }
    None
}

/// Where a storyboard's pictures go.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    every: f64,
    tiles: u32,
    tile_height: u32,
}

impl Plan {
    fn new(duration: f64, width: u32, height: u32) -> Plan {
        let every = if duration / EVERY > f64::from(MAX_TILES) {
            (duration / f64::from(MAX_TILES) / EVERY).ceil() * EVERY
        } else {
            EVERY
        };
        let tiles = ((duration / every).ceil() as u32).clamp(1, MAX_TILES);
        let tile_height =
            ((f64::from(TILE_WIDTH) * f64::from(height) / f64::from(width) / 2.0).round() as u32 * 2).max(2);
        Plan { every, tiles, tile_height }
    }

    fn sprite_width(&self) -> u32 {
        TILE_WIDTH * self.tiles.min(COLUMNS)
    }

    fn sprite_height(&self) -> u32 {
        self.tile_height * self.tiles.div_ceil(COLUMNS)
    }

    /// Tile `tile`'s top-left corner in the sprite.
    fn corner(&self, tile: u32) -> (u32, u32) {
        ((tile % COLUMNS) * TILE_WIDTH, (tile / COLUMNS) * self.tile_height)
    }

    /// Copies the RGBx picture `rgbx` (a tile's size) into its place in `sprite`.
    fn blit(&self, sprite: &mut [u8], tile: u32, rgbx: &[u8]) {
        let (x, y) = self.corner(tile);
        let (row, stride) = (TILE_WIDTH as usize * 4, self.sprite_width() as usize * 4);
        for (r, line) in rgbx.chunks_exact(row).take(self.tile_height as usize).enumerate() {
            let at = (y as usize + r) * stride + x as usize * 4;
            if let Some(dest) = sprite.get_mut(at..at + row) {
                dest.copy_from_slice(line);
            }
        }
    }

    /// The WebVTT track: a cue per picture, the last one ending at `duration`.
    fn track(&self, duration: f64) -> String {
        let stamp = |s: f64| {
            let ms = (s * 1000.0).round() as u64;
            format!("{:02}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
        };
        let mut out = String::from("WEBVTT\n");
        for tile in 0..self.tiles {
            let (from, to) = (f64::from(tile) * self.every, (f64::from(tile + 1) * self.every).min(duration));
            let (x, y) = self.corner(tile);
            out.push_str(&format!(
                "\n{} --> {}\nstoryboard.jpg#xywh={x},{y},{TILE_WIDTH},{}\n",
                stamp(from),
                stamp(to),
                self.tile_height
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_track_covers_the_whole_vod_in_tiles_of_the_sprite() {
        let plan = Plan::new(95.0, 1280, 720);
        assert_eq!((plan.every, plan.tiles, plan.tile_height), (10.0, 10, 90));
        assert_eq!((plan.sprite_width(), plan.sprite_height()), (1600, 90));
        let track = plan.track(95.0);
        assert!(
            track.starts_with("WEBVTT\n\n00:00:00.000 --> 00:00:10.000\nstoryboard.jpg#xywh=0,0,160,90\n")
        );
        assert!(
            track.ends_with("00:01:30.000 --> 00:01:35.000\nstoryboard.jpg#xywh=1440,0,160,90\n"),
            "{track}"
        );
        let two_rows = Plan::new(101.0, 640, 360);
        assert_eq!((two_rows.tiles, two_rows.sprite_height()), (11, 180));
        assert_eq!(two_rows.corner(10), (0, 90));
        // A very long VOD spaces its pictures further apart.
        let long = Plan::new(10.0 * 3600.0, 1920, 1080);
        assert_eq!((long.every, long.tiles), (20.0, 1800));
        assert!(long.track(36_000.0).contains("09:59:40.000 --> 10:00:00.000"));
    }

    #[test]
    fn a_tile_lands_in_its_place() {
        let plan = Plan::new(25.0, 160, 2);
        assert_eq!(plan.tile_height, 2);
        let mut sprite = vec![0u8; (plan.sprite_width() * plan.sprite_height() * 4) as usize];
        plan.blit(&mut sprite, 1, &vec![7u8; 160 * 2 * 4]);
        let stride = plan.sprite_width() as usize * 4;
        assert_eq!(sprite[..640], [0u8; 640][..], "tile 0 untouched");
        assert!(
            sprite[640..1280].iter().all(|b| *b == 7)
                && sprite[stride + 640..stride + 1280].iter().all(|b| *b == 7)
        );
        assert!(sprite[1280..stride].iter().all(|b| *b == 0), "tile 2 untouched");
    }
}
