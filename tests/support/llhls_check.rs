//! A strict checker of Low-Latency HLS media playlists, written from the text of RFC 8216bis
//! (draft-pantos-hls-rfc8216bis-22, 1 May 2026). It covers every MUST, MUST NOT and REQUIRED of
//! 4.4.3.7 to 4.4.5.4 and of 6.2.2 that playlists can show, and the rules they lean on:
//! 4.2 (attribute lists), 4.4.1-4.4.3.6, 3.2, 6.2.1, 6.2.5.1, 8 and the B.1 Low-Latency profile.
//! Std only, so it compiles on its own. Every finding is one line:
//! `§<section> MUST, line <n> `<the line>`: <what is wrong>` (SHOULD for recommendations).
//!
//! [`check_media`], one playlist:
//! - 4.2: attribute names of `[A-Z0-9-]`, each at most once; quoted-strings closed and non-empty;
//!   every value of its declared type (decimal-integer, decimal-floating-point, enumerated-string).
//! - 4.4.1.1 `#EXTM3U` first; 4.4.1.2, 4.4.2, 4.4.3, 4.4.5 once-only tags appear once.
//! - 4.4.3.1 EXT-X-TARGETDURATION present, at least 1, every EXTINF rounds to no more than it.
//! - 4.4.3.2/4.4.3.3 EXT-X-MEDIA-SEQUENCE and EXT-X-DISCONTINUITY-SEQUENCE before the first segment
//!   (and the latter before any EXT-X-DISCONTINUITY); 4.4.3.5 EXT-X-PLAYLIST-TYPE is EVENT or VOD.
//! - 4.4.3.7 EXT-X-PART-INF with PART-TARGET when there are EXT-X-PART tags.
//! - 4.4.3.8 CAN-SKIP-UNTIL >= 6 TD; CAN-SKIP-DATERANGES only with it; HOLD-BACK >= 3 TD;
//!   PART-HOLD-BACK present with EXT-X-PART-INF and >= 2 PART-TARGET (SHOULD 3).
//! - 4.4.4.1 EXTINF on every segment; 4.4.4.2 BYTERANGE continuing a sub-range of the same URI;
//!   4.4.4.4 EXT-X-KEY METHOD/URI/IV rules; 4.4.4.5 EXT-X-MAP URI, BYTERANGE with offset, IV when
//!   AES-128 covers it; 4.4.4.6 ISO 8601 EXT-X-PROGRAM-DATE-TIME; 4.4.4.8 EXT-X-BITRATE integer.
//! - 4.4.4.9 EXT-X-PART URI, DURATION, BYTERANGE, INDEPENDENT/GAP; DISCONTINUITY, KEY, MAP and
//!   PROGRAM-DATE-TIME before the Parent Segment's first part; DURATION <= PART-TARGET; at least
//!   85% of it except INDEPENDENT=YES, GAP=YES, a part followed by a GAP=YES part and a Parent
//!   Segment's final part (the last part listed of the segment being built may be its final one).
//! - 3.2 a complete Parent Segment's parts add up to its EXTINF (the oldest one listed may have
//!   lost its first parts, 6.2.2); 6.2.2 no segment without parts after one with parts.
//! - 4.4.5.1 EXT-X-DATERANGE: ID, START-DATE, dates, END-DATE >= START-DATE = START+DURATION, CUE
//!   not PRE and POST, END-ON-NEXT (YES, CLASS, no DURATION/END-DATE, no overlap in its CLASS),
//!   X- and SCTE35- value types, same ID same values, some EXT-X-PROGRAM-DATE-TIME.
//! - 4.4.5.2 EXT-X-SKIP once, before the segments, SKIPPED-SEGMENTS; 6.2.5.1 only with
//!   CAN-SKIP-UNTIL, without EXT-X-ENDLIST, RECENTLY-REMOVED-DATERANGES only with CAN-SKIP-DATERANGES.
//! - 4.4.5.3 EXT-X-PRELOAD-HINT TYPE PART|MAP, URI, BYTERANGE-START/LENGTH; none with ENDLIST.
//! - 4.4.5.4 EXT-X-RENDITION-REPORT URI (relative), LAST-MSN, LAST-PART decimal-integers.
//! - 8 EXT-X-VERSION at least what the tags need (4.4.1.2: present when that is above 1);
//!   6.2.1 a VOD playlist has EXT-X-ENDLIST.
//! - B.1 (profile) with EXT-X-PART-INF: a TYPE=PART hint unless ended, EXT-X-PROGRAM-DATE-TIME.
//!
//! [`check_update`], two versions (6.2.1, 6.2.2, 4.4.3.4, 4.4.5.3): whole-playlist tags
//! (TARGETDURATION, PART-INF, SERVER-CONTROL, VERSION, ...) unchanged; VOD unchanged; ENDLIST
//! stays and nothing follows it; EXT-X-MEDIA-SEQUENCE never decreases, a segment keeps its MSN,
//! URI, EXTINF, BYTERANGE, date, MAP, KEY, GAP and Discontinuity Sequence Number; segments go
//! only from the start, then the playlist has EXT-X-MEDIA-SEQUENCE, lasts 3 TD unless ended, has
//! EXT-X-DISCONTINUITY-SEQUENCE if it has discontinuities, and no EXT-X-PLAYLIST-TYPE;
//! EXT-X-DISCONTINUITY-SEQUENCE never decreases; parts go in order, unchanged, never those of
//! a segment still being built; the part added where a hint pointed has the hinted URI (a server
//! that changes its planned segmentation MAY drop a hinted part, 6.2.6: then this one is noise);
//! B.1 a TYPE=MAP hint announced a new initialization section.
//!
//! [`check_delta`] (a `_HLS_skip=YES` answer against the full playlist, 4.4.5.2, 6.2.5.1): no
//! EXT-X-SKIP when the server must ignore `_HLS_skip`; SKIPPED-SEGMENTS and MEDIA-SEQUENCE line
//! the listed segments up with the full playlist's; everything not skipped stays (tags, dates,
//! parts, hints, reports, date ranges, discontinuity sequence); what is skipped starts further
//! than the Skip Boundary from the end of the last Parent Segment, what is kept ends nearer.
//!
//! [`check_rendition_reports`] (4.4.5.4, B.1): each report names a given rendition, has LAST-PART
//! when that rendition has parts, names a part that can exist, within a tolerance of its last.
//!
//! SHOULDs come from the `*_should` twins: 4.4.3.8 PART-HOLD-BACK >= 3 PART-TARGET; 4.4.4.6 and
//! 4.4.5.1 dates with zone and milliseconds; 4.4.4.9 no parts in I-frame playlists; 6.2.2 parts
//! more than 3 TD from the end removed (and, an update, none removed nearer: "live edge");
//! 6.2.6 one hint per TYPE; 6.2.1 EXT-X-VERSION no higher than needed; 6.2.2 a MEDIA-SEQUENCE
//! above 0 with discontinuities but no DISCONTINUITY-SEQUENCE (a MUST once segments were removed).
//!
//! Readings where the text is loose: a segment's distance from the end runs from its start
//! (4.4.5.2 "further from the end ... than the Skip Boundary"); a delta is faulted only where
//! both readings agree (skipped but starting within the boundary; kept but ending beyond it).
//! Durations compare as written; sums allow half a unit of each figure's last written digit.
//! Not visible in playlists, so not checked: what the media holds (4.4.4.3 discontinuities, 3.2
//! samples, 4.4.4.8 bit rates), timing (6.2.1 a new part within one Part Target Duration) and
//! availability (6.2.2 downloads after removal, 6.2.6 hinted resources).

use std::collections::{HashMap, HashSet};
use std::fmt::Display;

const EPS: f64 = 1e-9;
const MULTIVARIANT: [&str; 6] = [
    "#EXT-X-MEDIA",
    "#EXT-X-STREAM-INF",
    "#EXT-X-I-FRAME-STREAM-INF",
    "#EXT-X-SESSION-DATA",
    "#EXT-X-SESSION-KEY",
    "#EXT-X-CONTENT-STEERING",
];
/// Tags a playlist has at most once, with the section that says so.
const ONCE: [(&str, &str); 12] = [
    ("#EXT-X-VERSION", "4.4.1.2"),
    ("#EXT-X-INDEPENDENT-SEGMENTS", "4.4.2"),
    ("#EXT-X-START", "4.4.2"),
    ("#EXT-X-TARGETDURATION", "4.4.3"),
    ("#EXT-X-MEDIA-SEQUENCE", "4.4.3"),
    ("#EXT-X-DISCONTINUITY-SEQUENCE", "4.4.3"),
    ("#EXT-X-ENDLIST", "4.4.3"),
    ("#EXT-X-PLAYLIST-TYPE", "4.4.3"),
    ("#EXT-X-I-FRAMES-ONLY", "4.4.3"),
    ("#EXT-X-PART-INF", "4.4.3"),
    ("#EXT-X-SERVER-CONTROL", "4.4.3"),
    ("#EXT-X-SKIP", "4.4.5"),
];
/// Tags about the whole playlist, which 6.2.1 lets no update change.
const GLOBAL: [&str; 8] = [
    "#EXT-X-VERSION",
    "#EXT-X-TARGETDURATION",
    "#EXT-X-PLAYLIST-TYPE",
    "#EXT-X-I-FRAMES-ONLY",
    "#EXT-X-INDEPENDENT-SEGMENTS",
    "#EXT-X-START",
    "#EXT-X-PART-INF",
    "#EXT-X-SERVER-CONTROL",
];
const NO_CHANGE: &str = "the server MUST NOT change a Media Playlist but to add, remove (6.2.2) and end it";
const LIVE_EDGE: &str = "only EXT-X-PART tags no longer at the live edge may be removed (6.2.1)";
const REMAIN: &str = "all tags not skipped MUST remain";
const METHODS: [&str; 5] = ["NONE", "AES-128", "SAMPLE-AES", "SAMPLE-AES-CTR", "AES-256-GCM"];

/// A Partial Segment (EXT-X-PART, 4.4.4.9).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Part {
    pub uri: String,
    pub duration: f64,
    /// Half a unit of DURATION's last written digit: how far the figure may be from the truth.
    pub slack: f64,
    pub independent: bool,
    pub gap: bool,
    pub byterange: Option<(u64, Option<u64>)>,
    pub line: usize,
}

/// A Media Segment, or (`uri` None) the Parent Segment being built, of which only parts are out.
#[derive(Debug, Clone, Default)]
pub struct Segment {
    pub msn: u64,
    pub uri: Option<String>,
    /// EXTINF, or the sum of the parts so far.
    pub duration: f64,
    pub duration_text: String,
    pub slack: f64,
    /// The URI line (or the first part's).
    pub line: usize,
    pub byterange: Option<(u64, Option<u64>)>,
    pub discontinuity: bool,
    pub dsn: u64,
    /// EXT-X-PROGRAM-DATE-TIME, milliseconds since 1970.
    pub pdt: Option<i64>,
    /// The EXT-X-MAP URI and EXT-X-KEY attributes in force.
    pub map: Option<String>,
    pub key: Option<String>,
    pub gap: bool,
    pub parts: Vec<Part>,
    /// An EXT-X-PART of it could not be read (so its sum is not checked).
    pub part_error: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hint {
    pub kind: String,
    pub uri: String,
    pub start: Option<u64>,
    pub line: usize,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub uri: String,
    pub last_msn: Option<u64>,
    pub last_part: Option<u64>,
    pub line: usize,
}

/// An EXT-X-DATERANGE, its attributes merged with those of earlier tags of the same ID.
#[derive(Debug, Clone, Default)]
pub struct DateRange {
    pub id: String,
    pub class: Option<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub end_on_next: bool,
    pub line: usize,
}

#[derive(Debug, Clone, Default)]
struct Out {
    must: Vec<String>,
    should: Vec<String>,
}

impl Out {
    fn must(&mut self, sec: &str, place: String, what: impl Display) {
        self.must.push(format!("§{sec} MUST, {place}: {what}"));
    }
    fn should(&mut self, sec: &str, place: String, what: impl Display) {
        self.should.push(format!("§{sec} SHOULD, {place}: {what}"));
    }
}

/// A parsed media playlist; what it breaks of one playlist's rules is in [`check_media`].
#[derive(Debug, Clone, Default)]
pub struct Playlist {
    pub lines: Vec<String>,
    pub version: Option<u64>,
    pub target_duration: Option<u64>,
    pub media_sequence: Option<u64>,
    pub discontinuity_sequence: Option<u64>,
    pub playlist_type: Option<String>,
    pub endlist: bool,
    pub part_target: Option<f64>,
    pub can_skip_until: Option<f64>,
    pub can_skip_dateranges: bool,
    pub hold_back: Option<f64>,
    pub part_hold_back: Option<f64>,
    pub skipped_segments: Option<u64>,
    pub recently_removed_dateranges: Option<String>,
    /// Whole-playlist tags as written (name, value).
    pub globals: Vec<(String, String)>,
    pub segments: Vec<Segment>,
    pub hints: Vec<Hint>,
    pub reports: Vec<Report>,
    pub dateranges: Vec<DateRange>,
    /// The EXT-X-VERSION the tags need (8) and why.
    pub version_needed: (u64, String),
    out: Out,
}

/// What parsing carries from line to line.
#[derive(Default)]
struct State {
    cur: Segment,
    extinf: bool,
    first_segment: Option<usize>,
    seen: HashSet<String>,
    map: Option<String>,
    map_seen: bool,
    key: Option<String>,
    key_aes128_no_iv: bool,
    disc_seen: bool,
    i_frames: bool,
    ranges: HashMap<String, Vec<(String, String)>>,
    tag_lines: HashMap<String, usize>,
}

#[derive(Clone, Copy)]
enum Kind {
    Int,
    Float,
    Hex,
    Quoted,
    QuotedOrEmpty,
    Yes,
    OneOf(&'static [&'static str]),
}

type Attrs = Vec<(String, String, bool)>;

/// Parses a media playlist. `Err` only when it is no media playlist at all; anything else wrong
/// becomes a finding of [`check_media`].
pub fn parse(text: &str) -> Result<Playlist, String> {
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    if lines.iter().all(|l| l.trim().is_empty()) {
        return Err("§4.4.1.1 MUST, the playlist: it is empty; its first line must be #EXTM3U".into());
    }
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| MULTIVARIANT.contains(&tag_name(l))) {
        return Err(format!(
            "§4.4.6 MUST, line {} `{l}`: a Multivariant Playlist tag: no Media Playlist",
            i + 1
        ));
    }
    let mut p = Playlist { lines, version_needed: (1, "nothing".into()), ..Playlist::default() };
    let mut st = State::default();
    for n in 1..=p.lines.len() {
        let line = p.lines[n - 1].clone();
        p.line(n, &line, &mut st);
    }
    p.finish(st);
    Ok(p)
}

/// Every MUST-level violation one media playlist shows on its own, each naming its section.
pub fn check_media(text: &str) -> Vec<String> {
    parse(text).map_or_else(|e| vec![e], |p| p.out.must)
}

/// The SHOULD-level findings of one media playlist.
pub fn check_media_should(text: &str) -> Vec<String> {
    parse(text).map(|p| p.out.should).unwrap_or_default()
}

fn tag_name(line: &str) -> &str {
    line.split_once(':').map_or(line, |(t, _)| t)
}

fn int(v: &str) -> Option<u64> {
    (!v.is_empty() && v.len() <= 20 && v.bytes().all(|b| b.is_ascii_digit())).then(|| v.parse().ok())?
}

fn float(v: &str) -> Option<f64> {
    let ok = v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && v.bytes().filter(|b| *b == b'.').count() <= 1
        && v.bytes().any(|b| b.is_ascii_digit());
    ok.then(|| v.parse().ok())?
}

fn hex(v: &str) -> bool {
    let digits = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")).unwrap_or("");
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// Half a unit of the last written digit of a decimal figure.
fn slack(v: &str) -> f64 {
    let decimals = v.split_once('.').map_or(0, |(_, d)| d.len());
    0.5 * 10f64.powi(-(decimals.min(30) as i32))
}

/// `<n>[@<o>]` (4.4.4.2).
fn byterange(v: &str) -> Option<(u64, Option<u64>)> {
    match v.split_once('@') {
        Some((n, o)) => Some((int(n)?, Some(int(o)?))),
        None => Some((int(v)?, None)),
    }
}

/// An attribute-list (4.2): (name, value, quoted).
fn attr_list(v: &str) -> Result<Attrs, String> {
    let mut out: Attrs = Vec::new();
    let mut rest = v;
    loop {
        let (name, after) =
            rest.split_once('=').ok_or_else(|| format!("`{rest}` is no AttributeName=Value"))?;
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(format!("AttributeName `{name}` is not of [A-Z], [0-9] and '-'"));
        }
        let (value, quoted, tail) = match after.strip_prefix('"') {
            Some(q) => {
                let end = q.find('"').ok_or_else(|| format!("the quoted-string of {name} is not closed"))?;
                (&q[..end], true, &q[end + 1..])
            }
            None => {
                let end = after.find(',').unwrap_or(after.len());
                (&after[..end], false, &after[end..])
            }
        };
        if !quoted && (value.is_empty() || value.contains(['"', ' ', '\t'])) {
            return Err(format!("the value of {name} is empty or has a quote or whitespace"));
        }
        if out.iter().any(|(n, ..)| n == name) {
            return Err(format!("{name} appears twice in the attribute-list (MUST NOT)"));
        }
        out.push((name.to_string(), value.to_string(), quoted));
        if tail.is_empty() {
            return Ok(out);
        }
        rest =
            tail.strip_prefix(',').ok_or_else(|| format!("`{tail}` follows {name}'s value, not a comma"))?;
    }
}

/// An ISO 8601 date-time: milliseconds since 1970, whether it has a zone and a fraction.
fn date(s: &str) -> Option<(i64, bool, bool)> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|b| b.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, mo, d, h, mi, sec) =
        (num(0..4)?, num(5..7)?, num(8..10)?, num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
    let days_in = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&mo) || d < 1 || d > days_in[(mo - 1) as usize] || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = s.get(19..)?;
    let mut ms = 0;
    let frac = rest.starts_with('.');
    if frac {
        let digits: String = rest[1..].chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return None;
        }
        ms = format!("{digits:0<3}")[..3].parse().ok()?;
        rest = &rest[1 + digits.len()..];
    }
    let (tz, offset) = match rest {
        "" => (false, 0),
        "Z" => (true, 0),
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let hm = rest[1..].replace(':', "");
            let (hh, mm) = match hm.len() {
                2 => (int(&hm)?, 0),
                4 => (int(hm.get(..2)?)?, int(hm.get(2..)?)?),
                _ => return None,
            };
            (true, sign * (hh * 60 + mm) as i64)
        }
    };
    // Days from 1970-01-01 (H. Hinnant's days_from_civil).
    let yy = if mo <= 2 { y - 1 } else { y };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * ((mo + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec - offset * 60) * 1000 + ms, tz, frac))
}

/// A relative reference (RFC 3986 4.2): no scheme, no authority.
fn is_relative(uri: &str) -> bool {
    !uri.split(['/', '?', '#']).next().unwrap_or("").contains(':') && !uri.starts_with("//")
}

impl Playlist {
    /// Where a finding is: `line n `text`` (line 0: the playlist).
    pub fn at(&self, n: usize) -> String {
        match n.checked_sub(1).and_then(|i| self.lines.get(i)) {
            Some(l) => format!("line {n} `{l}`"),
            None => "the playlist".into(),
        }
    }
    /// `at`, naming which of two playlists.
    fn place(&self, which: &str, n: usize) -> String {
        match n {
            0 => format!("the {which} playlist"),
            _ => format!("{which} {}", self.at(n)),
        }
    }
    pub fn complete(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter().filter(|s| s.uri.is_some())
    }
    /// EXT-X-MEDIA-SEQUENCE (0 when absent).
    pub fn ms(&self) -> u64 {
        self.media_sequence.unwrap_or(0)
    }
    pub fn ds(&self) -> u64 {
        self.discontinuity_sequence.unwrap_or(0)
    }
    pub fn global(&self, tag: &str) -> Option<&str> {
        self.globals.iter().find(|(t, _)| t == tag).map(|(_, v)| v.as_str())
    }
    /// The Playlist duration (4.1): its complete segments.
    pub fn duration(&self) -> f64 {
        self.complete().map(|s| s.duration).sum()
    }
    /// The last segment's MSN and, when it has parts listed, the last one's Part Index.
    pub fn last_position(&self) -> Option<(u64, Option<u64>)> {
        let s = self.segments.last()?;
        Some((s.msn, s.parts.len().checked_sub(1).map(|i| i as u64)))
    }
    /// When each segment starts, from the start of the first listed, and the end of the last.
    fn timeline(&self) -> (Vec<f64>, f64) {
        let mut t = 0.0;
        let starts = self
            .segments
            .iter()
            .map(|s| {
                let start = t;
                t += s.duration;
                start
            })
            .collect();
        (starts, t)
    }
    /// How many parts segment `msn` has, where known; otherwise the most any complete one has.
    fn part_count(&self, msn: u64) -> u64 {
        let first = self.segments.iter().position(|s| !s.parts.is_empty());
        let known = |i: usize, s: &Segment| s.uri.is_some() && Some(i) != first && !s.parts.is_empty();
        let complete = self.segments.iter().enumerate().filter(|(i, s)| known(*i, s));
        if let Some((_, s)) = complete.clone().find(|(_, s)| s.msn == msn) {
            return s.parts.len() as u64;
        }
        let most = complete.map(|(_, s)| s.parts.len() as u64).max();
        let nominal = match (self.target_duration, self.part_target) {
            (Some(td), Some(pt)) if pt > 0.0 => (td as f64 / pt).ceil() as u64,
            _ => 1,
        };
        most.unwrap_or(nominal).max(1)
    }

    fn must(&mut self, sec: &str, n: usize, what: impl Display) {
        let place = self.at(n);
        self.out.must(sec, place, what);
    }
    fn should(&mut self, sec: &str, n: usize, what: impl Display) {
        let place = self.at(n);
        self.out.should(sec, place, what);
    }
    fn need(&mut self, version: u64, why: &str) {
        if version > self.version_needed.0 {
            self.version_needed = (version, why.into());
        }
    }
    fn int_tag(&mut self, sec: &str, n: usize, v: &str) -> Option<u64> {
        let i = int(v);
        if i.is_none() {
            self.must(sec, n, format!("`{v}` is not a decimal-integer (4.2)"));
        }
        i
    }
    fn attrs(&mut self, n: usize, v: &str) -> Option<Attrs> {
        match attr_list(v) {
            Ok(a) => {
                if a.iter().any(|(name, ..)| name.starts_with("REQ-")) {
                    self.need(12, "an attribute named REQ-");
                }
                Some(a)
            }
            Err(e) => {
                self.must("4.2", n, e);
                None
            }
        }
    }
    /// Attribute `name` of `kind`, reported under `sec` when REQUIRED and missing or mistyped.
    fn get(
        &mut self,
        (sec, n): (&str, usize),
        a: &Attrs,
        name: &str,
        kind: Kind,
        required: bool,
    ) -> Option<String> {
        let Some((_, v, quoted)) = a.iter().find(|(x, ..)| x == name) else {
            if required {
                self.must(sec, n, format!("{name} is REQUIRED"));
            }
            return None;
        };
        let (ok, what) = match kind {
            Kind::Int => (!quoted && int(v).is_some(), "a decimal-integer (4.2)".to_string()),
            Kind::Float => (!quoted && float(v).is_some(), "a decimal-floating-point (4.2)".into()),
            Kind::Hex => (!quoted && hex(v), "a hexadecimal-sequence (4.2)".into()),
            Kind::Quoted => (*quoted && !v.is_empty(), "a non-empty quoted-string (4.2)".into()),
            Kind::QuotedOrEmpty => (*quoted, "a quoted-string (4.2)".into()),
            Kind::Yes => (!quoted && v == "YES", "YES, its one value".into()),
            Kind::OneOf(set) => (!quoted && set.contains(&v.as_str()), format!("one of {}", set.join(", "))),
        };
        if !ok {
            self.must(sec, n, format!("{name}={v} is not {what}"));
            return None;
        }
        Some(v.clone())
    }
    fn before_parts(&mut self, n: usize, tag: &str, st: &State) {
        if !st.cur.parts.is_empty() {
            self.must(
                "4.4.4.9",
                n,
                format!("{tag} applies to the Parent Segment: it MUST come before its first EXT-X-PART"),
            );
        }
    }

    fn line(&mut self, n: usize, line: &str, st: &mut State) {
        if n == 1 && line != "#EXTM3U" {
            self.must("4.4.1.1", n, "the first line MUST be #EXTM3U");
        }
        if line.trim().is_empty() || (line.starts_with('#') && !line.starts_with("#EXT")) {
            return;
        }
        if !line.starts_with('#') {
            return self.uri_line(n, line, st);
        }
        let (tag, value) = line.split_once(':').unwrap_or((line, ""));
        if let Some((_, sec)) = ONCE.iter().find(|(t, _)| *t == tag) {
            if !st.seen.insert(tag.to_string()) {
                self.must(sec, n, format!("{tag} MUST NOT appear more than once"));
            }
        }
        if GLOBAL.contains(&tag) {
            self.globals.push((tag.to_string(), value.to_string()));
        }
        st.tag_lines.entry(tag.to_string()).or_insert(n);
        match tag {
            "#EXT-X-VERSION" => self.version = self.int_tag("4.4.1.2", n, value),
            "#EXT-X-TARGETDURATION" => {
                self.target_duration = self.int_tag("4.4.3.1", n, value);
                if self.target_duration == Some(0) {
                    self.must("4.4.3.1", n, "the Target Duration MUST be at least 1");
                }
            }
            "#EXT-X-MEDIA-SEQUENCE" => {
                self.media_sequence = self.int_tag("4.4.3.2", n, value);
                if st.first_segment.is_some() {
                    self.must("4.4.3.2", n, "it MUST appear before the first Media Segment");
                }
            }
            "#EXT-X-DISCONTINUITY-SEQUENCE" => {
                self.discontinuity_sequence = self.int_tag("4.4.3.3", n, value);
                if st.first_segment.is_some() || st.disc_seen {
                    self.must(
                        "4.4.3.3",
                        n,
                        "it MUST appear before the first Media Segment and any EXT-X-DISCONTINUITY",
                    );
                }
            }
            "#EXT-X-ENDLIST" => self.endlist = true,
            "#EXT-X-PLAYLIST-TYPE" => {
                if !matches!(value, "EVENT" | "VOD") {
                    self.must("4.4.3.5", n, "the type is EVENT or VOD");
                }
                self.playlist_type = Some(value.to_string());
            }
            "#EXT-X-I-FRAMES-ONLY" => {
                st.i_frames = true;
                self.need(4, "EXT-X-I-FRAMES-ONLY");
            }
            "#EXT-X-PART-INF" => {
                if let Some(a) = self.attrs(n, value) {
                    let pt = self.get(("4.4.3.7", n), &a, "PART-TARGET", Kind::Float, true);
                    self.part_target = pt.as_deref().and_then(float);
                }
            }
            "#EXT-X-SERVER-CONTROL" => self.server_control(n, value),
            "#EXTINF" => {
                st.first_segment.get_or_insert(n);
                st.extinf = true;
                match value.split_once(',').map(|(d, _)| (d, float(d))) {
                    Some((d, Some(f))) => {
                        (st.cur.duration, st.cur.duration_text, st.cur.slack) = (f, d.to_string(), slack(d));
                        if d.contains('.') {
                            self.need(3, "a decimal-floating-point EXTINF");
                        }
                    }
                    _ => self.must(
                        "4.4.4.1",
                        n,
                        "the format is #EXTINF:<duration>,[<title>], a decimal duration",
                    ),
                }
            }
            "#EXT-X-BYTERANGE" => {
                self.need(4, "EXT-X-BYTERANGE");
                st.cur.byterange = byterange(value);
                if st.cur.byterange.is_none() {
                    self.must("4.4.4.2", n, "the format is <n>[@<o>] of decimal-integers");
                }
            }
            "#EXT-X-DISCONTINUITY" => {
                self.before_parts(n, tag, st);
                (st.cur.discontinuity, st.disc_seen) = (true, true);
            }
            "#EXT-X-KEY" => {
                self.before_parts(n, tag, st);
                if let Some(a) = self.attrs(n, value) {
                    self.key(n, value, &a, st);
                }
            }
            "#EXT-X-MAP" => {
                self.before_parts(n, tag, st);
                st.map_seen = true;
                let Some(a) = self.attrs(n, value) else { return };
                st.map = self.get(("4.4.4.5", n), &a, "URI", Kind::Quoted, true);
                let range = self.get(("4.4.4.5", n), &a, "BYTERANGE", Kind::Quoted, false);
                if range.is_some_and(|r| !matches!(byterange(&r), Some((_, Some(_))))) {
                    self.must("4.4.4.5", n, "BYTERANGE is \"<n>@<o>\": its offset is REQUIRED");
                }
                if st.key_aes128_no_iv {
                    self.must("4.4.4.5", n, "an AES-128 EXT-X-KEY applies to it: that key's IV is REQUIRED");
                }
            }
            "#EXT-X-PROGRAM-DATE-TIME" => {
                self.before_parts(n, tag, st);
                st.cur.pdt = self.date_value("4.4.4.6", n, "the date", value);
            }
            "#EXT-X-GAP" => st.cur.gap = true,
            "#EXT-X-BITRATE" => {
                self.int_tag("4.4.4.8", n, value);
            }
            "#EXT-X-PART" => self.part(n, value, st),
            "#EXT-X-DATERANGE" => self.daterange(n, value, st),
            "#EXT-X-SKIP" => {
                if st.first_segment.is_some() {
                    self.must(
                        "4.4.5.2",
                        n,
                        "it replaces the oldest segments: it MUST come before the first one",
                    );
                }
                self.need(9, "EXT-X-SKIP");
                let Some(a) = self.attrs(n, value) else { return };
                self.skipped_segments =
                    self.get(("4.4.5.2", n), &a, "SKIPPED-SEGMENTS", Kind::Int, true).and_then(|v| int(&v));
                let rrd =
                    self.get(("4.4.5.2", n), &a, "RECENTLY-REMOVED-DATERANGES", Kind::QuotedOrEmpty, false);
                if rrd.is_some() {
                    self.need(10, "an EXT-X-SKIP replacing EXT-X-DATERANGE tags");
                }
                self.recently_removed_dateranges = rrd;
            }
            "#EXT-X-PRELOAD-HINT" => {
                let Some(a) = self.attrs(n, value) else { return };
                let at = ("4.4.5.3", n);
                let kind = self.get(at, &a, "TYPE", Kind::OneOf(&["PART", "MAP"]), true);
                let uri = self.get(at, &a, "URI", Kind::Quoted, true);
                let start = self.get(at, &a, "BYTERANGE-START", Kind::Int, false).and_then(|v| int(&v));
                self.get(at, &a, "BYTERANGE-LENGTH", Kind::Int, false);
                if let (Some(kind), Some(uri)) = (kind, uri) {
                    self.hints.push(Hint { kind, uri, start, line: n });
                }
            }
            "#EXT-X-RENDITION-REPORT" => {
                let Some(a) = self.attrs(n, value) else { return };
                let at = ("4.4.5.4", n);
                let uri = self.get(at, &a, "URI", Kind::Quoted, true);
                let last_msn = self.get(at, &a, "LAST-MSN", Kind::Int, false).and_then(|v| int(&v));
                let last_part = self.get(at, &a, "LAST-PART", Kind::Int, false).and_then(|v| int(&v));
                if let Some(uri) = uri {
                    if !is_relative(&uri) {
                        self.must("4.4.5.4", n, "the URI MUST be relative to the Media Playlist's");
                    }
                    self.reports.push(Report { uri, last_msn, last_part, line: n });
                }
            }
            "#EXT-X-DEFINE" => {
                self.need(8, "variable substitution (EXT-X-DEFINE)");
                if value.contains("QUERYPARAM=") {
                    self.need(11, "EXT-X-DEFINE with QUERYPARAM");
                }
            }
            _ => {}
        }
    }

    fn server_control(&mut self, n: usize, value: &str) {
        let Some(a) = self.attrs(n, value) else { return };
        let at = ("4.4.3.8", n);
        let f = |p: &mut Self, name: &str| p.get(at, &a, name, Kind::Float, false).and_then(|v| float(&v));
        (self.can_skip_until, self.hold_back, self.part_hold_back) =
            (f(self, "CAN-SKIP-UNTIL"), f(self, "HOLD-BACK"), f(self, "PART-HOLD-BACK"));
        self.can_skip_dateranges = a.iter().any(|(x, ..)| x == "CAN-SKIP-DATERANGES");
        self.get(at, &a, "CAN-SKIP-DATERANGES", Kind::Yes, false);
        self.get(at, &a, "CAN-BLOCK-RELOAD", Kind::Yes, false);
    }

    fn key(&mut self, n: usize, value: &str, a: &Attrs, st: &mut State) {
        let at = ("4.4.4.4", n);
        let Some(method) = self.get(at, a, "METHOD", Kind::OneOf(&METHODS), true) else { return };
        (st.key, st.key_aes128_no_iv) = (None, false);
        if method == "NONE" {
            if a.len() > 1 {
                self.must("4.4.4.4", n, "with METHOD=NONE, other attributes MUST NOT be present");
            }
            return;
        }
        self.get(at, a, "URI", Kind::Quoted, true);
        let iv = self.get(at, a, "IV", Kind::Hex, false);
        if let Some(iv) = &iv {
            self.need(2, "the IV attribute of EXT-X-KEY");
            if iv.len() > 34 {
                self.must("4.4.4.4", n, "the IV is a 128-bit number");
            }
            if matches!(method.as_str(), "AES-256-GCM" | "SAMPLE-AES-CTR") {
                self.must("4.4.4.4", n, format!("METHOD={method} MUST NOT have an IV"));
            }
        }
        if method == "SAMPLE-AES" || value.contains("KEYFORMAT") {
            self.need(5, "SAMPLE-AES or KEYFORMAT(VERSIONS) on EXT-X-KEY");
        }
        (st.key, st.key_aes128_no_iv) = (Some(value.to_string()), method == "AES-128" && iv.is_none());
    }

    fn part(&mut self, n: usize, value: &str, st: &mut State) {
        st.first_segment.get_or_insert(n);
        let Some(a) = self.attrs(n, value) else {
            st.cur.part_error = true;
            return;
        };
        let at = ("4.4.4.9", n);
        let uri = self.get(at, &a, "URI", Kind::Quoted, true);
        let duration = self.get(at, &a, "DURATION", Kind::Float, true);
        let independent = self.get(at, &a, "INDEPENDENT", Kind::Yes, false).is_some();
        let gap = self.get(at, &a, "GAP", Kind::Yes, false).is_some();
        let range = self.get(at, &a, "BYTERANGE", Kind::Quoted, false);
        let range = range.and_then(|r| {
            let b = byterange(&r);
            if b.is_none() {
                self.must("4.4.4.9", n, "BYTERANGE has the format of EXT-X-BYTERANGE, \"<n>[@<o>]\"");
            }
            b
        });
        if let Some((_, None)) = range {
            if !st.cur.parts.last().is_some_and(|p| p.byterange.is_some() && Some(&p.uri) == uri.as_ref()) {
                self.must(
                    "4.4.4.9",
                    n,
                    "BYTERANGE without an offset continues the previous part of its Parent \
                     Segment on the same URI: there is none (4.4.4.2)",
                );
            }
        }
        let Some((d, text)) = duration.as_deref().and_then(|t| Some((float(t)?, t))) else {
            st.cur.part_error = true;
            return;
        };
        let part = Part {
            uri: uri.unwrap_or_default(),
            duration: d,
            slack: slack(text),
            independent,
            gap,
            byterange: range,
            line: n,
        };
        st.cur.parts.push(part);
    }

    fn date_value(&mut self, sec: &str, n: usize, what: &str, v: &str) -> Option<i64> {
        match date(v) {
            Some((ms, tz, frac)) => {
                if !(tz && frac) {
                    self.should(sec, n, format!("{what} should have a time zone and milliseconds"));
                }
                Some(ms)
            }
            None => {
                self.must(sec, n, format!("{what} `{v}` is not an ISO/IEC 8601 date-time"));
                None
            }
        }
    }

    fn daterange(&mut self, n: usize, value: &str, st: &mut State) {
        let Some(a) = self.attrs(n, value) else { return };
        let at = ("4.4.5.1", n);
        let Some(id) = self.get(at, &a, "ID", Kind::Quoted, true) else { return };
        let mut merged = st.ranges.remove(&id).unwrap_or_default();
        for (name, v, _) in &a {
            if merged.iter().any(|(x, pv)| x == name && pv != v) {
                self.must(
                    "4.4.5.1",
                    n,
                    format!("{name} differs from that of the earlier EXT-X-DATERANGE with this ID"),
                );
            }
        }
        let had_start = merged.iter().any(|(x, _)| x == "START-DATE");
        self.get(at, &a, "START-DATE", Kind::Quoted, !had_start);
        for name in ["END-DATE", "CLASS", "CUE"] {
            self.get(at, &a, name, Kind::Quoted, false);
        }
        for name in ["DURATION", "PLANNED-DURATION"] {
            self.get(at, &a, name, Kind::Float, false);
        }
        let end_on_next = self.get(at, &a, "END-ON-NEXT", Kind::Yes, false).is_some();
        for (name, v, quoted) in &a {
            let signed = float(v.strip_prefix('-').unwrap_or(v)).is_some();
            if name.starts_with("X-") && !(*quoted || hex(v) || signed) {
                self.must(
                    "4.4.5.1",
                    n,
                    format!("{name}: an X- value is a quoted-string, hexadecimal-sequence or signed float"),
                );
            }
            if name.starts_with("SCTE35-") && (*quoted || !hex(v)) {
                self.must("4.4.5.1", n, format!("{name} is a hexadecimal-sequence (4.4.5.1.1)"));
            }
            if !merged.iter().any(|(x, _)| x == name) {
                merged.push((name.clone(), v.clone()));
            }
        }
        let attr = |name: &str| merged.iter().find(|(x, _)| x == name).map(|(_, v)| v.clone());
        let start = attr("START-DATE").and_then(|v| self.date_value("4.4.5.1", n, "START-DATE", &v));
        let end_date = attr("END-DATE").and_then(|v| self.date_value("4.4.5.1", n, "END-DATE", &v));
        let duration = attr("DURATION").and_then(|v| float(&v)).map(|d| (d * 1000.0).round() as i64);
        if end_date.zip(start).is_some_and(|(e, s)| e < s) {
            self.must("4.4.5.1", n, "END-DATE MUST be equal to or later than START-DATE");
        }
        if let (Some(s), Some(e), Some(d)) = (start, end_date, duration) {
            if (e - s).saturating_sub(d).saturating_abs() > 1 {
                self.must(
                    "4.4.5.1",
                    n,
                    "with DURATION and END-DATE, END-DATE MUST be START-DATE plus DURATION",
                );
            }
        }
        if let Some(cue) = attr("CUE") {
            if cue.split(',').any(|c| c == "PRE") && cue.split(',').any(|c| c == "POST") {
                self.must("4.4.5.1", n, "a CUE MUST NOT include both PRE and POST");
            }
        }
        let end_on_next = end_on_next || attr("END-ON-NEXT").is_some();
        if end_on_next && attr("CLASS").is_none() {
            self.must("4.4.5.1", n, "an END-ON-NEXT=YES range MUST have a CLASS");
        }
        if end_on_next && (attr("DURATION").is_some() || attr("END-DATE").is_some()) {
            self.must("4.4.5.1", n, "an END-ON-NEXT=YES range MUST NOT have DURATION or END-DATE");
        }
        let end = end_date.or(start.zip(duration).map(|(s, d)| s.saturating_add(d)));
        self.dateranges.retain(|r| r.id != id);
        self.dateranges.push(DateRange {
            id: id.clone(),
            class: attr("CLASS"),
            start,
            end,
            end_on_next,
            line: n,
        });
        st.ranges.insert(id, merged);
    }

    fn uri_line(&mut self, n: usize, line: &str, st: &mut State) {
        st.first_segment.get_or_insert(n);
        if !std::mem::take(&mut st.extinf) {
            self.must("4.4.4.1", n, "EXTINF is REQUIRED for each Media Segment");
        }
        let mut seg = std::mem::take(&mut st.cur);
        if let Some((_, None)) = seg.byterange {
            if !self.segments.last().is_some_and(|p| p.byterange.is_some() && p.uri.as_deref() == Some(line))
            {
                self.must(
                    "4.4.4.2",
                    n,
                    "a BYTERANGE without offset MUST follow a sub-range of the same resource",
                );
            }
        }
        (seg.uri, seg.line, seg.map, seg.key) = (Some(line.to_string()), n, st.map.clone(), st.key.clone());
        self.segments.push(seg);
    }

    fn finish(&mut self, mut st: State) {
        if !st.cur.parts.is_empty() || st.cur.part_error {
            let mut seg = std::mem::take(&mut st.cur);
            seg.duration = seg.parts.iter().map(|p| p.duration).sum();
            seg.line = seg.parts.first().map_or(0, |p| p.line);
            (seg.map, seg.key) = (st.map.clone(), st.key.clone());
            self.segments.push(seg);
        }
        if st.extinf {
            self.must("4.4.4.1", 0, "the last EXTINF has no URI line: its Media Segment is missing");
        }
        if st.map_seen {
            self.need(if st.i_frames { 5 } else { 6 }, "EXT-X-MAP");
        }
        let first_msn = self.ms().saturating_add(self.skipped_segments.unwrap_or(0));
        let mut dsn = self.ds();
        for (i, s) in self.segments.iter_mut().enumerate() {
            dsn = dsn.saturating_add(u64::from(s.discontinuity));
            (s.msn, s.dsn) = (first_msn.saturating_add(i as u64), dsn);
        }
        let mut o = std::mem::take(&mut self.out);
        media_checks(self, &mut o, &st.tag_lines);
        self.out = o;
    }
}

/// The rules over the whole of one playlist.
fn media_checks(p: &Playlist, o: &mut Out, tag_lines: &HashMap<String, usize>) {
    let line = |tag: &str| tag_lines.get(tag).copied().unwrap_or(0);
    let (sc, part_inf, skip) = (line("#EXT-X-SERVER-CONTROL"), line("#EXT-X-PART-INF"), line("#EXT-X-SKIP"));
    let td = p.target_duration.map(|t| t as f64);
    match td {
        None if p.global("#EXT-X-TARGETDURATION").is_none() => {
            o.must("4.4.3.1", p.at(0), "EXT-X-TARGETDURATION is REQUIRED")
        }
        None => {}
        Some(td) => {
            for s in p.complete().filter(|s| s.duration.round() > td) {
                o.must(
                    "4.4.3.1",
                    p.at(s.line),
                    format!("EXTINF {} rounds above the Target Duration", s.duration_text),
                );
            }
        }
    }
    if let (Some(csu), Some(td)) = (p.can_skip_until, td) {
        if csu < 6.0 * td - EPS {
            o.must(
                "4.4.3.8",
                p.at(sc),
                format!("CAN-SKIP-UNTIL {csu} MUST be at least six Target Durations"),
            );
        }
    }
    if p.can_skip_dateranges && p.can_skip_until.is_none() {
        o.must("4.4.3.8", p.at(sc), "CAN-SKIP-DATERANGES REQUIRES CAN-SKIP-UNTIL");
    }
    if let (Some(hb), Some(td)) = (p.hold_back, td) {
        if hb < 3.0 * td - EPS {
            o.must("4.4.3.8", p.at(sc), format!("HOLD-BACK {hb} MUST be at least three Target Durations"));
        }
    }
    if part_inf > 0 {
        match (p.part_hold_back, p.part_target) {
            (None, _)
                if !p.global("#EXT-X-SERVER-CONTROL").is_some_and(|v| v.contains("PART-HOLD-BACK=")) =>
            {
                o.must("4.4.3.8", p.at(sc), "PART-HOLD-BACK is REQUIRED with EXT-X-PART-INF")
            }
            (Some(phb), Some(pt)) if phb < 2.0 * pt - EPS => o.must(
                "4.4.3.8",
                p.at(sc),
                format!("PART-HOLD-BACK {phb} MUST be at least twice PART-TARGET {pt}"),
            ),
            (Some(phb), Some(pt)) if phb < 3.0 * pt - EPS => o.should(
                "4.4.3.8",
                p.at(sc),
                format!("PART-HOLD-BACK {phb} should be at least 3 PART-TARGET {pt}"),
            ),
            _ => {}
        }
    }
    part_checks(p, o, part_inf);
    let (need, why) = &p.version_needed;
    match p.version {
        None if *need > 1 => {
            o.must("4.4.1.2", p.at(0), format!("no EXT-X-VERSION, yet {why} needs {need} (8)"))
        }
        Some(v) if v < *need => {
            o.must("8", p.at(line("#EXT-X-VERSION")), format!("{why} needs EXT-X-VERSION {need} or higher"))
        }
        Some(v) if v > *need => {
            o.should("6.2.1", p.at(line("#EXT-X-VERSION")), format!("version {v}; the tags need {need}"))
        }
        _ => {}
    }
    if skip > 0 {
        if p.can_skip_until.is_none() || p.endlist {
            o.must(
                "6.2.5.1",
                p.at(skip),
                "EXT-X-SKIP without CAN-SKIP-UNTIL or with EXT-X-ENDLIST: _HLS_skip MUST be ignored",
            );
        }
        if p.recently_removed_dateranges.is_some() && !p.can_skip_dateranges {
            o.must(
                "6.2.5.1",
                p.at(skip),
                "RECENTLY-REMOVED-DATERANGES (date ranges skipped) needs CAN-SKIP-DATERANGES=YES",
            );
        }
    }
    for h in p.hints.iter().filter(|_| p.endlist) {
        o.must("4.4.5.3", p.at(h.line), "a Playlist with EXT-X-ENDLIST MUST NOT contain EXT-X-PRELOAD-HINT");
    }
    for kind in ["PART", "MAP"] {
        if let Some(h) = p.hints.iter().filter(|h| h.kind == kind).nth(1) {
            o.should("6.2.6", p.at(h.line), format!("more than one EXT-X-PRELOAD-HINT of TYPE={kind}"));
        }
    }
    let has_parts = p.segments.iter().any(|s| !s.parts.is_empty());
    // A hint tag too broken to read is reported as such, not again here.
    let hinted = p.hints.iter().any(|h| h.kind == "PART")
        || p.hints.len() < p.lines.iter().filter(|l| l.starts_with("#EXT-X-PRELOAD-HINT:")).count();
    if part_inf > 0 && !p.endlist && has_parts && !hinted {
        o.must("B.1", p.at(0), "with parts and no EXT-X-ENDLIST, an EXT-X-PRELOAD-HINT names the next part");
    }
    if part_inf > 0 && !p.segments.iter().any(|s| s.pdt.is_some()) {
        o.must("B.1", p.at(0), "every Low-Latency Media Playlist has EXT-X-PROGRAM-DATE-TIME tags");
    }
    if p.playlist_type.as_deref() == Some("VOD") && !p.endlist {
        o.must("6.2.1", p.at(0), "a VOD playlist holds the final segment, so it MUST have EXT-X-ENDLIST");
    }
    if p.ms() > 0 && p.discontinuity_sequence.is_none() && p.segments.iter().any(|s| s.discontinuity) {
        o.should(
            "6.2.2",
            p.at(0),
            "EXT-X-DISCONTINUITY, MEDIA-SEQUENCE above 0, no DISCONTINUITY-SEQUENCE: a MUST if any removed",
        );
    }
    if let Some(r) = p.dateranges.first().filter(|_| !p.segments.iter().any(|s| s.pdt.is_some())) {
        o.must(
            "4.4.5.1",
            p.at(r.line),
            "a Playlist with EXT-X-DATERANGE MUST contain EXT-X-PROGRAM-DATE-TIME",
        );
    }
    let mut classes: Vec<&DateRange> =
        p.dateranges.iter().filter(|r| r.class.is_some() && r.start.is_some()).collect();
    classes.sort_by_key(|r| (r.class.clone(), r.start));
    for w in classes.windows(2).filter(|w| w[0].class == w[1].class) {
        let eon = p.dateranges.iter().any(|r| r.end_on_next && r.class == w[0].class);
        if eon && !w[0].end_on_next && w[0].end.zip(w[1].start).is_some_and(|(e, s)| e > s) {
            o.must("4.4.5.1", p.at(w[1].line), "ranges of a CLASS with END-ON-NEXT=YES MUST NOT overlap");
        }
    }
}

fn part_checks(p: &Playlist, o: &mut Out, part_inf: usize) {
    let first = p.segments.iter().position(|s| !s.parts.is_empty());
    let Some(pt) = p.part_target else {
        if let Some(s) = first.filter(|_| part_inf == 0).map(|i| &p.segments[i]) {
            o.must(
                "4.4.3.7",
                p.at(s.parts[0].line),
                "EXT-X-PART-INF is REQUIRED when there are EXT-X-PART tags",
            );
        }
        return;
    };
    if let Some(s) = first.filter(|_| p.global("#EXT-X-I-FRAMES-ONLY").is_some()).map(|i| &p.segments[i]) {
        o.should(
            "4.4.4.9",
            p.at(s.parts[0].line),
            "Playlists with EXT-X-I-FRAMES-ONLY should not use Partial Segments",
        );
    }
    for s in &p.segments {
        for (i, part) in s.parts.iter().enumerate() {
            if part.duration > pt + EPS {
                o.must(
                    "4.4.4.9",
                    p.at(part.line),
                    format!("DURATION {} exceeds the Part Target Duration {pt}", part.duration),
                );
            }
            let last_or_before_gap = s.parts.get(i + 1).is_none_or(|next| next.gap);
            if !(part.independent || part.gap || last_or_before_gap) && part.duration < 0.85 * pt - EPS {
                o.must(
                    "4.4.4.9",
                    p.at(part.line),
                    format!("DURATION {} is under 85% of the Part Target Duration {pt}", part.duration),
                );
            }
        }
    }
    let Some(first) = first else { return };
    for (i, s) in p.segments.iter().enumerate().skip(first).filter(|(_, s)| s.uri.is_some() && !s.part_error)
    {
        if s.parts.is_empty() {
            o.must(
                "6.2.2",
                p.at(s.line),
                "no EXT-X-PART after a segment with them: parts are removed in order",
            );
            break;
        }
        let sum: f64 = s.parts.iter().map(|x| x.duration).sum();
        let tol = s.slack + s.parts.iter().map(|x| x.slack).sum::<f64>() + EPS;
        if sum > s.duration + tol || (i != first && sum < s.duration - tol) {
            o.must(
                "3.2",
                p.at(s.line),
                format!("its parts add up to {sum:.5} s, its EXTINF is {}", s.duration_text),
            );
        }
    }
    let (starts, end) = p.timeline();
    let (Some(td), mut old) = (p.target_duration, Vec::new()) else { return };
    for (s, start) in p.segments.iter().zip(starts) {
        let mut part_start = start + s.duration - s.parts.iter().map(|x| x.duration).sum::<f64>();
        for part in &s.parts {
            if end - part_start > 3.0 * td as f64 + 1e-3 {
                old.push(part.line);
            }
            part_start += part.duration;
        }
    }
    if let Some(line) = old.first() {
        let what =
            format!("{} EXT-X-PART tags start more than three Target Durations from the end", old.len());
        o.should("6.2.2", p.at(*line), what);
    }
}

/// Rules across two successive versions of one media playlist (`earlier` fetched first).
pub fn check_update(earlier: &str, later: &str) -> Vec<String> {
    update(earlier, later).must
}

/// The SHOULD-level findings across two versions (parts removed within 3 TD of the end).
pub fn check_update_should(earlier: &str, later: &str) -> Vec<String> {
    update(earlier, later).should
}

fn both(a: &str, b: &str) -> Result<(Playlist, Playlist), Out> {
    match (parse(a), parse(b)) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), _) | (_, Err(e)) => Err(Out { must: vec![e], should: vec![] }),
    }
}

/// What differs between two listings of one segment, beyond its URI.
/// While a segment is being built only the tags before its first part are out: EXTINF,
/// EXT-X-BYTERANGE and EXT-X-GAP may still be appended.
fn seg_diffs(a: &Segment, b: &Segment) -> Vec<&'static str> {
    let whole = a.uri.is_some() && b.uri.is_some();
    let checks = [
        (whole && a.duration_text != b.duration_text, "EXTINF"),
        (whole && a.byterange != b.byterange, "EXT-X-BYTERANGE"),
        (a.pdt != b.pdt, "EXT-X-PROGRAM-DATE-TIME"),
        (a.map != b.map, "EXT-X-MAP"),
        (a.key != b.key, "EXT-X-KEY"),
        (whole && a.gap != b.gap, "EXT-X-GAP"),
        (a.discontinuity != b.discontinuity, "EXT-X-DISCONTINUITY"),
    ];
    checks.iter().filter(|(d, _)| *d).map(|(_, w)| *w).collect()
}

fn update(earlier: &str, later: &str) -> Out {
    let (a, b) = match both(earlier, later) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let mut o = Out::default();
    let (pa, pb) = (|n| a.place("earlier", n), |n| b.place("later", n));
    if a.skipped_segments.is_some() || b.skipped_segments.is_some() {
        o.must(
            "6.2.5.1",
            pb(0),
            "a Playlist Delta Update: check_update compares full playlists (see check_delta)",
        );
        return o;
    }
    if a.playlist_type.as_deref() == Some("VOD") {
        let text =
            |p: &Playlist| p.lines.iter().filter(|l| !l.trim().is_empty()).cloned().collect::<Vec<_>>();
        if text(&a) != text(&b) {
            o.must("6.2.1", pb(0), "a VOD Playlist file MUST NOT change");
        }
        return o;
    }
    for tag in GLOBAL.into_iter().filter(|t| a.global(t) != b.global(t)) {
        let what = format!("{tag} was {:?}, is {:?}: {NO_CHANGE}", a.global(tag), b.global(tag));
        o.must("6.2.1", pb(0), what);
    }
    if a.endlist && !b.endlist {
        o.must("6.2.1", pb(0), "EXT-X-ENDLIST was removed");
    }
    let (ams, bms) = (a.ms(), b.ms());
    if bms < ams {
        o.must(
            "6.2.2",
            pb(0),
            format!("EXT-X-MEDIA-SEQUENCE went from {ams} to {bms}: it MUST NOT decrease"),
        );
    }
    if bms > ams {
        if a.media_sequence.is_none() || b.media_sequence.is_none() {
            o.must("6.2.2", pb(0), "segments were removed: the Playlist MUST contain EXT-X-MEDIA-SEQUENCE");
        }
        if let Some(td) = b.target_duration.filter(|td| !b.endlist && b.duration() < 3.0 * *td as f64 - 1e-3)
        {
            o.must(
                "6.2.2",
                pb(0),
                format!(
                    "segments were removed leaving {:.3} s, under three Target Durations ({td} s)",
                    b.duration()
                ),
            );
        }
        let disc = a.segments.iter().chain(&b.segments).any(|s| s.discontinuity);
        if disc && b.discontinuity_sequence.is_none() {
            o.must(
                "6.2.2",
                pb(0),
                "segments were removed, there are discontinuities: EXT-X-DISCONTINUITY-SEQUENCE is a MUST",
            );
        }
        if b.playlist_type.is_some() {
            o.must(
                "6.2.2",
                pb(0),
                "segments were removed: a Live Playlist MUST NOT contain EXT-X-PLAYLIST-TYPE (6.2.1)",
            );
        }
    }
    let ds_down = b.ds() < a.ds();
    if ds_down {
        o.must("6.2.2", pb(0), "EXT-X-DISCONTINUITY-SEQUENCE MUST NOT decrease");
    }
    let by_msn: HashMap<u64, &Segment> = b.segments.iter().map(|s| (s.msn, s)).collect();
    let (mut dsn_told, mut changed) = (ds_down, Vec::new());
    for s in &a.segments {
        let t = by_msn.get(&s.msn).copied();
        let uri = s.uri.as_deref().unwrap_or("(being built)");
        if s.uri.is_some() && t.is_none_or(|t| t.uri.is_none()) && s.msn >= bms {
            o.must(
                "6.2.2",
                pa(s.line),
                format!(
                    "MSN {} is gone from the later version: segments leave from the start, in order",
                    s.msn
                ),
            );
            break;
        }
        let Some(t) = t else { continue };
        if s.uri.is_some() && t.uri.is_some() && t.uri != s.uri {
            let what = format!(
                "MSN {} was {uri}, is {}: Media Sequence Numbers MUST stay consistent and unique",
                s.msn,
                t.uri.as_deref().unwrap_or("")
            );
            o.must("6.2.2", pb(t.line), what);
            continue;
        }
        let diffs = seg_diffs(s, t);
        if !diffs.is_empty() {
            changed.push((t.line, format!("{uri} (MSN {}) changed its {}", s.msn, diffs.join(", "))));
        }
        if !dsn_told && s.dsn != t.dsn {
            let what = format!("{uri}'s Discontinuity Sequence Number went from {} to {}", s.dsn, t.dsn);
            o.must("6.2.2", pb(t.line), what);
            dsn_told = true;
        }
    }
    if let Some((line, what)) = changed.first() {
        let what = format!("{what} ({} segments changed): {NO_CHANGE}", changed.len());
        o.must("6.2.1", pb(*line), what);
    }
    if a.endlist && b.complete().last().map(|s| s.msn) > a.complete().last().map(|s| s.msn) {
        o.must("4.4.3.4", pb(0), "media was added after EXT-X-ENDLIST");
    }
    parts_update(&a, &b, &mut o);
    o
}

/// Parts across two versions: kept ones unchanged, removed in order and off the live edge, the
/// first new one where the hint said.
fn parts_update(a: &Playlist, b: &Playlist, o: &mut Out) {
    let flat = |p: &Playlist| -> Vec<(u64, Part)> {
        p.segments.iter().flat_map(|s| s.parts.iter().map(|x| (s.msn, x.clone()))).collect()
    };
    let (fa, fb) = (flat(a), flat(b));
    let (pa, pb) = (|n| a.place("earlier", n), |n| b.place("later", n));
    let start = fb.first().and_then(|(m, x)| fa.iter().position(|(n, y)| n == m && y.uri == x.uri));
    if start.is_none() {
        if let Some((_, x)) = fa.iter().find(|(_, x)| fb.iter().any(|(_, y)| y.uri == x.uri)) {
            o.must(
                "6.2.2",
                pa(x.line),
                format!("{} stays but parts before it went: EXT-X-PART tags MUST be removed in order", x.uri),
            );
            return;
        }
    }
    let i = start.unwrap_or(fa.len());
    for (k, (m, x)) in fa[i..].iter().enumerate() {
        match fb.get(k) {
            Some((n, y)) if n == m && y.uri == x.uri => {
                if *y != (Part { line: y.line, ..x.clone() }) {
                    o.must("6.2.1", pb(y.line), format!("EXT-X-PART {} changed", x.uri));
                }
            }
            _ => {
                o.must(
                    "6.2.2",
                    pa(x.line),
                    format!(
                        "{} is gone while older parts stay: EXT-X-PART tags MUST be removed in order",
                        x.uri
                    ),
                );
                return;
            }
        }
    }
    let complete: HashSet<u64> = b.complete().map(|s| s.msn).collect();
    if let Some((m, x)) = fa[..i].iter().find(|(m, _)| *m >= b.ms() && !complete.contains(m)) {
        let what = format!("{} (MSN {m}) was removed, its Parent Segment unfinished: {LIVE_EDGE}", x.uri);
        o.must("6.2.1", pa(x.line), what);
    }
    let (starts, end) = b.timeline();
    for (m, x) in fa[..i].iter().rev() {
        let Some((j, s)) = b.segments.iter().enumerate().find(|(_, s)| s.msn == *m) else { continue };
        let from =
            a.segments.iter().find(|s| s.msn == *m).map_or(0.0, |s| {
                s.parts.iter().skip_while(|y| y.uri != x.uri).map(|y| y.duration).sum::<f64>()
            });
        let distance = end - (starts[j] + s.duration - from);
        if b.target_duration.is_some_and(|td| distance < 3.0 * td as f64 - 1e-3) {
            let what =
                format!("{} was removed {distance:.3} s from the end, within 3 TD: {LIVE_EDGE}", x.uri);
            o.should("6.2.2", pa(x.line), what);
        }
        break;
    }
    let Some((m, new)) = fb.get(fa.len() - i) else { return };
    if a.endlist {
        o.must("4.4.3.4", pb(new.line), "a part was added after EXT-X-ENDLIST");
    }
    let Some(h) = a.hints.iter().find(|h| h.kind == "PART") else { return };
    let start_differs = h.start.zip(new.byterange.and_then(|r| r.1)).is_some_and(|(s, o)| s != o);
    if h.uri != new.uri || start_differs {
        let what = format!(
            "EXT-X-PRELOAD-HINT named {}, the part added is {}: the hinted URI MUST match",
            h.uri, new.uri
        );
        o.must("4.4.5.3", pa(h.line), what);
    }
    let new_map = b.segments.iter().find(|s| s.msn == *m).and_then(|s| s.map.clone());
    let Some(old) = a.segments.iter().rev().find(|s| !s.parts.is_empty()) else { return };
    if new_map != old.map && !a.hints.iter().any(|h| h.kind == "MAP" && Some(&h.uri) == new_map.as_ref()) {
        let what = format!(
            "the hinted part has a new EXT-X-MAP {new_map:?}: the Playlist also hints it with TYPE=MAP"
        );
        o.must("B.1", pa(h.line), what);
    }
}

/// A Playlist Delta Update (`_HLS_skip=YES`) against the full playlist fetched just before or after.
pub fn check_delta(full: &str, delta: &str) -> Vec<String> {
    delta_update(full, delta).must
}

/// The SHOULD-level findings of a delta update.
pub fn check_delta_should(full: &str, delta: &str) -> Vec<String> {
    delta_update(full, delta).should
}

fn delta_update(full: &str, delta: &str) -> Out {
    let (f, d) = match both(full, delta) {
        Ok(x) => x,
        Err(o) => return o,
    };
    let mut o = Out::default();
    let at = |n| d.place("delta", n);
    let skip_line = d.lines.iter().position(|l| l.starts_with("#EXT-X-SKIP")).map_or(0, |i| i + 1);
    if f.skipped_segments.is_some() {
        o.must("6.2.5.1", f.place("full", 0), "the first playlist is itself a delta update");
        return o;
    }
    let Some(csu) = f.can_skip_until.filter(|_| !f.endlist) else {
        if skip_line > 0 {
            o.must(
                "6.2.5.1",
                at(skip_line),
                "the playlist has no CAN-SKIP-UNTIL or has EXT-X-ENDLIST: the server MUST ignore _HLS_skip",
            );
        }
        return o;
    };
    for tag in GLOBAL.into_iter().filter(|t| *t != "#EXT-X-VERSION" && f.global(t) != d.global(t)) {
        let what =
            format!("{tag} is {:?} in the full playlist, {:?} here: {REMAIN}", f.global(tag), d.global(tag));
        o.must("6.2.5.1", at(0), what);
    }
    let by_msn: HashMap<u64, &Segment> = f.segments.iter().map(|s| (s.msn, s)).collect();
    let mut changed = Vec::new();
    for s in &d.segments {
        let Some(t) = by_msn.get(&s.msn) else { continue };
        let name = s.uri.as_deref().unwrap_or("the segment being built");
        if s.uri.is_some() && t.uri.is_some() && s.uri != t.uri {
            let full_uri = t.uri.as_deref().unwrap_or("");
            let what = format!("SKIPPED-SEGMENTS puts {name} at MSN {}, the full playlist {full_uri}", s.msn);
            o.must("4.4.5.2", at(s.line), what);
            return o;
        }
        let mut diffs = seg_diffs(t, s);
        let same_part = |x: &Part, y: &Part| x == &Part { line: x.line, ..y.clone() };
        if s.parts.iter().any(|y| t.parts.iter().any(|x| x.uri == y.uri && !same_part(x, y))) {
            diffs.push("EXT-X-PART tags");
        }
        if !diffs.is_empty() {
            changed.push((s.line, format!("{name} differs from the full playlist in {}", diffs.join(", "))));
        }
    }
    if let Some((line, what)) = changed.first() {
        let what = format!("{what} ({} segments differ): {REMAIN}", changed.len());
        o.must("6.2.5.1", at(*line), what);
    }
    let same_time = f.ms() == d.ms() && f.last_position() == d.last_position();
    if f.ms() == d.ms() && f.ds() != d.ds() {
        o.must("4.4.5.2", at(0), "EXT-X-SKIP does not change EXT-X-DISCONTINUITY-SEQUENCE");
    }
    if same_time {
        let tail = &f.segments[f.segments.len().saturating_sub(d.segments.len())..];
        let strip = |h: &[Hint]| h.iter().map(|h| (h.kind.clone(), h.uri.clone())).collect::<Vec<_>>();
        let reports =
            |p: &Playlist| p.reports.iter().map(|r| Report { line: 0, ..r.clone() }).collect::<Vec<_>>();
        let checks = [
            (part_uris(tail) != part_uris(&d.segments), "EXT-X-PART tags"),
            (strip(&f.hints) != strip(&d.hints), "EXT-X-PRELOAD-HINT tags"),
            (reports(&f) != reports(&d), "EXT-X-RENDITION-REPORT tags"),
        ];
        for (_, what) in checks.iter().filter(|(differs, _)| *differs) {
            o.must(
                "6.2.5.1",
                at(0),
                format!("{what} differ from the full playlist's of that moment: {REMAIN}"),
            );
        }
        if d.recently_removed_dateranges.is_none() {
            for r in f.dateranges.iter().filter(|r| !d.dateranges.iter().any(|x| x.id == r.id)) {
                o.must(
                    "6.2.5.1",
                    at(0),
                    format!("EXT-X-DATERANGE {} is missing: _HLS_skip=YES skips no date ranges", r.id),
                );
            }
        }
    }
    let listed: Vec<&Segment> = d.complete().collect();
    let total: f64 = listed.iter().map(|s| s.duration).sum();
    let tol = listed.iter().map(|s| s.slack).sum::<f64>() + 1e-6;
    let skipped = d.skipped_segments.unwrap_or(0);
    if let Some(t) =
        skipped.checked_sub(1).and_then(|k| by_msn.get(&d.ms().saturating_add(k))).filter(|t| t.uri.is_some())
    {
        let distance = total + t.duration;
        if distance < csu - tol - t.slack {
            let uri = t.uri.as_deref().unwrap_or("");
            let what =
                format!("{uri} was skipped, starting {distance:.5} s from the end, within the Skip Boundary");
            o.must("6.2.5.1", at(skip_line), what);
        }
    }
    if let Some(first) = listed.first() {
        let distance = total - first.duration;
        if distance > csu + tol {
            let uri = first.uri.as_deref().unwrap_or("");
            let what =
                format!("{uri} ends {distance:.5} s from the end, beyond the Skip Boundary: it is skipped");
            o.must("6.2.5.1", at(first.line), what);
        }
    }
    if d.recently_removed_dateranges.is_some() {
        o.should(
            "6.2.5.1",
            at(skip_line),
            "RECENTLY-REMOVED-DATERANGES answers _HLS_skip=v2, not the YES asked",
        );
    }
    o
}

fn part_uris(segments: &[Segment]) -> Vec<Vec<&str>> {
    segments.iter().map(|s| s.parts.iter().map(|x| x.uri.as_str()).collect()).collect()
}

/// How many parts apart two positions are in `q` (unknown segments count as its usual size).
fn part_distance(q: &Playlist, x: (u64, u64), y: (u64, u64)) -> u64 {
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    if lo.0 == hi.0 {
        return hi.1 - lo.1;
    }
    if hi.0 - lo.0 > 10_000 {
        return u64::MAX;
    }
    let between: u64 = (lo.0 + 1..hi.0).map(|m| q.part_count(m)).sum();
    let rest = q.part_count(lo.0).saturating_sub(lo.1.saturating_add(1));
    rest.saturating_add(between).saturating_add(hi.1).saturating_add(1)
}

/// Each EXT-X-RENDITION-REPORT of `text` against the renditions' playlists fetched about the same
/// time, `others` naming each by the URI the reports use. Positions may differ by up to
/// `tolerance_parts` parts (or one segment for renditions without parts, if the tolerance is not 0).
pub fn check_rendition_reports(text: &str, others: &[(&str, &str)], tolerance_parts: u64) -> Vec<String> {
    let p = match parse(text) {
        Ok(p) => p,
        Err(e) => return vec![e],
    };
    let mut o = Out::default();
    let own = p.last_position();
    for r in &p.reports {
        let at = p.at(r.line);
        let Some((_, t)) = others.iter().find(|(u, _)| *u == r.uri) else {
            let known: Vec<&str> = others.iter().map(|(u, _)| *u).collect();
            o.must(
                "4.4.5.4",
                at,
                format!("URI {} is none of the renditions given ({})", r.uri, known.join(", ")),
            );
            continue;
        };
        let q = match parse(t) {
            Ok(q) => q,
            Err(e) => {
                o.must("4.4.5.4", at, format!("the playlist of {} does not parse: {e}", r.uri));
                continue;
            }
        };
        let Some((qm, qp)) = q.last_position() else { continue };
        // An attribute equal to this playlist's own report may be left out (4.4.5.4).
        let (Some(msn), part) = (r.last_msn.or(own.map(|x| x.0)), r.last_part.or(own.and_then(|x| x.1)))
        else {
            o.must("4.4.5.4", at, "LAST-MSN is REQUIRED");
            continue;
        };
        match (qp, part) {
            (Some(_), None) => {
                o.must("4.4.5.4", at, format!("{} has Partial Segments: LAST-PART is REQUIRED", r.uri))
            }
            (None, Some(_)) if r.last_part.is_some() => {
                o.must("4.4.5.4", at, format!("LAST-PART, yet {} has no Partial Segments", r.uri))
            }
            (None, _) => {
                if msn.abs_diff(qm) > u64::from(tolerance_parts > 0) {
                    o.must("4.4.5.4", at, format!("LAST-MSN {msn}; the last segment of {} is {qm}", r.uri));
                }
            }
            (Some(qp), Some(part)) => {
                let first = q.segments.iter().position(|s| !s.parts.is_empty());
                let whole = q
                    .segments
                    .iter()
                    .enumerate()
                    .find(|(i, s)| s.msn == msn && s.uri.is_some() && Some(*i) != first);
                if let Some((_, s)) = whole.filter(|(_, s)| part >= s.parts.len() as u64) {
                    let what = format!(
                        "LAST-MSN {msn}, LAST-PART {part}: that segment of {} has {} parts",
                        r.uri,
                        s.parts.len()
                    );
                    o.must("4.4.5.4", at, what);
                    continue;
                }
                let distance = part_distance(&q, (msn, part), (qm, qp));
                if distance > tolerance_parts {
                    let side = if (msn, part) > (qm, qp) { "ahead of" } else { "behind" };
                    let what =
                        format!("{msn}.{part} is {distance} parts {side} {}'s last part, {qm}.{qp}", r.uri);
                    o.must("4.4.5.4", at, what);
                }
            }
        }
    }
    if p.part_target.is_some() {
        for (uri, _) in others {
            let count = p.reports.iter().filter(|r| r.uri == *uri).count();
            if count != 1 {
                o.must(
                    "B.1",
                    p.at(0),
                    format!("{count} EXT-X-RENDITION-REPORT tags for {uri}: one for each rendition"),
                );
            }
        }
    }
    o.must
}

#[cfg(test)]
#[path = "llhls_check_tests.rs"]
mod tests;
