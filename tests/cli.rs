//! The `sluice` binary's admin commands, run as a user would.

use std::process::{Command, Output};

use serde_json::Value;

fn sluice(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATA_DIR", dir)
        .env_remove("SLUICE_DATABASE_URL")
        .env_remove("SLUICE_CONFIG")
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn bootstrap_and_create_key_print_json_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice(dir.path(), &["admin", "bootstrap", "--project", "demo", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["project"]["slug"], "demo");
    assert_eq!(v["user"]["email"], "admin@demo.localhost");
    assert!(v["user"]["password"].as_str().unwrap().len() >= 16);
    let key = v["apiKey"]["key"].as_str().unwrap();
    assert!(key.starts_with("svc_") && key.len() == 47);
    assert_eq!(v["apiKey"]["prefix"], key[..12]);
    assert_eq!(v["apiKey"]["scopes"], serde_json::json!(["*"]));
    assert!(dir.path().join("sluice.db").exists(), "SQLite in the data dir");

    // A second bootstrap of the same project refuses and prints no secret.
    let again = sluice(dir.path(), &["admin", "bootstrap", "--project", "demo", "--json"]);
    assert!(!again.status.success());
    assert!(again.stdout.is_empty());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));

    // Another project for the same admin reuses the account: no password printed.
    let other = sluice(
        dir.path(),
        &["admin", "bootstrap", "--project", "other", "--email", "admin@demo.localhost", "--json"],
    );
    let v: Value = serde_json::from_slice(&other.stdout).unwrap();
    assert!(v["user"]["password"].is_null());

    let out = sluice(
        dir.path(),
        &[
            "admin",
            "create-key",
            "--project",
            "demo",
            "--scopes",
            "vod:read,streams:write",
            "--label",
            "ci",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["apiKey"]["scopes"], serde_json::json!(["streams:write", "vod:read"]));
    assert_ne!(v["apiKey"]["key"].as_str().unwrap(), key);

    let bad = sluice(dir.path(), &["admin", "create-key", "--project", "demo", "--scopes", "vod:admin"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must be one of"));
    let missing = sluice(dir.path(), &["admin", "create-key", "--project", "nosuch"]);
    assert!(!missing.status.success());
}

#[test]
fn settings_file_and_env_are_layered() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sluice.toml"), "bogus_key = 1\n").unwrap();
    let out = sluice(dir.path(), &["admin", "create-key", "--project", "x"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sluice.toml"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
