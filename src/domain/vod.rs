//! Video on demand: the ladder a file is transcoded into, how each rung's picture is fitted, and
//! the status machine (interface: VOD, VOD moves; CONTRACT: VOD). No GStreamer here.

use poem_openapi::{Enum, Object};
use serde::{Deserialize, Serialize};

/// A video bitrate written with a `k` or `M` suffix (`1500k`, `3M`, `2.5M`), kept in kbit/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bitrate(pub u32);

impl Bitrate {
    pub const MIN_KBPS: u32 = 100;
    pub const MAX_KBPS: u32 = 50_000;
    /// The grammar of a bitrate from 100k to 50M, checked by [`Bitrate::parse`] and stated by
    /// the OpenAPI document (one constant for both): whole kbit/s with `k` (`1500k`), or Mbit/s
    /// with `M` and at most three decimals (`3M`, `2.5M`, `0.75M`); no leading zeros.
    pub const PATTERN: &'static str = concat!(
        "^(([1-9][0-9]{2}|[1-9][0-9]{3}|[1-4][0-9]{4}|50000)k",
        "|(([1-9]|[1-4][0-9])(\\.[0-9]{1,3})?|50(\\.0{1,3})?|0\\.[1-9][0-9]{0,2})M)$"
    );

    pub fn parse(s: &str) -> Result<Bitrate, String> {
        static GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
            std::sync::LazyLock::new(|| regex::Regex::new(Bitrate::PATTERN).ok());
        let bad = || "must be a bitrate such as 1500k, 3M or 2.5M, from 100k to 50M".to_string();
        if !GRAMMAR.as_ref().is_some_and(|g| g.is_match(s)) {
            return Err(bad());
        }
        // In the grammar every value is in range and a whole number of kbit/s.
        let kbps = match (s.strip_suffix('k'), s.strip_suffix('M')) {
            (Some(k), _) => k.parse::<u32>().ok(),
            (_, Some(m)) => {
                let (whole, fraction) = m.split_once('.').unwrap_or((m, ""));
                let thousandths = format!("{fraction:0<3}").parse::<u32>().ok();
                whole.parse::<u32>().ok().zip(thousandths).map(|(w, f)| w * 1000 + f)
            }
            _ => None,
        };
        kbps.map(Bitrate).ok_or_else(bad)
    }

    /// `1500k`, or `3M` when a whole number of megabits.
    pub fn name(self) -> String {
        if self.0 % 1000 == 0 {
            format!("{}M", self.0 / 1000)
        } else {
            format!("{}k", self.0)
        }
    }
}

/// One rung as asked for: a name and the box its picture must fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct RenditionSpec {
    /// Also the rendition's folder in the playback URLs: 1–32 of `a-z A-Z 0-9 _ -`.
    pub name: String,
    /// Even, 16–7680.
    pub width: u32,
    /// Even, 16–4320.
    pub height: u32,
    /// `100k` to `50M`, e.g. `1500k` or `3M`.
    pub video_bitrate: String,
}

impl RenditionSpec {
    /// What [`RenditionSpec::problems`] asks of a name, as the OpenAPI document states it
    /// (ECMA-262, which has the look-ahead).
    pub const NAME_PATTERN: &'static str = "^(?!(audio|source)$)[A-Za-z0-9_-]{1,32}$";

    fn new(name: &str, width: u32, height: u32, kbps: u32) -> Self {
        RenditionSpec { name: name.into(), width, height, video_bitrate: Bitrate(kbps).name() }
    }

    pub fn kbps(&self) -> u32 {
        Bitrate::parse(&self.video_bitrate).map_or(0, |b| b.0)
    }

    /// The problems of one rung, each `<field> <problem>` (the caller prefixes the position).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let name_ok = (1..=32).contains(&self.name.len())
            && self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !["audio", "source"].contains(&self.name.as_str());
        if !name_ok {
            out.push("name must be 1 to 32 of a-z, A-Z, 0-9, _ and - (not audio or source)".into());
        }
        if !(16..=7680).contains(&self.width) || self.width % 2 != 0 {
            out.push("width must be an even integer from 16 to 7680".into());
        }
        if !(16..=4320).contains(&self.height) || self.height % 2 != 0 {
            out.push("height must be an even integer from 16 to 4320".into());
        }
        if let Err(e) = Bitrate::parse(&self.video_bitrate) {
            out.push(format!("videoBitrate {e}"));
        }
        out
    }
}

/// A rendition as produced (the VOD record's `renditions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Object)]
#[serde(rename_all = "camelCase")]
#[oai(rename_all = "camelCase")]
pub struct ProducedRendition {
    pub name: String,
    /// The encoded picture (with `preserve`, the source fitted inside the rung's box).
    pub width: u32,
    pub height: u32,
    /// As asked for.
    pub video_bitrate: String,
    /// Measured over the whole rendition, video only, bits/s.
    pub average_bandwidth: u64,
    /// The highest segment bitrate, video only, bits/s.
    pub peak_bandwidth: u64,
    /// Its media playlist, relative to the master playlist.
    pub uri: String,
}

/// The contract's default ladder.
pub fn default_ladder() -> Vec<RenditionSpec> {
    vec![
        RenditionSpec::new("1080p", 1920, 1080, 5000),
        RenditionSpec::new("720p", 1280, 720, 3000),
        RenditionSpec::new("480p", 854, 480, 1500),
        RenditionSpec::new("360p", 640, 360, 800),
    ]
}

/// How a source picture is fitted into a rung's box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum, Serialize, Deserialize)]
#[oai(rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
pub enum AspectRatio {
    /// Fit inside the box, keeping the aspect ratio (the output may be smaller than the box).
    Preserve,
    /// Fit inside the box and fill the rest with black bars: the output is the box.
    Pad,
    /// Fill the box and cut off what sticks out: the output is the box.
    Crop,
    /// Scale to the box, distorting the picture: the output is the box.
    Stretch,
}

impl AspectRatio {
    pub fn as_str(self) -> &'static str {
        match self {
            AspectRatio::Preserve => "preserve",
            AspectRatio::Pad => "pad",
            AspectRatio::Crop => "crop",
            AspectRatio::Stretch => "stretch",
        }
    }

    pub fn parse(s: &str) -> Result<AspectRatio, String> {
        match s {
            "preserve" => Ok(AspectRatio::Preserve),
            "pad" => Ok(AspectRatio::Pad),
            "crop" => Ok(AspectRatio::Crop),
            "stretch" => Ok(AspectRatio::Stretch),
            _ => Err("must be one of preserve, pad, crop, stretch".into()),
        }
    }
}

/// One rung as it will be encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRung {
    pub name: String,
    pub kbps: u32,
    /// The encoded picture.
    pub width: u32,
    pub height: u32,
    /// The source is first scaled to this size …
    pub scale_width: u32,
    pub scale_height: u32,
    /// … then cut by this much (crop: left/right, top/bottom) or bordered (pad).
    pub crop_x: u32,
    pub crop_y: u32,
}

fn even(x: f64) -> u32 {
    ((x / 2.0).round() as u32 * 2).max(2)
}

/// The rungs to encode for a source whose picture displays at `width`×`height` (square pixels).
/// A rung is left out when fitting the source into its box would enlarge it; the lowest rung (the
/// last one asked for with the smallest box) is always kept (CONTRACT: VOD). Highest first.
pub fn plan(ladder: &[RenditionSpec], aspect: AspectRatio, width: u32, height: u32) -> Vec<PlannedRung> {
    if width == 0 || height == 0 || ladder.is_empty() {
        return Vec::new();
    }
    let (sw, sh) = (f64::from(width), f64::from(height));
    let fit = |r: &RenditionSpec| (f64::from(r.width) / sw).min(f64::from(r.height) / sh);
    let lowest = ladder
        .iter()
        .enumerate()
        .min_by_key(|(_, r)| u64::from(r.width) * u64::from(r.height))
        .map_or(0, |(i, _)| i);
    let mut out: Vec<PlannedRung> = ladder
        .iter()
        .enumerate()
        .filter(|(i, r)| *i == lowest || fit(r) <= 1.0 + 1e-9)
        .map(|(_, r)| {
            let f = fit(r);
            let (fw, fh) = (even(sw * f).min(r.width), even(sh * f).min(r.height));
            let (width, height, scale_width, scale_height, crop_x, crop_y) = match aspect {
                AspectRatio::Preserve => (fw, fh, fw, fh, 0, 0),
                AspectRatio::Pad => (r.width, r.height, fw, fh, (r.width - fw) / 2, (r.height - fh) / 2),
                AspectRatio::Stretch => (r.width, r.height, r.width, r.height, 0, 0),
                AspectRatio::Crop => {
                    let cover = (f64::from(r.width) / sw).max(f64::from(r.height) / sh);
                    let (cw, ch) = (even(sw * cover).max(r.width), even(sh * cover).max(r.height));
                    (r.width, r.height, cw, ch, (cw - r.width) / 2, (ch - r.height) / 2)
                }
            };
            PlannedRung {
                name: r.name.clone(),
                kbps: r.kbps(),
                width,
                height,
                scale_width,
                scale_height,
                crop_x,
                crop_y,
            }
        })
        .collect();
    out.sort_by_key(|r| std::cmp::Reverse(u64::from(r.width) * u64::from(r.height)));
    out
}

/// How the output is packaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum OutputFormat {
    Hls,
}

/// The video codec of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum VideoCodec {
    H264,
}

/// The audio codec of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum AudioCodec {
    Aac,
}

impl OutputFormat {
    pub fn as_str(self) -> &'static str {
        "hls"
    }
}

impl VideoCodec {
    pub fn as_str(self) -> &'static str {
        "h264"
    }
}

impl AudioCodec {
    pub fn as_str(self) -> &'static str {
        "aac"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "snake_case")]
pub enum VodStatus {
    /// Waiting for the source file at `upload.url`.
    PendingUpload,
    /// The source landed and passed the probe.
    Uploaded,
    /// Waiting for a transcode worker.
    Queued,
    /// Being transcoded; see `progress`.
    Processing,
    /// Every rendition, the thumbnail and the master playlist are in storage.
    Complete,
    /// See `error`.
    Failed,
    Cancelled,
}

impl VodStatus {
    pub const ALL: [VodStatus; 7] = [
        VodStatus::PendingUpload,
        VodStatus::Uploaded,
        VodStatus::Queued,
        VodStatus::Processing,
        VodStatus::Complete,
        VodStatus::Failed,
        VodStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VodStatus::PendingUpload => "pending_upload",
            VodStatus::Uploaded => "uploaded",
            VodStatus::Queued => "queued",
            VodStatus::Processing => "processing",
            VodStatus::Complete => "complete",
            VodStatus::Failed => "failed",
            VodStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<VodStatus> {
        VodStatus::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// What can happen to a VOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VodMove {
    /// `POST uploaded` and the source passed the probe.
    Probed,
    /// The source is not playable video.
    Rejected,
    /// The job entered the queue.
    Queued,
    /// A worker took the job.
    Started,
    Finished,
    Errored,
    /// `DELETE` of an unfinished VOD.
    Cancel,
}

/// A move that does not apply in the VOD's status (409 at the API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VodMoveError {
    pub from: VodStatus,
    pub what: &'static str,
}

impl std::fmt::Display for VodMoveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a VOD in status {} cannot {}", self.from.as_str(), self.what)
    }
}

impl std::error::Error for VodMoveError {}

impl VodStatus {
    /// The one place that says which moves are allowed (CONTRACT: VOD).
    pub fn apply(self, m: VodMove) -> Result<VodStatus, VodMoveError> {
        use VodStatus::*;
        let refuse = |what| Err(VodMoveError { from: self, what });
        match (self, m) {
            (PendingUpload, VodMove::Probed) => Ok(Uploaded),
            (PendingUpload, VodMove::Rejected) => Ok(Failed),
            (_, VodMove::Probed | VodMove::Rejected) => refuse("be marked uploaded"),
            (Uploaded, VodMove::Queued) => Ok(Queued),
            (_, VodMove::Queued) => refuse("be queued"),
            // A retried job starts again from processing; a job whose VOD was not yet moved
            // to queued (the process stopped between the two writes) starts from uploaded.
            (Uploaded | Queued | Processing, VodMove::Started) => Ok(Processing),
            (_, VodMove::Started) => refuse("start transcoding"),
            (Processing, VodMove::Finished) => Ok(Complete),
            (_, VodMove::Finished) => refuse("complete"),
            (Uploaded | Queued | Processing, VodMove::Errored) => Ok(Failed),
            (_, VodMove::Errored) => refuse("fail"),
            (PendingUpload | Uploaded | Queued | Processing, VodMove::Cancel) => Ok(Cancelled),
            (_, VodMove::Cancel) => refuse("be cancelled"),
        }
    }
}

/// One progressive download a VOD's downloads job made (stored as JSON on the record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MadeDownload {
    /// A video rendition's name, or `audio` for the M4A.
    pub rendition: String,
    /// Its file under `download/`: `<rendition>.mp4`, or `audio.m4a`.
    pub file: String,
    /// Bytes.
    pub size: u64,
}

impl MadeDownload {
    /// The file of rendition `name`'s download.
    pub fn file_of(name: &str) -> String {
        match name {
            "audio" => "audio.m4a".into(),
            _ => format!("{name}.mp4"),
        }
    }
}

/// Where a VOD's MP4 downloads stand (null on the record when they were not asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum DownloadsStatus {
    /// Asked for; made once the VOD is complete (a job on the queue).
    Preparing,
    /// `downloads` lists them.
    Ready,
    /// They could not be made: `downloadsError` says why.
    Failed,
}

impl DownloadsStatus {
    /// Of a record: asked for (`mp4`), what was made, why not.
    pub fn of(mp4: bool, made: bool, error: bool) -> Option<DownloadsStatus> {
        match (mp4, made, error) {
            (false, ..) => None,
            (true, true, _) => Some(DownloadsStatus::Ready),
            (true, false, true) => Some(DownloadsStatus::Failed),
            (true, false, false) => Some(DownloadsStatus::Preparing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The document's bitrate pattern names forms the parser takes.
        #[test]
        fn documented_bitrates_are_taken(rate in Bitrate::PATTERN.trim_start_matches('^').trim_end_matches('$')) {
            proptest::prop_assert!(Bitrate::parse(&rate).is_ok(), "{}", rate);
        }
    }

    #[test]
    fn bitrates() {
        assert_eq!(Bitrate::parse("1500k"), Ok(Bitrate(1500)));
        assert_eq!(Bitrate::parse("3M"), Ok(Bitrate(3000)));
        assert_eq!(Bitrate::parse("2.5M"), Ok(Bitrate(2500)));
        assert_eq!(Bitrate::parse("100k"), Ok(Bitrate(100)));
        assert_eq!(Bitrate::parse("50M"), Ok(Bitrate(50_000)));
        assert_eq!(Bitrate::parse("0.75M"), Ok(Bitrate(750)));
        assert_eq!(Bitrate::parse("49.999M"), Ok(Bitrate(49_999)));
        assert_eq!(Bitrate::parse("2.675M"), Ok(Bitrate(2675)));
        for bad in [
            "99k", "51M", "1500", "k", "1.5k", "-1M", "3m", "1e3k", " 3M", "", "0100k", "1.0005M", "50.001M",
            "0.05M", ".5M", "100.0k",
        ] {
            assert!(Bitrate::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Bitrate(3000).name(), "3M");
        assert_eq!(Bitrate(1500).name(), "1500k");
    }

    #[test]
    fn rung_problems() {
        assert!(default_ladder().iter().all(|r| r.problems().is_empty()));
        let bad = RenditionSpec::new("a b", 15, 4322, 5000);
        assert_eq!(bad.problems().len(), 3);
        let bad = RenditionSpec { video_bitrate: "3x".into(), ..RenditionSpec::new("audio", 640, 360, 800) };
        assert_eq!(bad.problems().len(), 2);
    }

    #[test]
    fn rungs_above_the_source_are_dropped_and_the_lowest_kept() {
        let names = |p: Vec<PlannedRung>| p.into_iter().map(|r| r.name).collect::<Vec<_>>();
        let ladder = default_ladder();
        assert_eq!(
            names(plan(&ladder, AspectRatio::Preserve, 1920, 1080)),
            ["1080p", "720p", "480p", "360p"]
        );
        assert_eq!(names(plan(&ladder, AspectRatio::Preserve, 1280, 720)), ["720p", "480p", "360p"]);
        assert_eq!(names(plan(&ladder, AspectRatio::Preserve, 320, 180)), ["360p"]);
        // Vertical 720×1280: fitting into 1080p's box scales down, so it stays.
        assert_eq!(names(plan(&ladder, AspectRatio::Preserve, 720, 1280)), ["1080p", "720p", "480p", "360p"]);
    }

    #[test]
    fn fitting_modes() {
        let ladder = vec![RenditionSpec::new("720p", 1280, 720, 3000)];
        let p = &plan(&ladder, AspectRatio::Preserve, 1080, 1920)[0];
        assert_eq!((p.width, p.height), (406, 720));
        let p = &plan(&ladder, AspectRatio::Pad, 1080, 1920)[0];
        assert_eq!((p.width, p.height, p.scale_width, p.scale_height, p.crop_x), (1280, 720, 406, 720, 437));
        let p = &plan(&ladder, AspectRatio::Crop, 1080, 1920)[0];
        assert_eq!((p.width, p.height, p.scale_width, p.scale_height), (1280, 720, 1280, 2276));
        assert_eq!(p.crop_y, (2276 - 720) / 2);
        let p = &plan(&ladder, AspectRatio::Stretch, 1080, 1920)[0];
        assert_eq!((p.width, p.height, p.scale_width), (1280, 720, 1280));
        // Same aspect: every mode gives the box.
        for mode in [AspectRatio::Preserve, AspectRatio::Pad, AspectRatio::Crop, AspectRatio::Stretch] {
            let p = &plan(&ladder, mode, 1920, 1080)[0];
            assert_eq!((p.width, p.height, p.crop_x, p.crop_y), (1280, 720, 0, 0), "{mode:?}");
        }
    }

    #[test]
    fn moves() {
        use VodStatus::*;
        assert_eq!(PendingUpload.apply(VodMove::Probed), Ok(Uploaded));
        assert_eq!(PendingUpload.apply(VodMove::Rejected), Ok(Failed));
        assert!(Uploaded.apply(VodMove::Probed).is_err(), "uploaded twice");
        assert_eq!(Uploaded.apply(VodMove::Queued), Ok(Queued));
        assert_eq!(Queued.apply(VodMove::Started), Ok(Processing));
        assert_eq!(Processing.apply(VodMove::Started), Ok(Processing), "a retried job");
        assert_eq!(Uploaded.apply(VodMove::Started), Ok(Processing), "stopped between uploaded and queued");
        assert_eq!(Processing.apply(VodMove::Finished), Ok(Complete));
        assert!(Complete.apply(VodMove::Cancel).is_err());
        assert!(Failed.apply(VodMove::Cancel).is_err());
        assert_eq!(Processing.apply(VodMove::Cancel), Ok(Cancelled));
        assert!(Cancelled.apply(VodMove::Started).is_err(), "a cancelled job never starts");
    }
}
