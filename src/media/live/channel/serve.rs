//! The read side of a channel: the master and media playlists (a blocking request waits for its
//! part, RFC 8216bis 6.2.5.2) and the files they list. Every lookup holds `state` only to copy
//! out what it answers; the DVR folder is read after the lock is released.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::{Channel, Kind, Miss, PlaylistQuery};
use crate::media::hls::live::{RenditionReport, Segment, Wait};
use crate::media::hls::master::{render_master, AudioRendition, Variant};
use crate::media::live::ladder;

impl Channel {
    /// The master playlist, once every rendition holds a complete segment and knows its codec:
    /// a media playlist it lists is never empty (hls.js's `levelEmptyError`), and the bandwidth
    /// it gives is measured on whole segments.
    pub fn master(&self) -> Option<String> {
        let s = self.lock();
        let mut variants = Vec::new();
        let mut audio = None;
        for (name, r) in &s.renditions {
            // A rendition an earlier push had and this one does not feed is left out.
            if r.playlist.is_ended() && !s.ended {
                continue;
            }
            r.playlist.segments().next()?;
            let codec = r.codec.clone()?;
            match r.kind {
                Kind::Audio { channels } => {
                    let uri = format!("{}/{name}/index.m3u8", self.session);
                    audio = Some(AudioRendition { uri, codec, channels });
                }
                Kind::Video { width, height, kbps, frame_rate } => {
                    let configured = kbps.map_or(0.0, |k| f64::from(k) * 1000.0 * 1.1);
                    let bandwidth = configured.max(r.peak_bps).round() as u64;
                    variants.push(Variant {
                        uri: format!("{}/{name}/index.m3u8", self.session),
                        bandwidth,
                        width,
                        height,
                        codec,
                        frame_rate,
                    });
                }
            }
        }
        if variants.is_empty() {
            return None;
        }
        let audio_bps = s
            .renditions
            .get(ladder::AUDIO)
            .map(|r| r.peak_bps)
            .filter(|_| audio.is_some())
            .map_or(0, |bps| (bps.max(ladder::AUDIO_KBPS_GUESS as f64 * 1000.0)).round() as u64);
        for v in &mut variants {
            v.bandwidth += audio_bps;
        }
        Some(render_master(&variants, audio.as_ref()))
    }

    /// A media playlist, now, or `None` when the request must wait (blocking reload). Rendered
    /// once per version of the channel: a reload between two changes shares the same bytes.
    fn try_playlist(&self, name: &str, q: PlaylistQuery) -> Result<Option<Rendered>, Miss> {
        let mut s = self.lock();
        // Read under the state lock, which every change holds while it bumps the version: the
        // version read is the state's, so a rendering kept under it is current.
        let version = *self.version.borrow();
        let slot = usize::from(q.skip);
        {
            let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
            // Held until it lists a complete segment: players treat a playlist of parts only as
            // empty (hls.js: `levelEmptyError`).
            if r.playlist.segments().next().is_none() && !r.playlist.is_ended() {
                return Ok(None);
            }
            if let Some(msn) = q.msn {
                match r.playlist.wait_for(msn, q.part) {
                    Wait::Ready => {}
                    Wait::Hold => return Ok(None),
                    Wait::TooFarAhead => return Err(Miss::TooFarAhead),
                }
            }
            if let Some(hit) = r.rendered[slot].as_ref().filter(|c| c.version == version) {
                return Ok(Some(hit.clone()));
            }
        }
        let reports: Vec<RenditionReport> = s
            .renditions
            .iter()
            .filter(|(other, _)| other.as_str() != name)
            .filter_map(|(other, o)| o.playlist.report(&format!("../{other}/index.m3u8")))
            .collect();
        let r = s.renditions.get_mut(name).ok_or(Miss::NotFound)?;
        let rendered = Rendered::new(version, r.playlist.render(q.skip, &reports));
        r.rendered[slot] = Some(rendered.clone());
        Ok(Some(rendered))
    }

    /// A media playlist; a blocking request (`_HLS_msn`/`_HLS_part`) waits until the playlist
    /// has what it asks for, up to `timeout` (then 503 per RFC 8216bis 6.2.5.2's "three times
    /// the target duration").
    ///
    /// The answer says whether the request was held until its part came ([`Rendered::held`]):
    /// answered by any try after the first.
    pub async fn playlist(
        &self,
        name: &str,
        q: PlaylistQuery,
        timeout: Duration,
    ) -> Result<Option<Rendered>, Miss> {
        let mut tries = 0;
        let answer = self
            .wait(timeout, || {
                tries += 1;
                self.try_playlist(name, q)
            })
            .await?;
        Ok(answer.map(|r| Rendered { held: tries > 1, ..r }))
    }

    /// The master playlist, waiting up to `timeout` for the first media.
    pub async fn master_waiting(&self, timeout: Duration) -> Option<String> {
        self.wait(timeout, || Ok(self.master())).await.ok().flatten()
    }

    /// A file of a rendition: `init<g>.mp4`, `p<n>.m4s` (a part; the next part is waited for:
    /// the preload hint) or `s<msn>.m4s` (a segment, from memory or the DVR folder).
    pub async fn file(&self, name: &str, file: &str, timeout: Duration) -> Result<Bytes, Miss> {
        if let Some(msn) = number(file, "s", ".m4s") {
            let (in_memory, listed, dir) = {
                let s = self.lock();
                let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
                let listed = r.playlist.segments().any(|seg| seg.msn == msn);
                (r.segments.get(&msn).cloned(), listed, self.config.dvr.as_ref().map(|(_, d)| d.join(name)))
            };
            match in_memory {
                Some(Stored::Whole(b)) => return Ok(b),
                Some(Stored::Parts(parts)) => {
                    // Joined outside the lock, kept whole for the next viewer.
                    let b = Stored::join(&parts);
                    let mut s = self.lock();
                    if let Some(seg) = s.renditions.get_mut(name).and_then(|r| r.segments.get_mut(&msn)) {
                        *seg = Stored::Whole(b.clone());
                    }
                    return Ok(b);
                }
                None => {}
            }
            // Older DVR segments are read back from disk while the playlist lists them.
            return match dir {
                Some(dir) if listed => {
                    tokio::fs::read(dir.join(file)).await.map(Bytes::from).map_err(|_| Miss::NotFound)
                }
                _ => Err(Miss::NotFound),
            };
        }
        let lookup = || -> Result<Option<Bytes>, Miss> {
            let s = self.lock();
            let r = s.renditions.get(name).ok_or(Miss::NotFound)?;
            if let Some(g) = number(file, "init", ".mp4") {
                // The next push's section, hinted while the publisher is away or while the
                // slate hands over to it (the slate still feeds then): held until a push brings
                // it (or the request's time runs out). Answered 404 at once in the hand-over,
                // shaka in low-latency mode, which loads a hinted section early, reported it.
                let named = r.playlist.map_hint() == Some(file);
                let hinted = g == u64::from(s.generation) + 1 && (!s.live || named) && !r.playlist.is_ended();
                if g > u64::from(s.generation) && !hinted {
                    return Err(Miss::NotFound);
                }
                return Ok(r.inits.get(&(g as u32)).cloned());
            }
            let n = number(file, "p", ".m4s").ok_or(Miss::NotFound)?;
            if let Some((_, b)) = r.parts.iter().find(|(k, _)| *k == n) {
                return Ok(Some(b.clone()));
            }
            // The hinted part (and a couple past it) is held until it exists.
            if n >= r.next_part && n < r.next_part + 3 && !r.playlist.is_ended() {
                return Ok(None);
            }
            Err(Miss::NotFound)
        };
        match self.wait(timeout, lookup).await {
            Ok(Some(b)) => Ok(b),
            Ok(None) => Err(Miss::NotFound),
            Err(e) => Err(e),
        }
    }

    /// The newest pictures, clear, with their initialization section: the parts from the newest
    /// one that starts with a keyframe to the newest one, joined, of the first video rendition
    /// (by name) that is not `source` and has one, else of `source` (whose keyframes are the
    /// publisher's, seconds apart). Its last picture is the live edge. For a still of it.
    pub fn newest_pictures(&self) -> Option<(Bytes, Bytes)> {
        let s = self.lock();
        let mut names: Vec<&String> = s
            .renditions
            .iter()
            .filter(|(_, r)| matches!(r.kind, Kind::Video { .. }) && !r.playlist.is_ended())
            .map(|(n, _)| n)
            .collect();
        names.sort_by_key(|n| n.as_str() == ladder::SOURCE);
        names.into_iter().find_map(|name| {
            let r = s.renditions.get(name)?;
            let open = r
                .playlist
                .open_parts()
                .iter()
                .rev()
                .map(|p| (p, r.playlist.next_msn(), r.playlist.init_uri()));
            let closed = r
                .playlist
                .segments()
                .rev()
                .flat_map(|seg| seg.parts.iter().rev().map(move |p| (p, seg.msn, seg.init_uri.as_str())));
            // Newest first, back to the newest keyframe.
            let mut taken = Vec::new();
            for (part, msn, init) in open.chain(closed) {
                taken.push((part, msn, init));
                if part.independent {
                    break;
                }
            }
            let &(first, _, init) = taken.last()?;
            if !first.independent || taken.len() > 64 {
                return None;
            }
            let init = r.inits.get(&(number(init, "init", ".mp4")? as u32))?.clone();
            let mut joined = Vec::new();
            for (part, msn, _) in taken.into_iter().rev() {
                let n = number(&part.uri, "p", ".m4s")?;
                let data = &r.parts.iter().find(|(k, _)| *k == n)?.1;
                match &self.config.key {
                    Some(key) => joined.extend_from_slice(&key.decrypt(msn, data)?),
                    None => joined.extend_from_slice(data),
                }
            }
            Some((init, Bytes::from(joined)))
        })
    }

    /// What a clip of the DVR window reads: each rendition's name, whether it is video, and its
    /// closed segments (the DVR window's included) with their dates and sections.
    pub fn closed_segments(&self) -> Vec<(String, bool, Vec<Segment>)> {
        let s = self.lock();
        s.renditions
            .iter()
            .filter(|(_, r)| !r.playlist.is_ended() || s.ended)
            .map(|(n, r)| {
                (n.clone(), matches!(r.kind, Kind::Video { .. }), r.playlist.segments().cloned().collect())
            })
            .collect()
    }

    /// The instants every video rendition holds in closed segments: from the latest first
    /// segment's date to the earliest end of a last one. `None` without dated segments.
    pub fn dvr_window(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let mut window: Option<(DateTime<Utc>, DateTime<Utc>)> = None;
        for (_, video, segments) in self.closed_segments() {
            let (Some(first), Some(last)) = (segments.first(), segments.last()) else { continue };
            if !video {
                continue;
            }
            let from = first.program_date_time?;
            let to =
                last.program_date_time? + chrono::Duration::milliseconds((last.duration * 1000.0) as i64);
            window = Some(match window {
                Some((a, b)) => (a.max(from), b.min(to)),
                None => (from, to),
            });
        }
        window.filter(|(a, b)| a < b)
    }

    /// File `file` of rendition `name` (an initialization section, or segment `msn`), clear:
    /// for a clip.
    pub async fn clear_file(&self, name: &str, file: &str, msn: Option<u64>) -> Option<Bytes> {
        let data = self.file(name, file, Duration::ZERO).await.ok()?;
        match (&self.config.key, msn) {
            (Some(key), Some(msn)) => key.decrypt(msn, &data).map(Bytes::from),
            _ => Some(data),
        }
    }

    /// Runs `try_now` until it gives an answer (`Some`), an error, or `timeout` passes
    /// (`Ok(None)`). Woken by every change of the channel, never by polling.
    pub(super) async fn wait<T>(
        &self,
        timeout: Duration,
        mut try_now: impl FnMut() -> Result<Option<T>, Miss>,
    ) -> Result<Option<T>, Miss> {
        // Most requests are answered at once: no subscription (two counters shared by every
        // thread) and no clock read for them. One that must wait subscribes and tries again
        // before it waits, so a change between the two tries is not missed.
        if let Some(v) = try_now()? {
            return Ok(Some(v));
        }
        let mut rx = self.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Some(v) = try_now()? {
                return Ok(Some(v));
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Ok(None),
            }
        }
    }
}

/// `<prefix><number><suffix>` → number.
fn number(file: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = file.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 18 {
        return None;
    }
    digits.parse().ok()
}

/// A media playlist rendered once for a version of its channel, with where its URIs end (a
/// signed session's token is spliced in there).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    version: u64,
    pub text: Bytes,
    pub uri_ends: Arc<[crate::media::hls::uris::UriEnd]>,
    /// The blocking request it answers was held until its part came: the answer is the one
    /// every request for that part gets as the part appears, which caches may keep. One
    /// answered at once named a part that was there already, as video.js asks after a segment
    /// that closed with no part after it (a push that ended, the slate's hand-over), again and
    /// again until the next part comes: a kept answer would hide every newer part from it.
    pub held: bool,
}

impl Rendered {
    pub fn new(version: u64, text: String) -> Rendered {
        let uri_ends = crate::media::hls::uris::ends(&text).into();
        Rendered { version, text: Bytes::from(text), uri_ends, held: false }
    }
}

impl std::ops::Deref for Rendered {
    type Target = str;

    fn deref(&self) -> &str {
        std::str::from_utf8(&self.text).unwrap_or_default()
    }
}

/// A complete segment in memory: its bytes, or the parts it is made of when nothing took it
/// whole as it closed (no recording, DVR or encryption), joined when a viewer first asks for it.
/// Most segments of a live stream are never asked for whole (LL-HLS players take parts), and
/// joining each as it closed cost a copy and a fresh allocation's page faults, about 5 % of what
/// a passthrough push cost (docs/live-ingest.md).
#[derive(Clone)]
pub(super) enum Stored {
    Whole(Bytes),
    Parts(Vec<Bytes>),
}

impl Stored {
    pub(super) fn join(parts: &[Bytes]) -> Bytes {
        let mut all = Vec::with_capacity(parts.iter().map(Bytes::len).sum());
        for c in parts {
            all.extend_from_slice(c);
        }
        Bytes::from(all)
    }
}
