//! The `sluice` binary's admin commands, run as a user would.

use std::process::{Command, Output};

use serde_json::Value;

fn sluice(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATA_DIR", dir)
        .env_remove("SLUICE_DATABASE_URL")
        .env_remove("SLUICE_CONFIG")
        .env_remove("SLUICE_BILLING")
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

/// `admin credits` (CONTRACT: Recording and credits): prints `{"project", "balanceSeconds",
/// "billing"}` and exits 0 whether billing is on or off; `--add` adds, `--set` sets.
#[test]
fn credits_show_add_and_set_the_balance() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice(dir.path(), &["admin", "bootstrap", "--project", "demo", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let credits = |args: &[&str], billing: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.args(["admin", "credits", "--project", "demo"])
            .args(args)
            .env("SLUICE_DATA_DIR", dir.path())
            .env_remove("SLUICE_DATABASE_URL")
            .env_remove("SLUICE_CONFIG")
            .env_remove("SLUICE_BILLING")
            .current_dir(dir.path());
        if let Some(billing) = billing {
            cmd.env("SLUICE_BILLING", billing);
        }
        cmd.output().unwrap()
    };
    let json = |out: Output| -> Value {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let shown = json(credits(&["--json"], None));
    assert_eq!(shown, serde_json::json!({"project": "demo", "balanceSeconds": 0, "billing": "off"}));
    assert_eq!(json(credits(&["--set", "90s", "--json"], None))["balanceSeconds"], 90);
    let added = json(credits(&["--add", "10m", "--json"], Some("on")));
    assert_eq!(added, serde_json::json!({"project": "demo", "balanceSeconds": 690, "billing": "on"}));
    assert_eq!(json(credits(&["--add", "2h", "--json", "--billing", "on"], None))["balanceSeconds"], 7890);
    assert_eq!(json(credits(&["--set", "0s", "--json"], Some("off")))["balanceSeconds"], 0);
    let text = credits(&[], Some("on"));
    assert!(text.status.success());
    assert!(String::from_utf8_lossy(&text.stdout).contains("balance:  0 s"), "{text:?}");

    for (bad, says) in [
        (vec!["--add", "1m", "--set", "1m"], "cannot be used with"),
        (vec!["--add", "10 minutes"], "--add"),
        (vec!["--set=-5s"], "--set: "),
    ] {
        let out = credits(&bad, None);
        assert!(!out.status.success(), "{bad:?}");
        assert!(out.stdout.is_empty(), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(says),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let missing = sluice(dir.path(), &["admin", "credits", "--project", "nosuch", "--json"]);
    assert!(!missing.status.success() && missing.stdout.is_empty());
    assert_eq!(json(credits(&["--json"], None))["balanceSeconds"], 0, "refused changes changed nothing");
}
