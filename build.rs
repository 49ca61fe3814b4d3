//! Embeds the console (`console/dist`, built by `npm run build` in `console/`) into the binary:
//! writes `$OUT_DIR/console_assets.rs`, the list of its files as `(path, bytes)`. Without a
//! built console the list is empty and the binary says at `/` how to build it.

use std::path::{Path, PathBuf};
use std::{env, fs};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dist = root.join("console/dist");
    let mut code = String::from("pub static ASSETS: &[(&str, &[u8])] = &[\n");
    if dist.join("index.html").is_file() {
        // A directory is scanned whole: any file built anew runs this again.
        println!("cargo:rerun-if-changed=console/dist");
        let mut found = Vec::new();
        files(&dist, &mut found);
        found.sort();
        for path in found {
            let Ok(rel) = path.strip_prefix(&dist) else { continue };
            let rel = rel.to_string_lossy().replace('\\', "/");
            code.push_str(&format!("    ({rel:?}, include_bytes!({:?})),\n", path.display().to_string()));
        }
    } else {
        // Not built: watch the folder it will appear in (a missing path would rerun every build).
        println!("cargo:rerun-if-changed=console");
    }
    code.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("console_assets.rs");
    fs::write(out, code).expect("writing console_assets.rs");
    println!("cargo:rerun-if-changed=build.rs");
}
