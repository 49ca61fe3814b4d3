//! The ladder's picture quality and CPU on one push, Sluice's and ffmpeg's side by side
//! (`BENCH_QUALITY=0` leaves it out). The outputs stay in `benches/out/live_capacity-quality`.
//!
//! The 20-s sample is pushed once, in real time, to a Sluice ladder stream (720p + 480p) and at
//! the same moment to ffmpeg doing the same ladder ([`super::ffmpeg_ladder`], every segment
//! kept). Sluice's 720p and 480p renditions are read as they are published: the initialization
//! section and every segment, in order (a segment missing fails the rung). Each rung of each is
//! compared with the sample's frames scaled to the rung (lanczos) by ffmpeg's `ssim` filter,
//! frame by frame from the sample frame that the output's sixth frame matches best (the output
//! may start a frame or two in, and a frame may be repeated at ffmpeg's start). Reported per rung:
//! mean SSIM (and in dB, `-10 log10(1 - SSIM)`), the frames compared, and the bitrate; and the
//! CPU each server used from 5 s to 18 s into the push, past both start-ups (Sluice's whole
//! process; the ffmpeg that received the push), in % of one core.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::common::{cpu_seconds, free_port, listening, Sluice};
use super::support::push_file_once;

/// When CPU is measured, from the pushes' start: both servers are past their start-up and the
/// pushes still run (the sample lasts 20 s).
const WINDOW: std::ops::Range<Duration> = Duration::from_secs(5)..Duration::from_secs(18);
/// What each rung is compared at.
const RUNGS: [(&str, u32, u32); 2] = [("720p", 1280, 720), ("480p", 854, 480)];

/// One rung's figures for one server.
pub struct Rung {
    pub ssim: Option<(f64, usize)>,
    pub kbps: f64,
    pub problem: Option<String>,
}

pub struct Quality {
    /// Per rung of [`RUNGS`]: (Sluice, ffmpeg).
    pub rungs: Vec<(&'static str, Rung, Rung)>,
    /// CPU over the push, % of one core: (Sluice, ffmpeg).
    pub cpu: (f64, f64),
}

/// Runs both on one push of `file`, the outputs written under `dir` (emptied first).
pub async fn measure(sluice: &Sluice, file: &Path, dir: &Path) -> Quality {
    let _ = std::fs::remove_dir_all(dir);
    let s = sluice.create_stream(serde_json::json!({"name": "quality", "qualities": ["720p", "480p"]})).await;
    let ingest = s["ingestUrl"].as_str().unwrap_or_else(|| panic!("ingestUrl in {s}")).to_string();
    let master = s["playbackUrls"]["hls"].as_str().unwrap_or_else(|| panic!("hls URL in {s}")).to_string();
    let ff_dir = dir.join("quality-ffmpeg");
    std::fs::create_dir_all(&ff_dir).expect("quality dir");
    let port = free_port();
    let mut peer = super::ffmpeg_ladder(port, "q", &ff_dir, true);
    let listening_by = Instant::now() + Duration::from_secs(10);
    while !listening(port) && Instant::now() < listening_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (sluice_pid, peer_pid) = (sluice.proc.0.id(), peer.0.id());
    let started = Instant::now();
    let mut pushers =
        [push_file_once(file, &ingest), push_file_once(file, &format!("rtmp://127.0.0.1:{port}/live/q"))];

    // Sluice's rungs as they are published, until the push has ended and 4 s more have passed.
    let renditions =
        super::fetch_master(sluice.client.clone(), master, started + Duration::from_secs(25)).await;
    let renditions = renditions.unwrap_or_default();
    let mut readers: Vec<Reader> = RUNGS
        .iter()
        .map(|(name, ..)| Reader::new(renditions.iter().find(|(n, _)| n == name).map(|(_, u)| u.clone())))
        .collect();
    let mut pushed = None;
    let mut cpu = Cpu::default();
    while pushed.is_none_or(|at: Instant| at.elapsed() < Duration::from_secs(4))
        && started.elapsed() < Duration::from_secs(60)
    {
        cpu.read(started.elapsed(), sluice_pid, peer_pid);
        for r in &mut readers {
            r.poll(&sluice.client).await;
        }
        if pushed.is_none() && pushers.iter_mut().all(|p| p.0.try_wait().ok().flatten().is_some()) {
            pushed = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let exit_by = Instant::now() + Duration::from_secs(15);
    while peer.0.try_wait().ok().flatten().is_none() && Instant::now() < exit_by {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut rungs = Vec::new();
    for ((name, w, h), reader) in RUNGS.iter().zip(readers) {
        let ours = match reader.write(&dir.join(format!("quality-sluice-{name}.mp4"))) {
            Ok(path) => judge(&path, file, *w, *h),
            Err(problem) => Rung { ssim: None, kbps: f64::NAN, problem: Some(problem) },
        };
        let theirs = judge(&ff_dir.join(format!("q_{name}.m3u8")), file, *w, *h);
        rungs.push((*name, ours, theirs));
    }
    Quality { rungs, cpu: cpu.per_core() }
}

/// Both servers' CPU seconds at the first reading inside [`WINDOW`] and at the last.
#[derive(Default)]
struct Cpu {
    first: Option<(Duration, f64, f64)>,
    last: Option<(Duration, f64, f64)>,
}

impl Cpu {
    fn read(&mut self, at: Duration, sluice: u32, peer: u32) {
        if WINDOW.contains(&at) {
            let now = (at, cpu_seconds(sluice), cpu_seconds(peer));
            self.first.get_or_insert(now);
            self.last = Some(now);
        }
    }

    /// (Sluice, ffmpeg) in % of one core over the window.
    fn per_core(&self) -> (f64, f64) {
        match (self.first, self.last) {
            (Some((t0, s0, f0)), Some((t1, s1, f1))) if t1 > t0 => {
                let secs = (t1 - t0).as_secs_f64();
                ((s1 - s0) / secs * 100.0, (f1 - f0) / secs * 100.0)
            }
            _ => (f64::NAN, f64::NAN),
        }
    }
}

/// One Sluice rendition read as it is published: its init section and its segments by number.
struct Reader {
    url: Option<String>,
    init: Option<Vec<u8>>,
    segments: std::collections::BTreeMap<u64, Vec<u8>>,
    problem: Option<String>,
}

impl Reader {
    fn new(url: Option<String>) -> Reader {
        let problem = url.is_none().then(|| "not in the master playlist".to_string());
        Reader { url, init: None, segments: Default::default(), problem }
    }

    async fn poll(&mut self, client: &reqwest::Client) {
        let Some(url) = self.url.clone() else { return };
        let Ok(text) = super::get_text(client, &url).await else { return };
        let dir = url.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
        let mut msn: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("#EXT-X-MEDIA-SEQUENCE:")?.trim().parse().ok())
            .unwrap_or(0);
        let mut after_extinf = false;
        let mut wanted = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(attrs) = line.strip_prefix("#EXT-X-MAP:") {
                if self.init.is_none() {
                    if let Some(uri) = super::attr(attrs, "URI") {
                        self.init = get_bytes(client, &format!("{dir}/{uri}")).await;
                    }
                }
            } else if line.starts_with("#EXTINF:") {
                after_extinf = true;
            } else if after_extinf && !line.is_empty() && !line.starts_with('#') {
                if !self.segments.contains_key(&msn) {
                    wanted.push((msn, format!("{dir}/{line}")));
                }
                msn += 1;
                after_extinf = false;
            }
        }
        for (n, url) in wanted {
            match get_bytes(client, &url).await {
                Some(bytes) => {
                    self.segments.insert(n, bytes);
                }
                None => self.problem = Some(format!("segment {n} did not answer")),
            }
        }
    }

    /// The rendition as one fragmented MP4 at `path`.
    fn write(self, path: &Path) -> Result<PathBuf, String> {
        if let Some(p) = self.problem {
            return Err(p);
        }
        let init = self.init.ok_or("no initialization section")?;
        let numbers: Vec<u64> = self.segments.keys().copied().collect();
        if let Some(w) = numbers.windows(2).find(|w| w[1] != w[0] + 1) {
            return Err(format!("segments {} to {} missing", w[0] + 1, w[1] - 1));
        }
        let mut all = init;
        for bytes in self.segments.into_values() {
            all.extend_from_slice(&bytes);
        }
        std::fs::write(path, all).map_err(|e| e.to_string())?;
        Ok(path.to_path_buf())
    }
}

async fn get_bytes(client: &reqwest::Client, url: &str) -> Option<Vec<u8>> {
    let r = client.get(url).send().await.ok()?;
    r.status().is_success().then_some(())?;
    r.bytes().await.ok().map(|b| b.to_vec())
}

/// `-lavfi` through ffmpeg on `out` (input 0) and `file` (input 1): the `ssim` filter's
/// per-frame lines, as (frame number from 1, All).
fn ssim_lines(out: &Path, file: &Path, graph: &str) -> Vec<(usize, f64)> {
    let Ok(o) = Command::new("ffmpeg")
        .args(["-nostdin", "-loglevel", "error", "-i"])
        .arg(out)
        .arg("-i")
        .arg(file)
        .args(["-lavfi", graph, "-f", "null", "-"])
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let field = |k: &str| l.split_whitespace().find_map(|f| f.strip_prefix(k));
            Some((field("n:")?.parse().ok()?, field("All:")?.parse().ok()?))
        })
        .collect()
}

/// Mean SSIM of `out` against `file` scaled to `w`×`h`, and its video bitrate.
fn judge(out: &Path, file: &Path, w: u32, h: u32) -> Rung {
    let reference = format!("scale={w}:{h}:flags=lanczos");
    // Where the output's sixth frame is in the sample: the best of its first 150 frames.
    let find = format!(
        "[0:v]trim=start_frame=5:end_frame=6,setpts=N/30/TB,loop=loop=149:size=1,setpts=N/30/TB[a];\
         [1:v]{reference},trim=end_frame=150,setpts=N/30/TB[r];[a][r]ssim=shortest=1:stats_file=-"
    );
    let Some(at) =
        ssim_lines(out, file, &find).into_iter().max_by(|a, b| a.1.total_cmp(&b.1)).map(|(n, _)| n)
    else {
        return Rung {
            ssim: None,
            kbps: f64::NAN,
            problem: Some(format!("{} does not decode", out.display())),
        };
    };
    // Frame `at` (from 1) of the sample is the output's sixth: the one pairs with the other
    // from there (ffmpeg may start with a repeated frame, Sluice a frame or two in).
    let (skip_out, skip_sample) = if at >= 6 { (0, at - 6) } else { (6 - at, 0) };
    let all = format!(
        "[0:v]trim=start_frame={skip_out},setpts=N/30/TB[a];[1:v]{reference},trim=start_frame={skip_sample},\
         setpts=N/30/TB[r];[a][r]ssim=shortest=1:stats_file=-"
    );
    let lines = ssim_lines(out, file, &all);
    let ssim = (!lines.is_empty())
        .then(|| (lines.iter().map(|(_, v)| v).sum::<f64>() / lines.len() as f64, lines.len()));
    Rung { ssim, kbps: video_kbps(out, skip_out, lines.len()), problem: None }
}

/// The bitrate at 30 fps of `n` video frames from the `skip`-th (no B-frames: decode order is
/// presentation order), kbit/s.
fn video_kbps(out: &Path, skip: usize, n: usize) -> f64 {
    let Ok(o) = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "v:0", "-show_entries", "packet=size"])
        .args(["-of", "default=noprint_wrappers=1:nokey=1"])
        .arg(out)
        .output()
    else {
        return f64::NAN;
    };
    let sizes: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.trim().trim_end_matches(',').parse().ok())
        .skip(skip)
        .take(n)
        .collect();
    sizes.iter().sum::<f64>() * 8.0 / (sizes.len() as f64 / 30.0) / 1000.0
}

/// Prints the figures.
pub fn print(q: &Quality) {
    let db = |s: f64| -10.0 * (1.0 - s).log10();
    println!();
    println!(
        "picture quality on one push of the 20-s sample (SSIM against the sample scaled to the rung with lanczos; \
         dB = -10 log10(1 - SSIM)):"
    );
    println!("| rung | Sluice SSIM | ffmpeg SSIM | Sluice - ffmpeg | frames | kbit/s Sluice / ffmpeg |");
    println!("|---|---|---|---|---|---|");
    for (name, ours, theirs) in &q.rungs {
        let cell = |r: &Rung| match (r.ssim, &r.problem) {
            (Some((s, _)), _) => format!("{s:.5} ({:.2} dB)", db(s)),
            (None, Some(p)) => format!("failed: {p}"),
            (None, None) => "no frames".into(),
        };
        let diff = match (ours.ssim, theirs.ssim) {
            (Some((a, _)), Some((b, _))) => format!("{:+.5}", a - b),
            _ => "-".into(),
        };
        let frames = |r: &Rung| r.ssim.map_or("-".into(), |(_, n)| n.to_string());
        println!(
            "| {name} | {} | {} | {diff} | {} / {} | {:.0} / {:.0} |",
            cell(ours),
            cell(theirs),
            frames(ours),
            frames(theirs),
            ours.kbps,
            theirs.kbps
        );
    }
    let (s, f) = q.cpu;
    println!("CPU 5-18 s into the push: Sluice {s:.1} %, ffmpeg {f:.1} % of one core ({:.2}x)", s / f);
}
