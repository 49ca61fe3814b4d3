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
