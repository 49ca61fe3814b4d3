use super::*;

#[test]
fn webrtc_settings() {
    assert_eq!(parse_ports("40000-40999").ok(), Some((40000, 40999)));
    assert!(parse_ports("5-4").is_err() && parse_ports("0-4").is_err() && parse_ports("x").is_err());
    let servers = parse_ice_servers("stun:stun.example:3478, turn:u:p@turn.example:3478").expect("valid");
    assert_eq!(servers.len(), 2);
    assert!(parse_ice_servers("http://x").is_err());
    assert_eq!(redact_ice("turn:u:secret@h:3478"), "turn:***@h:3478");
    assert_eq!(redact_ice("stun:h:3478"), "stun:h:3478");
}

#[test]
fn redacts_passwords_and_queries() {
    assert_eq!(redact_url("postgres://u:secret@127.0.0.1:5432/test"), "postgres://u:***@127.0.0.1:5432/test");
    assert_eq!(redact_url("sqlite://./data/sluice.db"), "sqlite://./data/sluice.db");
    assert_eq!(redact_url("s3://b?endpoint=x&secret=y"), "s3://b?…");
}

#[test]
fn flags_win_over_file_over_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "http_addr = \"127.0.0.1:9000\"\nmode = \"development\"\n").unwrap();
    let args = ConfigArgs {
        config: Some(file),
        data_dir: Some(dir.path().to_path_buf()),
        mode: Some(Mode::Production),
        ..Default::default()
    };
    let s = Settings::resolve(&args).unwrap();
    assert_eq!(s.http_addr.port(), 9000);
    assert_eq!(s.mode, Mode::Production);
    assert_eq!(s.public_url, "http://127.0.0.1:9000");
    assert_eq!(s.playback_base, "http://127.0.0.1:9000/play");
    assert!(s.database_url.ends_with("/sluice.db"));
    assert_eq!(s.rate_limit_burst, 100);
    assert_eq!(s.billing, Billing::Off, "billing is off by default");
    std::fs::write(dir.path().join("billing.toml"), "billing = \"on\"\n").unwrap();
    let args = ConfigArgs { config: Some(dir.path().join("billing.toml")), ..Default::default() };
    assert_eq!(Settings::resolve(&args).unwrap().billing, Billing::On);
}

#[test]
fn trusted_proxies_come_from_flags_or_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "trusted_proxies = \"10.0.0.0/8, 192.0.2.7\"\n").unwrap();
    let args = ConfigArgs { config: Some(file.clone()), ..Default::default() };
    let s = Settings::resolve(&args).unwrap();
    assert!(s.trusted_proxies.contains("10.1.2.3".parse().unwrap()));
    assert!(s.trusted_proxies.contains("192.0.2.7".parse().unwrap()));
    let args = ConfigArgs { config: Some(file), trusted_proxies: Some(String::new()), ..Default::default() };
    assert!(Settings::resolve(&args).unwrap().trusted_proxies.is_empty(), "the flag wins");
    let args = ConfigArgs { trusted_proxies: Some("proxy.example".into()), ..Default::default() };
    assert!(Settings::resolve(&args).is_err());
}

#[test]
fn unknown_file_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("sluice.toml");
    std::fs::write(&file, "htp_addr = \"127.0.0.1:9000\"\n").unwrap();
    let args = ConfigArgs { config: Some(file), ..Default::default() };
    assert!(Settings::resolve(&args).is_err());
}
