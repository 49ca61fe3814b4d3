//! Media for tests and benches: clips from `media-fixtures/make.sh` (made once into its cache)
//! and publishers pushing to an ingest URL. Every ffmpeg recipe is in that script; this module
//! only names what it asks for.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::Killed;

/// `media-fixtures/make.sh`.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("media-fixtures/make.sh")
}

/// The clip `name` (see the names at the top of `media-fixtures/make.sh`), made on first use
/// into the fixture cache; returns its path. Callers must not modify it: copy it first
/// ([`clip_copy`]).
pub fn clip(name: &str) -> PathBuf {
    // Tests of one binary ask for the same clips at once: one maker at a time keeps them from
    // encoding the same file twice on a small machine.
    static MAKING: Mutex<()> = Mutex::new(());
    let _one = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("bash")
        .arg(script())
        .args(["clip", name])
        .stdin(Stdio::null())
        .output()
        .expect("bash runs media-fixtures/make.sh");
    assert!(
        out.status.success(),
        "media-fixtures/make.sh clip {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The name of a VOD test clip: lavfi `source` (`testsrc`, `testsrc2`) `size` at `rate` fps,
/// `seconds` long, H.264 + AAC in MP4; `None` for the tone alone.
pub fn vod_clip_name(video: Option<(&str, &str, u32)>, seconds: u32) -> String {
    match video {
        Some((source, size, rate)) => format!("vod-{source}-{size}-{rate}fps-{seconds}s.mp4"),
        None => format!("vod-audio-{seconds}s.mp4"),
    }
}

/// A copy of the clip `name` at `dir/file` (the test may truncate or rewrite it).
pub fn clip_copy(name: &str, dir: &Path, file: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::copy(clip(name), &path).expect("copy the clip");
    path
}

/// A publisher: ffmpeg encoding a generated source in real time to `url`. `video` is a lavfi
/// source (`testsrc=size=320x240:rate=15`), encoded as 4:2:0 H.264 with a keyframe every `gop`
/// frames, with a 44.1 kHz AAC tone; `extra` adds output options (bitrates).
pub fn ffmpeg_push(url: &str, video: &str, gop: u32, extra: &[&str]) -> Killed {
    ffmpeg_push_as("flv", url, video, gop, extra)
}

/// [`ffmpeg_push`] in MPEG-TS, as SRT carries it (`url` is an `srt://` URL).
pub fn ffmpeg_push_ts(url: &str, video: &str, gop: u32, extra: &[&str]) -> Killed {
    ffmpeg_push_as("mpegts", url, video, gop, extra)
}

fn ffmpeg_push_as(format: &str, url: &str, video: &str, gop: u32, extra: &[&str]) -> Killed {
    Killed(
        Command::new("bash")
            .env("PUSH_FORMAT", format)
            .arg(script())
            .args(["push", url, video, &gop.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash runs media-fixtures/make.sh"),
    )
}

/// A publisher of a file: `file` in real time, looping, without re-encoding (cheap enough that
/// a bench's pushers leave the CPU to the server).
pub fn push_file(file: &Path, url: &str) -> Killed {
    file_publisher("loop", file, url)
}

/// A publisher of `file` once, in real time, without re-encoding: the push ends with the file.
pub fn push_file_once(file: &Path, url: &str) -> Killed {
    file_publisher("once", file, url)
}

/// [`push_file`] without `-re`: `file`, looping, sent as fast as the server reads it (a
/// publisher's common mistake).
pub fn rush_file(file: &Path, url: &str) -> Killed {
    file_publisher("rush", file, url)
}

/// `media-fixtures/make.sh <mode> FILE URL`.
fn file_publisher(mode: &str, file: &Path, url: &str) -> Killed {
    Killed(
        Command::new("bash")
            .arg(script())
            .arg(mode)
            .arg(file)
            .arg(url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("bash runs media-fixtures/make.sh"),
    )
}

/// GStreamer's rtmp2sink publishing a live 320×240 15 fps test pattern (video only, a keyframe
/// every 2 s) to `location`, answering the Adobe challenge with `user` and `password`.
pub fn rtmp2sink(location: &str, user: &str, password: &str) -> Killed {
    let pipeline = format!(
        "videotestsrc is-live=true ! video/x-raw,width=320,height=240,framerate=15/1 ! \
         x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 ! h264parse ! flvmux streamable=true ! \
         rtmp2sink location={location} username={user} password={password}"
    );
    Killed(
        Command::new("gst-launch-1.0")
            .arg("-q")
            .args(pipeline.split_whitespace())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gst-launch-1.0 runs"),
    )
}

/// The frame number painted into a picture (JPEG or any image ffmpeg reads) of a
/// `vod-frames-…` clip or a `painted=WxH:R` push: 12 bars, bar b light when bit b is set.
pub fn painted_frame(image: &[u8]) -> u32 {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("picture");
    std::fs::write(&path, image).expect("write the picture");
    let (w, h) = (384usize, 216usize);
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(&path)
        .args(["-vf", &format!("scale={w}:{h}"), "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", "gray", "-"])
        .output()
        .expect("ffmpeg runs");
    assert_eq!(out.stdout.len(), w * h, "a picture: {}", String::from_utf8_lossy(&out.stderr));
    let row = &out.stdout[(h / 2) * w..(h / 2 + 1) * w];
    (0..12).filter(|b| row[(2 * b + 1) * w / 24] > 128).fold(0, |n, b| n | (1 << b))
}
