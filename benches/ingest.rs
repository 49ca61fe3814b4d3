//! `cargo bench --bench ingest`: per ingest protocol (RTMP, RTMPS, SRT), the ingest-to-part
//! latency and the CPU each passthrough push costs, in one run; and whether an SRT push through
//! 5 % packet loss still delivers every part.
//!
//! One release `sluice serve` runs with a self-signed certificate (made by openssl), so its API
//! and playback answer over HTTPS, RTMPS listens beside plain RTMP, and SRT listens too. Every
//! push is the sample file (720p30 2.5 Mbit/s H.264+AAC, keyframe every 2 s) sent in real time by
//! `ffmpeg -re -stream_loop -1 -i <file> -c copy`: FLV to `rtmp://` (the `ingestUrl` with the
//! plain RTMP port) and to `rtmps://` (the `ingestUrl`; ffmpeg does not verify the certificate),
//! MPEG-TS to `srtUrl`. Every push goes to a fresh *passthrough* stream (`"qualities":
//! ["1080p"]`, above the source, so its LL-HLS is the `source` rendition, video remuxed into CMAF
//! parts, and `audio`: no transcode).
//!
//! **Per protocol**, `BENCH_PUSHES` pushes at once. Warm-up: until every stream is `live` and
//! its `source` playlist lists a part, then 1 s. Window: `BENCH_WINDOW` seconds, over which
//! Sluice's CPU (user + system of the process with its GStreamer threads, /proc/<pid>/stat) ÷ the
//! pushes is the CPU per push, in % of one core; the 1-minute load average is read at its end
//! (other work on the machine counts against Sluice: run it on an idle machine). The CPU includes
//! serving the latency measurement below, for one stream of the N: a blocking reload and an 8-KiB
//! range per part, about six HTTPS requests a second. The pushes then stop, and the next protocol
//! starts once no stream is live.
//!
//! **Ingest-to-part latency**, on the *sender's* clock, so that whatever a protocol holds media
//! for on the way counts (SRT's receive buffer, TSBPD: 120 ms by default). For the first push of
//! each protocol:
//!
//! - *When the sender sent what*: its ffmpeg runs with `-progress pipe:1 -stats_period 0.05`;
//!   each `out_time_us` is read as it arrives and stamped with the bench's clock. `out_time` is
//!   the newest DTS ffmpeg has muxed plus that packet's duration (audio leads: one AAC frame,
//!   21 ms), so DTS `x` was sent at `x` + the least `clock − out_time` among the reports within
//!   1 s of `x` + 21 ms. The least is taken locally, so a sender that slips is followed (how much
//!   it wandered is printed on stderr; `-stream_loop` makes no jump: ffmpeg offsets each loop by
//!   the file's duration).
//! - *When each part appeared*: its `source` media playlist is followed with blocking reloads
//!   (`_HLS_msn`/`_HLS_part` of the next part, RFC 8216bis 6.2.5.2); a part appears when the
//!   first answer listing it arrives.
//! - *Which frame completes it*: each new part's `moof` is read (an HTTP range of 8 KiB): its
//!   `tfdt` and sample durations give the decode time of its last frame. `p0`'s `tfdt` (read at
//!   once: parts leave the server after a few segments) and the init segment's timescale put that
//!   on the sender's DTS timeline, on which `p0`'s first frame is the file's first video frame
//!   (its DTS less the file's start time, from ffprobe: ffmpeg without `-copyts` starts its
//!   output timeline there).
//!
//! latency(part) = when it appeared − when its last frame (in decode order) was sent. It cannot
//! be below a frame (33 ms): a muxer knows a part is complete when the next frame arrives. Median
//! and p95 over the parts that appeared in the window. Error: the send clock is good to about
//! ±20 ms (ffmpeg `-re` releases a packet once the ones before it are due, and reports every
//! 50 ms); the same for every protocol, so the differences between protocols are tighter than
//! the figures. Check: with `BENCH_SRT_LATENCY_MS=300 BENCH_SRT_LOSS=0` the SRT push through the
//! relay measures 180 ms more than SRT at libsrt's default 120 ms, as it should.
//!
//! `vs PTS end` measures the same parts from their media *end* in presentation time being due
//! at the sender (the PDT of the part's segment minus that of the first segment, media sequence
//! 0, plus the part `DURATION`s up to and including it, from the first keyframe's PTS: Sluice
//! stamps PDT as the wall time of the push's first media plus the media timestamp, so PDT
//! differences are media time differences). It is the measure of benches/live_latency, kept to
//! compare with it; it runs about 0.16 s lower and is negative for RTMP, because ffmpeg `-re`
//! sends a frame at its DTS, which with this file's B-frames is up to 0.1 s before its PTS, and
//! a part's last frame in decode order is not its last in presentation order: a part is listed
//! before its presentation end is due. `first media` is the push's first PDT minus when its first
//! keyframe was due (PTS) at the sender: near zero for RTMP, about the TSBPD latency for SRT; two
//! seconds or more would mean the first segment did not begin with the first keyframe, and `vs
//! PTS end` would be off by as much.
//!
//! **SRT under loss**: `tc netem` is not used (where the bench was written, `tc qdisc add dev lo
//! root netem loss 5%` fails: no sch_netem in the kernel; and on loopback it would also drop the
//! bench's HTTP requests and the other pushes). Instead a UDP relay in this bench (tokio,
//! 127.0.0.1:0) forwards between one ffmpeg caller and Sluice's SRT port, both ways, dropping
//! `BENCH_SRT_LOSS` % (default 5) of the datagrams in each direction at random (seeded, so runs
//! repeat), handshakes included. One push goes through it to a fresh passthrough stream (same
//! `streamid` and passphrase; ffmpeg's SRT `latency` is `BENCH_SRT_LATENCY_MS` when set, else
//! libsrt's default 120 ms; SRT uses the larger of the two peers'). After the same warm-up, over
//! `BENCH_LOSS_WINDOW` seconds (default 20): the parts published in the window must be numbered
//! without a gap (`p<n>.m4s`, +1 per part), their `DURATION`s must add up to at least 0.98 × the
//! wall time between the first and the last of them appearing, and the video frames in them (`trun`
//! sample counts of each part's `moof`, read by a range request as it appears) at least 0.98 × 30
//! fps × that duration. Printed: datagrams dropped each way, parts, gaps, the media and frame
//! ratios, this push's ingest-to-part latency (as above, through the relay), and PASS or FAIL.
//!
//! Knobs: `BENCH_PUSHES` (default 4), `BENCH_WINDOW` seconds (default 15), `BENCH_LOSS_WINDOW`
//! seconds (default 20), `BENCH_SRT_LOSS` percent (default 5), `BENCH_SRT_LATENCY_MS` (default:
//! libsrt's). `BENCH_STEPS` (e.g. "4,8,16,32,48") adds the RTMP capacity ramp beside nginx's rtmp
//! module, after the table (see [`ramp`]; nginx from `scripts/deps.sh bench`).
//! Logs: `benches/out/ingest-sluice.log` (Sluice), `benches/out/ingest-ffmpeg.log` (pushers).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use common::{
    attr, connections_to, cpu_seconds, init_timescale, load1, out_dir, parse_master, part_moof, push,
    sample_file, settle, Moof, Nginx, Proc, Sluice, TlsSluice,
};

/// The sample's frame rate.
const FPS: f64 = 30.0;
/// Media per wall time and frames per expected frame under loss, at least.
const MIN_RATIO: f64 = 0.98;
/// How long pushes may take to be live with a part listed.
const READY_DEADLINE: Duration = Duration::from_secs(40);
/// After every stream is ready, before the window.
const SETTLE: Duration = Duration::from_secs(1);
/// Send-clock reports considered around a media time (seconds either side).
const CLOCK_SPAN: f64 = 1.0;

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

// ---------------------------------------------------------------------------------------------
// Clocks

/// The bench's time origin: every time below is seconds since it (monotonic), and PDTs are
/// placed on the same scale through the wall clock read at the same moment.
fn origin() -> &'static (Instant, DateTime<Utc>) {
    static ORIGIN: OnceLock<(Instant, DateTime<Utc>)> = OnceLock::new();
    ORIGIN.get_or_init(|| (Instant::now(), Utc::now()))
}

fn now_s() -> f64 {
    origin().0.elapsed().as_secs_f64()
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// A wall-clock time on the bench's scale.
fn wall_s(t: DateTime<Utc>) -> f64 {
    seconds(t - origin().1)
}

/// Where the file's first frames fall in the sender's timeline: ffmpeg without `-copyts`
/// starts its output timeline at the file's start time, so each is the file's own time less it.
#[derive(Clone, Copy)]
struct FileTimes {
    /// PTS of the first keyframe, where the stream's first segment begins.
    keyframe_pts: f64,
    /// DTS of the same frame (B-frames: it is sent before it is presented).
    keyframe_dts: f64,
    /// One AAC frame (1024 samples): how far ffmpeg's `out_time` runs ahead of what it has sent.
    audio_frame: f64,
}

fn file_times(file: &Path) -> FileTimes {
    let probe = |args: &[&str]| {
        let out =
            Command::new("ffprobe").args(["-v", "error"]).args(args).arg(file).output().expect("ffprobe");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let first = text.lines().next().unwrap_or("").to_string();
        first.split(',').filter_map(|v| v.trim().parse::<f64>().ok()).collect::<Vec<f64>>()
    };
    let start = probe(&["-show_entries", "format=start_time", "-of", "csv=p=0"]);
    let video = probe(&[
        "-select_streams",
        "v:0",
        "-read_intervals",
        "%+#1",
        "-show_entries",
        "packet=pts_time,dts_time",
        "-of",
        "csv=p=0",
    ]);
    let rate = probe(&["-select_streams", "a:0", "-show_entries", "stream=sample_rate", "-of", "csv=p=0"]);
    let start = *start.first().expect("the file's start time");
    let (pts, dts) = match video[..] {
        [pts, dts, ..] => (pts, dts),
        _ => panic!("no first video packet in {}", file.display()),
    };
    FileTimes {
        keyframe_pts: pts - start,
        keyframe_dts: dts - start,
        audio_frame: 1024.0 / rate.first().copied().unwrap_or(48000.0),
    }
}

/// ffmpeg's progress reports: (when read, `out_time` in seconds).
type Reports = Arc<Mutex<Vec<(f64, f64)>>>;

/// When the sender sent what media time, from its progress reports.
struct SendClock {
    reports: Vec<(f64, f64)>,
    /// How far `out_time` runs ahead of the media sent (one audio frame).
    lead: f64,
}

impl SendClock {
    /// The wall time media time `m` was sent: `m` plus the least `wall − out_time` among the
    /// reports within [`CLOCK_SPAN`] of it (each report comes after the media it names was sent,
    /// so the least lag is the tightest), plus `lead`.
    fn sent_at(&self, m: f64) -> Option<f64> {
        let lag = |near: bool| {
            self.reports
                .iter()
                .filter(|(_, out)| !near || (out - m).abs() <= CLOCK_SPAN)
                .map(|(at, out)| at - out)
                .min_by(f64::total_cmp)
        };
        lag(true).or_else(|| lag(false)).map(|l| m + l + self.lead)
    }

    /// How much the sender's pace wandered between `from` and `to` (wall): the range of the least
    /// lag per second. Near zero when ffmpeg keeps real time.
    fn wander(&self, from: f64, to: f64) -> f64 {
        let mut least = std::collections::BTreeMap::<i64, f64>::new();
        for (at, out) in self.reports.iter().filter(|(at, _)| (from..=to).contains(at)) {
            let l = least.entry(at.floor() as i64).or_insert(f64::INFINITY);
            *l = l.min(at - out);
        }
        let (lo, hi) =
            least.values().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        if least.is_empty() {
            f64::NAN
        } else {
            hi - lo
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Protocols and pushers

#[derive(Clone, Copy, PartialEq)]
enum Protocol {
    Rtmp,
    Rtmps,
    Srt,
}

impl Protocol {
    const ALL: [Protocol; 3] = [Protocol::Rtmp, Protocol::Rtmps, Protocol::Srt];

    fn name(self) -> &'static str {
        match self {
            Protocol::Rtmp => "RTMP",
            Protocol::Rtmps => "RTMPS",
            Protocol::Srt => "SRT",
        }
    }

    fn format(self) -> &'static str {
        match self {
            Protocol::Rtmp | Protocol::Rtmps => "flv",
            Protocol::Srt => "mpegts",
        }
    }

    /// Where a push of `stream` goes. With TLS, `ingestUrl` is the RTMPS one; plain RTMP takes
    /// the same path and credentials on its own port.
    fn url(self, stream: &Value, rtmp_port: u16) -> String {
        let ingest = stream["ingestUrl"].as_str().expect("ingestUrl");
        match self {
            Protocol::Rtmps => ingest.to_string(),
            Protocol::Rtmp => {
                let path = ingest.find("/live/").map(|i| &ingest[i..]).expect("ingestUrl has /live/");
                format!("rtmp://127.0.0.1:{rtmp_port}{path}")
            }
            Protocol::Srt => stream["srtUrl"].as_str().expect("srtUrl").to_string(),
        }
    }
}

/// ffmpeg sending the file in real time, looping, not re-encoded; with progress reports when
/// asked. Killed when dropped.
struct Pusher {
    proc: Proc,
    reports: Option<Reports>,
}

fn pusher(file: &Path, url: &str, format: &str, progress: bool) -> Pusher {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out_dir().join("ingest-ffmpeg.log"))
        .expect("ffmpeg log");
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-nostdin", "-loglevel", "error"]);
    if progress {
        cmd.args(["-progress", "pipe:1", "-stats_period", "0.05"]);
    }
    cmd.args(["-re", "-stream_loop", "-1", "-i"])
        .arg(file)
        .args(["-c", "copy", "-f", format, url])
        .stdin(Stdio::null())
        .stdout(if progress { Stdio::piped() } else { Stdio::null() })
        .stderr(log);
    let mut child = cmd.spawn().expect("ffmpeg runs");
    let reports = child.stdout.take().map(|out| {
        let reports: Reports = Arc::default();
        let sink = reports.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let at = now_s();
                if let Some(us) = line.strip_prefix("out_time_us=").and_then(|v| v.trim().parse::<i64>().ok())
                {
                    if us >= 0 {
                        sink.lock().unwrap_or_else(|e| e.into_inner()).push((at, us as f64 / 1e6));
                    }
                }
            }
        });
        reports
    });
    Pusher { proc: Proc(child), reports }
}

impl Pusher {
    fn clock(&self, times: FileTimes) -> SendClock {
        let reports = self.reports.as_ref().map(|r| r.lock().unwrap_or_else(|e| e.into_inner()).clone());
        SendClock { reports: reports.unwrap_or_default(), lead: times.audio_frame }
    }
}

// ---------------------------------------------------------------------------------------------
// Following a media playlist

/// A part as a media playlist lists it.
struct ListedPart {
    /// `n` of its URI `p<n>.m4s`.
    number: u64,
    duration: f64,
    uri: String,
    /// Its segment's PROGRAM-DATE-TIME plus the parts before it and its own duration.
    end: Option<DateTime<Utc>>,
}

#[derive(Default)]
struct Listing {
    parts: Vec<ListedPart>,
    /// PROGRAM-DATE-TIME of media sequence 0, the push's first segment, when listed.
    first_pdt: Option<DateTime<Utc>>,
    /// (msn, part index) of the part after the newest: what a blocking reload asks for.
    next: Option<(u64, u64)>,
    /// The first `EXT-X-MAP` URI.
    map: Option<String>,
    ended: bool,
}

fn parse_media(text: &str) -> Listing {
    let mut out = Listing::default();
    let mut msn: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let (mut index, mut pdt, mut offset) = (0u64, None::<DateTime<Utc>>, 0.0);
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("#EXT-X-PROGRAM-DATE-TIME:") {
            pdt = DateTime::parse_from_rfc3339(v).ok().map(|d| d.with_timezone(&Utc));
            offset = 0.0;
            if msn == 0 && out.first_pdt.is_none() {
                out.first_pdt = pdt;
            }
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-PART:") {
            let duration: f64 = attr(attrs, "DURATION").and_then(|d| d.parse().ok()).unwrap_or(0.0);
            let uri = attr(attrs, "URI").unwrap_or("").to_string();
            let number =
                uri.rsplit('/').next().and_then(|u| u.strip_prefix('p')?.strip_suffix(".m4s")?.parse().ok());
            offset += duration;
            if let Some(number) = number {
                let end = pdt.map(|p| p + chrono::Duration::microseconds((offset * 1e6).round() as i64));
                out.parts.push(ListedPart { number, duration, uri, end });
            }
            index += 1;
            out.next = Some((msn, index));
        } else if line.starts_with("#EXTINF:") {
            if out.next == Some((msn, index)) {
                out.next = Some((msn + 1, 0));
            }
            msn += 1;
            (index, pdt, offset) = (0, None, 0.0);
        } else if let Some(attrs) = line.strip_prefix("#EXT-X-MAP:") {
            out.map = out.map.take().or_else(|| attr(attrs, "URI").map(str::to_string));
        } else if line == "#EXT-X-ENDLIST" {
            out.ended = true;
        }
    }
    out
}

/// A part seen new in a playlist answer.
struct Seen {
    number: u64,
    duration: f64,
    end: Option<DateTime<Utc>>,
    /// When the answer that first listed it arrived.
    appeared: f64,
    /// Its `moof`, read as it appeared.
    moof: Option<Moof>,
}

/// What following a playlist saw.
#[derive(Default)]
struct Followed {
    parts: Vec<Seen>,
    first_pdt: Option<DateTime<Utc>>,
    /// The track's timescale (its init segment's `mdhd`).
    timescale: Option<u32>,
    /// `tfdt` of the push's first part, `p0`.
    first_decode_time: Option<u64>,
    /// Requests that failed or were refused.
    errors: u64,
    ended: bool,
}

async fn get_text(client: &reqwest::Client, url: &str) -> Option<String> {
    let r = client.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// Follows the media playlist `url` with blocking reloads for each next part until `stop`, and
/// reads the `moof` of each new part as it appears.
async fn follow(client: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> Followed {
    let dir = url.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
    let mut seen = Followed::default();
    // The playlist answers once the push's first part is out.
    let first = loop {
        if stop.load(Ordering::Relaxed) {
            return seen;
        }
        match get_text(&client, &url).await.map(|t| parse_media(&t)) {
            Some(l) if !l.parts.is_empty() => break l,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    seen.first_pdt = first.first_pdt;
    // The anchor of the decode timeline: the timescale and where the first part starts. Parts
    // leave the server a few segments later: read them now.
    if let Some(map) = &first.map {
        let init = client.get(format!("{dir}/{map}")).send().await.ok();
        let bytes = match init {
            Some(r) if r.status().is_success() => r.bytes().await.ok(),
            _ => None,
        };
        seen.timescale = bytes.as_deref().and_then(init_timescale);
    }
    if let Some(p0) = first.parts.iter().find(|p| p.number == 0) {
        seen.first_decode_time =
            part_moof(&client, &format!("{dir}/{}", p0.uri)).await.and_then(|m| m.decode_time);
    }
    // Parts already listed are known, not timed: their moment of appearance is past.
    let mut newest = first.parts.iter().map(|p| p.number).max().unwrap_or(0);
    let mut next = first.next;
    let mut moofs = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let ask = match next {
            Some((msn, part)) => format!("{url}?_HLS_msn={msn}&_HLS_part={part}"),
            None => url.clone(),
        };
        let Some(text) = get_text(&client, &ask).await else {
            seen.errors += 1;
            next = None;
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let appeared = now_s();
        let listing = parse_media(&text);
        seen.first_pdt = seen.first_pdt.or(listing.first_pdt);
        let known = newest;
        for p in listing.parts.into_iter().filter(|p| p.number > known) {
            let (client, url) = (client.clone(), format!("{dir}/{}", p.uri));
            moofs.push(tokio::spawn(async move { part_moof(&client, &url).await }));
            newest = newest.max(p.number);
            seen.parts.push(Seen {
                number: p.number,
                duration: p.duration,
                end: p.end,
                appeared,
                moof: None,
            });
        }
        next = listing.next;
        if listing.ended {
            seen.ended = true;
            break;
        }
    }
    for (part, moof) in seen.parts.iter_mut().zip(moofs) {
        part.moof = moof.await.ok().flatten();
    }
    seen
}

/// Latency figures of one push over a window.
#[derive(Default)]
struct Latency {
    /// From the part's last frame sent, seconds, sorted.
    values: Vec<f64>,
    /// From the part's media end (presentation time) due at the sender, seconds, sorted.
    by_pts: Vec<f64>,
    /// The push's first PDT minus when its first keyframe was due at the sender.
    first_media: Option<f64>,
    problem: Option<String>,
}

/// Ingest-to-part latency of the parts of `followed` that appeared in `[from, to]` (see the
/// file's comment).
fn latency(followed: &Followed, clock: &SendClock, times: FileTimes, from: f64, to: f64) -> Latency {
    let mut out = Latency::default();
    if clock.reports.is_empty() {
        out.problem = Some("no ffmpeg progress reports".into());
        return out;
    }
    let window = followed.parts.iter().filter(|p| p.appeared >= from && p.appeared <= to);
    match (followed.timescale, followed.first_decode_time) {
        (Some(scale), Some(first)) if scale > 0 => {
            for p in window.clone() {
                let Some(moof) = &p.moof else { continue };
                let (Some(start), Some(last)) = (moof.decode_time, moof.durations.last()) else { continue };
                let total: u64 = moof.durations.iter().map(|d| u64::from(*d)).sum();
                // The last sample in decode order, on the sender's DTS timeline.
                let dts = times.keyframe_dts + (start + total - u64::from(*last)) as f64 / f64::from(scale)
                    - first as f64 / f64::from(scale);
                if let Some(sent) = clock.sent_at(dts) {
                    out.values.push(p.appeared - sent);
                }
            }
        }
        _ => out.problem = Some("p0 or the init segment unread: no decode-time anchor".into()),
    }
    if let Some(first) = followed.first_pdt {
        for p in window {
            let Some(end) = p.end else { continue };
            if let Some(sent) = clock.sent_at(times.keyframe_pts + seconds(end - first)) {
                out.by_pts.push(p.appeared - sent);
            }
        }
        out.first_media = clock.sent_at(times.keyframe_pts).map(|sent| wall_s(first) - sent);
    } else {
        out.problem.get_or_insert_with(|| "media sequence 0 never listed: no PDT anchor".into());
    }
    out.values.sort_by(f64::total_cmp);
    out.by_pts.sort_by(f64::total_cmp);
    out
}

/// On stderr: what checks the latency method (the extremes, the sender's pace, failed reloads).
fn diagnose(what: &str, l: &Latency, clock: &SendClock, followed: &Followed, from: f64, to: f64) {
    eprintln!(
        "  [{what}] latency min {} max {}; sender pace wandered {} over the window; {} playlist requests failed; \
         timescale {:?}, p0 tfdt {:?}",
        ms(l.values.first().copied().unwrap_or(f64::NAN)),
        ms(l.values.last().copied().unwrap_or(f64::NAN)),
        ms(clock.wander(from, to)),
        followed.errors,
        followed.timescale,
        followed.first_decode_time,
    );
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

// ---------------------------------------------------------------------------------------------
// Warm-up

/// The `source` media playlist of `stream`, once its master lists it.
async fn source_playlist(s: &TlsSluice, stream: &Value, until: Instant) -> Result<String, String> {
    let master = stream["playbackUrls"]["hls"].as_str().ok_or("stream has no playbackUrls.hls")?;
    let base = master.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    while Instant::now() < until {
        if let Some(text) = get_text(&s.client, master).await {
            if let Some((_, uri)) = parse_master(&text).into_iter().find(|(name, _)| name == "source") {
                return Ok(format!("{base}/{uri}"));
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{master}: no source rendition within {} s", READY_DEADLINE.as_secs()))
}

/// Waits until the stream is live and `playlist` lists a part.
async fn ready(s: &TlsSluice, stream: &Value, playlist: &str, until: Instant) -> Result<(), String> {
    let id = stream["_id"].as_str().ok_or("stream has no _id")?;
    let mut last = String::from("never answered");
    while Instant::now() < until {
        let status = s.status(id).await;
        let parts = get_text(&s.client, playlist).await.is_some_and(|t| t.contains("#EXT-X-PART:"));
        if status.as_deref() == Some("live") && parts {
            return Ok(());
        }
        last = format!("status {}, parts listed: {parts}", status.as_deref().unwrap_or("?"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("stream {id} not ready within {} s ({last})", READY_DEADLINE.as_secs()))
}

/// Starts following the first stream's `source` playlist as soon as it exists, then waits for
/// every stream to be ready. Returns the follower.
async fn warm_up(
    s: &TlsSluice,
    streams: &[Value],
    pushers: &mut [Pusher],
    stop: &Arc<AtomicBool>,
) -> Result<JoinHandle<Followed>, String> {
    let until = Instant::now() + READY_DEADLINE;
    let exited = |pushers: &mut [Pusher], e: String| {
        let gone: Vec<String> = pushers
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| p.proc.exited(&format!("pusher {i}")))
            .collect();
        if gone.is_empty() {
            e
        } else {
            format!("{e}; {}", gone.join(", "))
        }
    };
    let mut playlists = Vec::new();
    let mut follower = None;
    for stream in streams {
        let playlist = match source_playlist(s, stream, until).await {
            Ok(p) => p,
            Err(e) => {
                stop.store(true, Ordering::Relaxed);
                return Err(exited(pushers, e));
            }
        };
        if follower.is_none() {
            follower = Some(tokio::spawn(follow(s.client.clone(), playlist.clone(), stop.clone())));
        }
        playlists.push(playlist);
    }
    for (stream, playlist) in streams.iter().zip(&playlists) {
        if let Err(e) = ready(s, stream, playlist, until).await {
            stop.store(true, Ordering::Relaxed);
            return Err(exited(pushers, e));
        }
    }
    follower.ok_or_else(|| "no streams".to_string())
}

/// Ends `pushers` and waits until the server has ended their pushes.
async fn stop_pushes(s: &TlsSluice, pushers: Vec<Pusher>) {
    drop(pushers);
    if !settle(Duration::from_secs(30), async || s.live_count().await == Some(0)).await {
        eprintln!("  (streams still live 30 s after their pushers stopped)");
    }
}

// ---------------------------------------------------------------------------------------------
// Per protocol

struct Row {
    protocol: Protocol,
    pushes: usize,
    live: usize,
    alive: usize,
    /// Sluice's CPU over the window, % of one core.
    cpu: f64,
    load1: f64,
    parts: usize,
    latency: Latency,
    problem: Option<String>,
}

async fn per_protocol(
    s: &TlsSluice,
    protocol: Protocol,
    file: &Path,
    n: usize,
    window: Duration,
    times: FileTimes,
) -> Row {
    let mut streams = Vec::new();
    for i in 0..n {
        let name = format!("{}-{i}", protocol.name().to_lowercase());
        streams.push(s.create_stream(json!({"name": name, "qualities": ["1080p"]})).await);
    }
    let mut pushers: Vec<Pusher> = streams
        .iter()
        .enumerate()
        .map(|(i, st)| pusher(file, &protocol.url(st, s.rtmp), protocol.format(), i == 0))
        .collect();
    let mut row = Row {
        protocol,
        pushes: n,
        live: 0,
        alive: 0,
        cpu: f64::NAN,
        load1: f64::NAN,
        parts: 0,
        latency: Latency::default(),
        problem: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let follower = match warm_up(s, &streams, &mut pushers, &stop).await {
        Ok(f) => f,
        Err(e) => {
            row.problem = Some(e);
            stop_pushes(s, pushers).await;
            return row;
        }
    };
    tokio::time::sleep(SETTLE).await;
    let pid = s.proc.0.id();
    let (cpu0, from, t0) = (cpu_seconds(pid), now_s(), Instant::now());
    tokio::time::sleep(window).await;
    row.cpu = (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let to = now_s();
    row.load1 = load1();
    stop.store(true, Ordering::Relaxed);
    row.alive = pushers.iter_mut().map(|p| p.proc.running()).filter(|r| *r).count();
    for st in &streams {
        if s.status(st["_id"].as_str().unwrap_or("")).await.as_deref() == Some("live") {
            row.live += 1;
        }
    }
    let followed = follower.await.expect("follower");
    let clock = pushers[0].clock(times);
    row.latency = latency(&followed, &clock, times, from, to);
    diagnose(protocol.name(), &row.latency, &clock, &followed, from, to);
    let numbers: Vec<u64> =
        followed.parts.iter().filter(|p| p.appeared >= from && p.appeared <= to).map(|p| p.number).collect();
    row.parts = numbers.len();
    let gaps: u64 = numbers.windows(2).map(|w| w[1].saturating_sub(w[0] + 1)).sum();
    if gaps > 0 {
        row.problem = Some(format!("{gaps} part numbers skipped in the window"));
    }
    if followed.ended {
        row.problem = Some("the followed playlist ended".into());
    }
    stop_pushes(s, pushers).await;
    row
}

// ---------------------------------------------------------------------------------------------
// SRT under loss

#[derive(Default)]
struct RelayCounts {
    up: AtomicU64,
    up_dropped: AtomicU64,
    down: AtomicU64,
    down_dropped: AtomicU64,
}

/// A UDP relay on 127.0.0.1 between one caller and `target`, dropping `loss` (0..1) of the
/// datagrams each way. Stops when dropped.
struct Relay {
    port: u16,
    counts: Arc<RelayCounts>,
    tasks: Vec<JoinHandle<()>>,
}

impl Relay {
    async fn start(target: SocketAddr, loss: f64) -> Relay {
        let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay socket"));
        let back = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay socket"));
        back.connect(target).await.expect("relay target");
        let port = front.local_addr().expect("relay address").port();
        let counts = Arc::new(RelayCounts::default());
        let caller: Arc<Mutex<Option<SocketAddr>>> = Arc::default();
        let up = {
            let (front, back, counts, caller) = (front.clone(), back.clone(), counts.clone(), caller.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0x5e1ce);
                let mut buf = vec![0u8; 2048];
                loop {
                    let Ok((n, from)) = front.recv_from(&mut buf).await else { continue };
                    *caller.lock().unwrap_or_else(|e| e.into_inner()) = Some(from);
                    if rng.gen::<f64>() < loss {
                        counts.up_dropped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counts.up.fetch_add(1, Ordering::Relaxed);
                        let _ = back.send(&buf[..n]).await;
                    }
                }
            })
        };
        let down = {
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(0xd0e5);
                let mut buf = vec![0u8; 2048];
                loop {
                    // A connected UDP socket reports the peer's ICMP refusals as errors.
                    let Ok(n) = back.recv(&mut buf).await else { continue };
                    let Some(to) = *caller.lock().unwrap_or_else(|e| e.into_inner()) else { continue };
                    if rng.gen::<f64>() < loss {
                        counts.down_dropped.fetch_add(1, Ordering::Relaxed);
                    } else {
                        counts.down.fetch_add(1, Ordering::Relaxed);
                        let _ = front.send_to(&buf[..n], to).await;
                    }
                }
            })
        };
        Relay { port, counts, tasks: vec![up, down] }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

struct LossResult {
    loss: f64,
    latency_ms: Option<u32>,
    /// (passed, dropped) each way.
    up: (u64, u64),
    down: (u64, u64),
    parts: usize,
    first_part: Option<u64>,
    last_part: Option<u64>,
    gaps: u64,
    media_ratio: f64,
    frames_ratio: f64,
    frames_unread: usize,
    latency: Latency,
    problem: Option<String>,
}

impl LossResult {
    fn passed(&self) -> bool {
        self.problem.is_none()
            && self.parts >= 2
            && self.gaps == 0
            && self.media_ratio >= MIN_RATIO
            && self.frames_ratio >= MIN_RATIO
    }
}

async fn srt_under_loss(
    s: &TlsSluice,
    file: &Path,
    window: Duration,
    loss: f64,
    latency_ms: Option<u32>,
    times: FileTimes,
) -> LossResult {
    let stream = s.create_stream(json!({"name": "srt-loss", "qualities": ["1080p"]})).await;
    let srt_url = stream["srtUrl"].as_str().expect("srtUrl");
    let authority = srt_url.trim_start_matches("srt://").split('?').next().expect("srtUrl host:port");
    let target: SocketAddr = authority.parse().expect("srtUrl names 127.0.0.1:<port>");
    let relay = Relay::start(target, loss).await;
    let mut url = srt_url.replacen(authority, &format!("127.0.0.1:{}", relay.port), 1);
    if let Some(ms) = latency_ms {
        // ffmpeg's srt `latency` is in microseconds.
        url.push_str(&format!("&latency={}", u64::from(ms) * 1000));
    }
    let mut pushers = vec![pusher(file, &url, "mpegts", true)];
    let mut out = LossResult {
        loss,
        latency_ms,
        up: (0, 0),
        down: (0, 0),
        parts: 0,
        first_part: None,
        last_part: None,
        gaps: 0,
        media_ratio: 0.0,
        frames_ratio: 0.0,
        frames_unread: 0,
        latency: Latency::default(),
        problem: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let follower = match warm_up(s, std::slice::from_ref(&stream), &mut pushers, &stop).await {
        Ok(f) => f,
        Err(e) => {
            out.problem = Some(e);
            stop_pushes(s, pushers).await;
            return out;
        }
    };
    tokio::time::sleep(SETTLE).await;
    let from = now_s();
    tokio::time::sleep(window).await;
    let to = now_s();
    stop.store(true, Ordering::Relaxed);
    let followed = follower.await.expect("follower");
    if let Some(gone) = pushers[0].proc.exited("the SRT pusher") {
        out.problem = Some(gone);
    } else if followed.ended {
        out.problem = Some("the playlist ended".into());
    }
    let c = &relay.counts;
    out.up = (c.up.load(Ordering::Relaxed), c.up_dropped.load(Ordering::Relaxed));
    out.down = (c.down.load(Ordering::Relaxed), c.down_dropped.load(Ordering::Relaxed));
    let clock = pushers[0].clock(times);
    out.latency = latency(&followed, &clock, times, from, to);
    diagnose("SRT under loss", &out.latency, &clock, &followed, from, to);

    // The parts published in the window; the one before the first is the reference for wall
    // time, so the media measured is that published between two moments of appearance.
    let in_window: Vec<usize> =
        (0..followed.parts.len()).filter(|&i| (from..=to).contains(&followed.parts[i].appeared)).collect();
    out.parts = in_window.len();
    if let (Some(&a), Some(&b)) = (in_window.first(), in_window.last()) {
        let parts = &followed.parts;
        out.first_part = Some(parts[a].number);
        out.last_part = Some(parts[b].number);
        let reference = a.saturating_sub(1);
        out.gaps = parts[reference..=b].windows(2).map(|w| w[1].number.saturating_sub(w[0].number + 1)).sum();
        let span = &parts[reference + 1..=b];
        let media: f64 = span.iter().map(|p| p.duration).sum();
        let wall = parts[b].appeared - parts[reference].appeared;
        out.media_ratio = if wall > 0.0 && reference < a { media / wall } else { 0.0 };
        let in_parts: f64 = parts[a..=b].iter().map(|p| p.duration).sum();
        let mut frames = 0u64;
        for p in &parts[a..=b] {
            match &p.moof {
                Some(m) => frames += m.samples,
                None => out.frames_unread += 1,
            }
        }
        out.frames_ratio = frames as f64 / (FPS * in_parts);
    }
    stop_pushes(s, pushers).await;
    drop(relay);
    out
}

// ---------------------------------------------------------------------------------------------
// Report

fn ms(v: f64) -> String {
    if v.is_finite() {
        format!("{:.0} ms", v * 1000.0)
    } else {
        "-".into()
    }
}

fn print_row(r: &Row) {
    let l = &r.latency;
    println!(
        "  {:<8} | {:>3}/{:<3} {:>4} | {:>8.1} %  {:>7.1} % | {:>8} {:>8} {:>6} | {:>10} | {:>11} | {:>5.2}",
        r.protocol.name(),
        r.live,
        r.pushes,
        if r.live == r.pushes && r.alive == r.pushes { "ok" } else { "FAIL" },
        r.cpu,
        r.cpu / r.pushes as f64,
        ms(percentile(&l.values, 0.5)),
        ms(percentile(&l.values, 0.95)),
        l.values.len(),
        ms(percentile(&l.by_pts, 0.5)),
        l.first_media.map_or("-".into(), |f| format!("{:+.0} ms", f * 1000.0)),
        r.load1,
    );
    for p in [&r.problem, &l.problem].into_iter().flatten() {
        println!("             {p}");
    }
    if l.values.first().is_some_and(|v| *v <= 0.0) {
        println!("             a latency <= 0: the sender's clock and the parts are not aligned");
    }
}

fn print_loss(r: &LossResult) {
    let srt_latency = r.latency_ms.map_or("libsrt's default 120 ms".to_string(), |m| format!("{m} ms"));
    println!(
        "SRT with {:.0} % loss each way (UDP relay in the bench; SRT latency {srt_latency}), one passthrough push:",
        r.loss * 100.0
    );
    let pct = |(passed, dropped): (u64, u64)| 100.0 * dropped as f64 / (passed + dropped).max(1) as f64;
    println!(
        "  datagrams dropped: caller->Sluice {} of {} ({:.1} %), Sluice->caller {} of {} ({:.1} %)",
        r.up.1,
        r.up.0 + r.up.1,
        pct(r.up),
        r.down.1,
        r.down.0 + r.down.1,
        pct(r.down)
    );
    let range = match (r.first_part, r.last_part) {
        (Some(a), Some(b)) => format!(" (p{a}..p{b})"),
        _ => String::new(),
    };
    println!(
        "  parts {}{range}, gaps {}, media {:.3} x wall time, frames {:.3} x {FPS} fps{}",
        r.parts,
        r.gaps,
        r.media_ratio,
        r.frames_ratio,
        if r.frames_unread > 0 { format!(" ({} parts unread)", r.frames_unread) } else { String::new() }
    );
    println!(
        "  part latency median {}, p95 {} ({} parts; vs PTS end median {}); first media {}",
        ms(percentile(&r.latency.values, 0.5)),
        ms(percentile(&r.latency.values, 0.95)),
        r.latency.values.len(),
        ms(percentile(&r.latency.by_pts, 0.5)),
        r.latency.first_media.map_or("-".into(), |f| format!("{:+.0} ms", f * 1000.0)),
    );
    for p in [&r.problem, &r.latency.problem].into_iter().flatten() {
        println!("  {p}");
    }
    println!(
        "  {}: every part delivered = no gap, media >= {MIN_RATIO} x wall time, frames >= {MIN_RATIO} x {FPS} fps",
        if r.passed() { "PASS" } else { "FAIL" }
    );
}

fn main() {
    origin();
    let pushes: usize = knob("BENCH_PUSHES", 4).max(1);
    let window = Duration::from_secs(knob("BENCH_WINDOW", 15));
    let loss_window = Duration::from_secs(knob("BENCH_LOSS_WINDOW", 20));
    let loss = knob("BENCH_SRT_LOSS", 5.0_f64).clamp(0.0, 100.0) / 100.0;
    let srt_latency: Option<u32> =
        std::env::var("BENCH_SRT_LATENCY_MS").ok().and_then(|v| v.trim().parse().ok());
    let file = sample_file();
    let times = file_times(&file);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());

    let log = out_dir().join("ingest-sluice.log");
    let mut sluice = rt.block_on(TlsSluice::start(&[], log));
    println!(
        "ingest bench: {pushes} passthrough pushes per protocol of a 720p30 2.5 Mbit/s H.264+AAC file \
         (ffmpeg -re -stream_loop -1 -c copy), {}-s windows, release build, {cores} CPUs",
        window.as_secs()
    );
    println!(
        "CPU in % of one core. latency: part listed (blocking reload) - its last frame sent, on the \
         sender's clock; vs PTS end: - its media end due at the sender instead (frames leave ffmpeg -re \
         at their DTS, ~0.1 s before that); first media: Sluice's first PDT - first keyframe due"
    );
    println!(
        "  protocol | pushes live | CPU total  CPU/push | latency median      p95  parts | vs PTS end | first media | load1"
    );
    let mut rows = Vec::new();
    for protocol in Protocol::ALL {
        let row = rt.block_on(per_protocol(&sluice, protocol, &file, pushes, window, times));
        print_row(&row);
        rows.push(row);
    }
    println!();
    let lossy = rt.block_on(srt_under_loss(&sluice, &file, loss_window, loss, srt_latency, times));
    print_loss(&lossy);
    if let Some(gone) = sluice.proc.exited("sluice serve") {
        println!("{gone} (log: {})", sluice.log.display());
    }
    drop(sluice);

    let steps: Vec<usize> = std::env::var("BENCH_STEPS")
        .unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|n| *n > 0)
        .collect();
    if !steps.is_empty() {
        println!();
        ramp(&rt, &file, &steps, Duration::from_secs(knob("BENCH_RAMP_WINDOW", 10)));
    }
}

// ---------------------------------------------------------------------------------------------
// The RTMP capacity ramp beside nginx-rtmp (`BENCH_STEPS`)

struct Round {
    alive: usize,
    live: usize,
    cpu_percent: f64,
}

/// Pushes `urls` (FLV) for a warm-up and the window; `cpu` reads the server's CPU seconds.
async fn round(
    file: &Path,
    urls: &[String],
    window: Duration,
    cpu: impl Fn() -> f64,
    live_count: impl AsyncFn() -> usize,
) -> Round {
    let mut pushers: Vec<Proc> = urls.iter().map(|u| push(file, u)).collect();
    // A fixed warm-up, the same for both servers, so that connection setup is not measured.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu0, t0) = (cpu(), Instant::now());
    tokio::time::sleep(window).await;
    let cpu_percent = (cpu() - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let alive = pushers.iter_mut().map(Proc::running).filter(|r| *r).count();
    let live = live_count().await;
    drop(pushers);
    // The next round starts once the server has ended every push of this one.
    if !settle(Duration::from_secs(30), async || live_count().await == 0).await {
        eprintln!("  (pushes still open 30 s after their pushers stopped)");
    }
    Round { alive, live, cpu_percent }
}

/// How many concurrent 2.5 Mbit/s RTMP pushes one Sluice accepts and keeps live, and the CPU
/// each costs, beside nginx's rtmp module (Debian's libnginx-mod-rtmp) receiving the same pushes
/// in the same run. For each step, Sluice and then nginx receive N pushes
/// (`ffmpeg -re -stream_loop -1 -c copy`); after a 3-s warm-up the server's CPU is read from
/// /proc over the window (`BENCH_RAMP_WINDOW`, default 10 s), and a push counts as kept live when
/// its ffmpeg still sends at the end (and, for Sluice, its stream is `live`). Sluice runs ingest
/// alone: streams without `llhls` get no transcode or packaging, so this is RTMP parsing and the
/// GStreamer ingest pipeline (flvdemux, h264parse, aacparse) per push.
fn ramp(rt: &tokio::runtime::Runtime, file: &Path, steps: &[usize], window: Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sluice = rt.block_on(Sluice::start(&[("SLUICE_RTMP_MAX_PER_IP", "1000".to_string())]));
    let max = steps.iter().copied().max().unwrap_or(0);
    let ingest_urls: Vec<String> = rt.block_on(async {
        let mut urls = Vec::new();
        for i in 0..max {
            let body = json!({"name": format!("push-{i}"), "protocols": ["rtsp"]});
            let s = sluice.create_stream(body).await;
            urls.push(s["ingestUrl"].as_str().expect("ingestUrl").to_string());
        }
        urls
    });
    let (api, key, client) = (sluice.api.clone(), sluice.key.clone(), sluice.client.clone());
    // nginx with the rtmp module relaying only (no HLS), two workers like Sluice's two cores.
    let nginx = Nginx::start(dir.path(), None);
    let nginx_port = nginx.rtmp;
    println!(
        "RTMP capacity ramp: 2.5 Mbit/s H.264+AAC pushes (ffmpeg -c copy), ingest only, {}-s windows",
        window.as_secs()
    );
    println!("  pushes | Sluice live  CPU total  CPU/push | nginx-rtmp alive  CPU total  CPU/push");
    let (mut sluice_max, mut nginx_max) = (0, 0);
    let (mut sluice_cpu_at, mut nginx_cpu_at) = (0.0, 0.0);
    let sluice_pid = sluice.proc.0.id();
    for &n in steps {
        let s = rt.block_on(round(
            file,
            &ingest_urls[..n],
            window,
            || cpu_seconds(sluice_pid),
            async || {
                let resp =
                    client.get(format!("{api}/streams?status=live&limit=1")).bearer_auth(&key).send().await;
                match resp {
                    Ok(r) => {
                        r.json::<Value>().await.ok().and_then(|v| v["total"].as_u64()).unwrap_or(0) as usize
                    }
                    Err(_) => 0,
                }
            },
        ));
        let nginx_urls: Vec<String> =
            (0..n).map(|i| format!("rtmp://127.0.0.1:{nginx_port}/live/push-{i}")).collect();
        // nginx has no API to ask: its open pushes are its established RTMP connections.
        let g = rt.block_on(round(
            file,
            &nginx_urls,
            window,
            || nginx.cpu_seconds(),
            async || connections_to(nginx_port),
        ));
        if s.alive == n && s.live == n {
            sluice_max = n;
            sluice_cpu_at = s.cpu_percent / n as f64;
        }
        if g.alive == n {
            nginx_max = n;
            nginx_cpu_at = g.cpu_percent / n as f64;
        }
        println!(
            "  {n:>6} | {:>5}/{n:<4} {:>7.1} %  {:>6.2} % | {:>10}/{n:<4} {:>7.1} %  {:>6.2} %",
            s.live,
            s.cpu_percent,
            s.cpu_percent / n as f64,
            g.alive,
            g.cpu_percent,
            g.cpu_percent / n as f64
        );
    }
    println!(
        "  kept live: Sluice {sluice_max}, nginx-rtmp {nginx_max} (of the steps tried); CPU per push at that load: \
         Sluice {sluice_cpu_at:.2} %, nginx-rtmp {nginx_cpu_at:.2} % (ratio {:.1}x)",
        if nginx_cpu_at > 0.0 { sluice_cpu_at / nginx_cpu_at } else { f64::NAN }
    );
}
