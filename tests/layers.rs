//! The layers of `src/` point one way (shared/STYLE.md: Layers; docs/architecture.md): every
//! `crate::<module>` a file names, in a `use` or a path, must be of a lower layer than its own
//! module, or one of the few same-layer edges listed here. No cycle can form that way. Also: no
//! file in `src/` is over 600 lines. Pure: reads the sources, needs nothing else.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each top-level module of the crate and its layer, lowest first.
const LAYERS: &[(&str, u8)] = &[
    ("domain", 0),
    // Leaf utilities with no state of the service: usable by everything above the domain.
    ("client_ip", 1),
    ("password_gate", 1),
    ("slots", 1),
    ("ratelimit", 1),
    ("metrics", 1),
    ("tls", 1),
    ("config", 2),
    ("store", 3),
    ("storage", 3),
    ("events", 4),
    ("services", 5),
    // The protocol edges: media (ingest, live ladder, transcode) and the HTTP edges that serve
    // media (the origin, the upload target).
    ("media", 6),
    ("playback", 6),
    ("upload", 6),
    // The console: static files embedded at build time.
    ("console", 6),
    ("api", 7),
    ("app", 8),
    ("cli", 9),
];

/// Same-layer imports that are allowed: the origin serves what the live ladder packaged.
/// (`media` never imports `playback`.)
const SAME_LAYER: &[(&str, &str)] = &[("playback", "media")];

const MAX_LINES: usize = 600;

/// The rooms of `src/media/` and their ranks, lowest first: a room may import only rooms of a
/// lower rank (docs/architecture.md: Media's rooms). Inside a room, and across rooms, the graph
/// of units (a room's direct modules: `live::channel`, `ingest::rtmp`; a room's own `mod.rs`)
/// has no circle.
const ROOMS: &[(&str, u8)] = &[
    // GStreamer set-up and what every pipeline shares.
    ("gst", 0),
    // What media is made of: ISO-BMFF boxes, HLS playlists, WebRTC's SDP and peers.
    ("cmaf", 1),
    ("hls", 1),
    ("webrtc", 1),
    // One picture out of a segment, as JPEG.
    ("still", 1),
    // The live session and its outputs.
    ("live", 2),
    // The protocol fronts that feed a session, the edges that play from it, VOD work.
    ("ingest", 3),
    ("egress", 3),
    ("vod", 3),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without comments (a doc comment may name any module) and without string
/// literals' contents.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                kept.push(c);
            }
            prev = c;
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Every `crate::<name>` the code names, including each name of `use crate::{a, b::c}`.
fn crate_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            // Top-level names of the group: the first segment after each comma at depth 0.
            let mut depth = 0;
            let mut start = true;
            let mut name = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        start = true;
                        continue;
                    }
                    _ => {}
                }
                if start && depth == 0 {
                    if c.is_alphanumeric() || c == '_' {
                        name.push(c);
                        continue;
                    } else if !name.is_empty() {
                        found.insert(std::mem::take(&mut name));
                        start = false;
                    }
                }
            }
            if !name.is_empty() {
                found.insert(name);
            }
        } else {
            let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                found.insert(name);
            }
        }
        rest = after;
    }
    found
}

/// The top-level module a file of `src/` belongs to (`None`: the crate root files).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib" && name != "main").then(|| name.to_string())
}

fn violations(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let lines = text.lines().count();
        if lines > MAX_LINES {
            problems.push(format!("{} has {lines} lines (at most {MAX_LINES})", file.display()));
        }
        let Some(module) = module_of(src, file) else { continue };
        let Some(own) = layer(&module) else {
            problems.push(format!("{}: module `{module}` has no layer in tests/layers.rs", file.display()));
            continue;
        };
        for used in crate_modules(&code_of(&text)) {
            if used == module {
                continue;
            }
            let Some(theirs) = layer(&used) else {
                problems.push(format!("{}: `crate::{used}` has no layer in tests/layers.rs", file.display()));
                continue;
            };
            let allowed = theirs < own || SAME_LAYER.contains(&(module.as_str(), used.as_str()));
            if !allowed {
                problems.push(format!(
                    "{}: `{module}` (layer {own}) imports `crate::{used}` (layer {theirs})",
                    file.display()
                ));
            }
        }
    }
    problems
}

/// The module path of a file of `src/media/` (below `media`): `live/channel.rs` and
/// `live/channel/mod.rs` are `["live", "channel"]`; `media/mod.rs` is `[]`.
fn media_module(media: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(media).expect("under media");
    let mut segments: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if segments.last().is_some_and(|l| l == "mod") {
        segments.pop();
    }
    segments
}

/// One path a `use` tree or an expression names, from `at` in `code` (just after `crate::media::`
/// or the first `super::`): every path of a `{…}` group, each as its segments.
fn expand_paths(code: &[char], mut at: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix;
    loop {
        while code.get(at).is_some_and(|c| c.is_whitespace()) {
            at += 1;
        }
        if code.get(at) == Some(&'{') {
            at += 1;
            loop {
                at = expand_paths(code, at, path.clone(), out);
                while code.get(at).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    at += 1;
                }
                match code.get(at) {
                    Some('}') => return at + 1,
                    None => return at,
                    _ => {}
                }
            }
        }
        let name: String = code[at..].iter().take_while(|c| c.is_alphanumeric() || **c == '_').collect();
        if name.is_empty() {
            out.push(path);
            return at;
        }
        at += name.chars().count();
        path.push(name);
        if code.get(at) == Some(&':') && code.get(at + 1) == Some(&':') {
            at += 2;
        } else {
            out.push(path);
            return at;
        }
    }
}

/// Every module path below `media` that a file of `src/media/` at `module` names: through
/// `crate::media::…`, and through `super::…` resolved from where it stands (inside an inline
/// `mod x { … }`, `super` is the file's own module). `use super::*` is left out (tests).
fn media_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    // Inline modules open at the brace depth they were opened at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let starts = |i: usize, word: &str| {
        chars[i..].starts_with(&word.chars().collect::<Vec<_>>())
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_' || chars[i - 1] == ':'))
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            depth = depth.saturating_sub(1);
            while inline.last().is_some_and(|(_, d)| *d > depth) {
                inline.pop();
            }
        } else if starts(i, "mod ") {
            let rest: String = chars[i + 4..].iter().take_while(|c| **c != ';' && **c != '{').collect();
            let at_brace = i + 4 + rest.chars().count();
            if chars.get(at_brace) == Some(&'{') {
                inline.push((rest.trim().to_string(), depth + 1));
            }
        } else if starts(i, "crate::media::") {
            i = expand_paths(&chars, i + "crate::media::".len(), Vec::new(), &mut out);
            continue;
        } else if starts(i, "super::") {
            let mut here: Vec<String> = module.to_vec();
            here.extend(inline.iter().map(|(m, _)| m.clone()));
            let mut at = i;
            while chars[at..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                here.pop();
                at += "super::".len();
            }
            if chars.get(at) == Some(&'*') {
                i = at + 1;
                continue;
            }
            i = expand_paths(&chars, at, here, &mut out);
            continue;
        }
        i += 1;
    }
    out
}

/// The unit a module path below `media` belongs to: its room and, when that names a module of
/// the room, the module (`live::channel::Channel` is in `live::channel`, `live::Outputs` in `live`).
fn unit_of(media: &Path, path: &[String]) -> String {
    match path {
        [] => "media".to_string(),
        [room] => room.clone(),
        [room, sub, ..] => {
            let dir = media.join(room);
            if dir.join(format!("{sub}.rs")).is_file() || dir.join(sub).join("mod.rs").is_file() {
                format!("{room}::{sub}")
            } else {
                room.clone()
            }
        }
    }
}

/// The rooms of `src/media/` point one way and no unit's imports come back to it.
fn media_violations(media: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(media, &mut files);
    files.sort();
    let mut problems = Vec::new();
    let mut edges: std::collections::BTreeMap<String, BTreeSet<String>> = Default::default();
    for file in &files {
        let module = media_module(media, file);
        let own = unit_of(media, &module);
        let Some(room) = module.first() else {
            if file.file_name().is_some_and(|f| f == "mod.rs") {
                continue;
            }
            problems.push(format!("{}: a file at the top of media/ must be a room", file.display()));
            continue;
        };
        let Some(rank) = ROOMS.iter().find(|(r, _)| r == room).map(|(_, k)| *k) else {
            problems.push(format!("{}: room `{room}` has no rank in tests/layers.rs", file.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable");
        for path in media_paths(&code_of(&text), &module) {
            let theirs = unit_of(media, &path);
            if theirs == own {
                continue;
            }
            match path.first() {
                None => problems.push(format!("{}: names an item of media/mod.rs", file.display())),
                Some(other) if other != room => {
                    let allowed = ROOMS.iter().find(|(r, _)| r == other).is_some_and(|(_, k)| *k < rank);
                    if !allowed {
                        problems.push(format!("{}: room `{room}` imports room `{other}`", file.display()));
                    }
                }
                Some(_) => {}
            }
            edges.entry(own.clone()).or_default().insert(theirs);
        }
    }
    if let Some(circle) = a_circle(&edges) {
        problems.push(format!("media/ has a circle: {}", circle.join(" -> ")));
    }
    problems
}

/// One circle of the graph, if it has any (depth-first, in name order).
fn a_circle(edges: &std::collections::BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &std::collections::BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut circle = stack[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|n| visit(n, edges, &mut done, &mut Vec::new()))
}

#[test]
fn media_rooms_point_one_way_without_a_circle() {
    let media = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/media");
    let problems = media_violations(&media);
    assert!(problems.is_empty(), "media problems:\n{}", problems.join("\n"));
}

#[test]
fn the_media_check_sees_a_circle_and_a_room_upward() {
    let dir = std::env::temp_dir().join(format!("sluice-rooms-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["live/channel", "gst", "egress"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    let write = |f: &str, text: &str| std::fs::write(dir.join(f), text).unwrap();
    write("mod.rs", "pub mod gst;\npub mod live;\n");
    write("live/mod.rs", "pub mod channel;\npub mod pipeline;\n");
    // channel -> pipeline through `super` from inside the channel's folder, pipeline -> channel
    // through a group; `super` in an inline test module is the file itself.
    write("live/channel/mod.rs", "mod serve;\n");
    write("live/channel/serve.rs", "use super::super::pipeline::Out;\n");
    write(
        "live/pipeline.rs",
        "use crate::media::{gst::init, live::{channel::Channel}};\nmod tests { use super::Out; }\n",
    );
    write("gst/mod.rs", "fn f() { crate::media::vod::x(); }\n");
    write(
        "egress/whep.rs",
        "// crate::media::vod::x in a comment\nuse crate::media::live::channel::Channel;\n",
    );
    let problems = media_violations(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    let circle = "media/ has a circle: live::channel -> live::pipeline -> live::channel";
    assert!(problems.iter().any(|p| p == circle), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("room `gst` imports room `vod`")), "{problems:?}");
    assert!(!problems.iter().any(|p| p.contains("whep.rs")), "{problems:?}");
    assert_eq!(problems.len(), 2, "{problems:?}");
}

#[test]
fn layers_point_one_way_and_files_stay_small() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = violations(&src);
    assert!(problems.is_empty(), "layering problems:\n{}", problems.join("\n"));
}

#[test]
fn the_check_sees_an_upward_import() {
    let dir = std::env::temp_dir().join(format!("sluice-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("media")).unwrap();
    std::fs::write(
        dir.join("media/live.rs"),
        "// crate::app in a comment is fine\nuse crate::{domain::x, api::y};\nfn f() { crate::playback::z(); }\n",
    )
    .unwrap();
    std::fs::write(dir.join("store.rs"), "use crate::domain::Thing;\n".to_string() + &"\n".repeat(601))
        .unwrap();
    let problems = violations(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(problems.iter().any(|p| p.contains("imports `crate::api`")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("imports `crate::playback`")), "{problems:?}");
    assert!(!problems.iter().any(|p| p.contains("crate::app")), "comments are not code: {problems:?}");
    assert!(!problems.iter().any(|p| p.contains("crate::domain")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("store.rs has 602 lines")), "{problems:?}");
}
