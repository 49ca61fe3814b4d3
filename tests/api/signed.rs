//! Signed playback and content encryption end to end: tickets, the switch, every deny reason on
//! every kind of URL, IP pinning, tampering, another resource's token, session expiry during a
//! live session, key rotation across a restart; hls.js playing signed and encrypted VOD and live
//! from the ticket URL alone; encrypted media that ffprobe cannot read without the key.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use aes::cipher::{block_padding::Pkcs7, BlockDecryptMut, KeyIvInit};
use reqwest::Method;
use serde_json::{json, Value};

use crate::support::player::Player;
use crate::support::{
    both_backends, error_message, eventually, ffmpeg_push, sluice_command, spawn_app, wait_ready, Backend,
    Killed, TestApp,
};
use crate::vod::{create, finished, make_file, put_file, uploaded};

type Aes128CbcDec = cbc::Decryptor<aes::Aes128>;

/// `(status, X-Deny-Reason, body)` of a GET.
async fn fetch(t: &TestApp, url: &str) -> (u16, Option<String>, bytes::Bytes) {
    let resp = t.client.get(url).send().await.expect("request");
    let status = resp.status().as_u16();
    let reason = resp.headers().get("x-deny-reason").and_then(|v| v.to_str().ok()).map(str::to_string);
    (status, reason, resp.bytes().await.expect("body"))
}

/// Asserts a 401 with `reason` and that the body says nothing more.
async fn denied(t: &TestApp, url: &str, reason: &str) {
    let (status, got, body) = fetch(t, url).await;
    assert_eq!((status, got.as_deref()), (401, Some(reason)), "{url}");
    assert_eq!(&body[..], b"playback refused", "nothing else leaks");
}

async fn ok(t: &TestApp, url: &str) -> bytes::Bytes {
    let (status, reason, body) = fetch(t, url).await;
    assert_eq!(status, 200, "{url}: {reason:?} {}", String::from_utf8_lossy(&body[..body.len().min(200)]));
    body
}

async fn switch(t: &TestApp, kind: &str, id: &str, enabled: bool) -> Value {
    let resp = t
        .with_key(Method::PATCH, &t.project_url(&format!("/{kind}/{id}/signed-playback")), &t.key)
        .json(&json!({ "enabled": enabled }))
        .send()
        .await
        .expect("switch");
    assert_eq!(resp.status(), 200);
    let record: Value = resp.json().await.expect("json");
    assert_eq!(record["signedPlayback"], enabled);
    record
}

async fn ticket(t: &TestApp, kind: &str, id: &str, body: Value) -> Value {
    let resp =
        t.post_json_with(&t.project_url(&format!("/{kind}/{id}/playback-ticket")), &t.key, &body).await;
    assert_eq!(resp.status(), 200, "ticket");
    resp.json().await.expect("json")
}

fn token_of(url: &str) -> String {
    url.split("token=").nth(1).expect("a token").split('&').next().expect("token").to_string()
}

/// The URL `uri` (as listed in a playlist) names, relative to `base` (a playlist URL).
fn resolve(base: &str, uri: &str) -> String {
    url::Url::parse(base).expect("url").join(uri).expect("join").to_string()
}

/// Every URI a playlist lists (lines and `URI="…"` attributes).
fn uris(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if !line.starts_with('#') {
            out.push(line.to_string());
        } else if let Some(rest) = line.split("URI=\"").nth(1) {
            out.push(rest.split('"').next().expect("quoted").to_string());
        }
    }
    out
}

/// The first variant (video) playlist a master playlist lists, resolved against its URL.
fn variant_url(master_url: &str, master: &str) -> String {
    let line = master.lines().find(|l| !l.is_empty() && !l.starts_with('#')).expect("a variant");
    // Without the viewer's playback session (docs/viewers.md): the tests swap tokens in it.
    let line = line.split("?vs=").next().and_then(|l| l.split("&vs=").next()).unwrap_or(line);
    resolve(master_url, line)
}

/// `url` with its token replaced by `token` (or removed).
fn with_token(url: &str, token: Option<&str>) -> String {
    let bare = url.split("?token=").next().expect("url").split("&token=").next().expect("url");
    match token {
        Some(tk) => format!("{bare}{}token={tk}", if bare.contains('?') { '&' } else { '?' }),
        None => bare.to_string(),
    }
}

/// The token a signed live URL carries in its path (`…/live/<id>/t/<token>/…`).
fn path_token(url: &str) -> String {
    url.split("/t/").nth(1).expect("a token path").split('/').next().expect("token").to_string()
}

/// `url` with its path token replaced by `token`, or without the token segment (`None`).
fn with_path_token(url: &str, token: Option<&str>) -> String {
    let current = format!("/t/{}/", path_token(url));
    url.replacen(&current, &token.map_or("/".to_string(), |t| format!("/t/{t}/")), 1)
}

/// A complete VOD of a `seconds`-long 320×240 clip, one rung; `drm` encrypts it.
async fn complete_vod(t: &TestApp, dir: &Path, drm: bool, seconds: u32) -> String {
    let file = make_file(dir, "clip.mp4", Some("testsrc2=size=320x240:rate=30"), seconds);
    let ladder = json!([{"name": "240p", "width": 320, "height": 240, "videoBitrate": "300k"}]);
    let (vod, url) =
        create(t, json!({"name": "Clip", "filename": "clip.mp4", "ladder": ladder, "drmEnabled": drm})).await;
    assert_eq!(vod["drmEnabled"], drm);
    let id = vod["_id"].as_str().expect("id").to_string();
    assert_eq!(put_file(t, &url, &file).await.status(), 200);
    assert_eq!(uploaded(t, &id).await.status(), 200);
    let done = finished(t, &id, Duration::from_secs(120)).await;
    assert_eq!(done["status"], "complete", "{done}");
    id
}

async fn vod_every_deny_reason_and_the_switch(t: TestApp) {
    let dir = tempfile::tempdir().expect("tempdir");
    let id = complete_vod(&t, dir.path(), false, 4).await;
    let base = format!("{}/play/vod/{id}", t.base);
    let master = format!("{base}/master.m3u8");

    // Open by default: no token needed.
    ok(&t, &master).await;
    ok(&t, &format!("{base}/thumb.jpg")).await;

    // Bad inputs and scopes.
    let url = t.project_url(&format!("/vod/{id}/playback-ticket"));
    let msg = error_message(
        t.post_json_with(&url, &t.key, &json!({"expiresInSec": 5, "allowIp": "nope", "streamExpireSec": 0}))
            .await,
        400,
    )
    .await;
    let msg = msg.to_string();
    for field in ["expiresInSec", "allowIp", "streamExpireSec"] {
        assert!(msg.contains(field), "{field} in {msg}");
    }
    let switch_url = t.project_url(&format!("/vod/{id}/signed-playback"));
    let resp = t.with_key(Method::PATCH, &switch_url, &t.key).json(&json!({})).send().await.expect("patch");
    assert!(error_message(resp, 400).await.to_string().contains("enabled is required"));
    let reader = t.create_key(&["vod:read"]).await;
    assert_eq!(
        t.with_key(Method::PATCH, &switch_url, &reader)
            .json(&json!({"enabled": true}))
            .send()
            .await
            .expect("patch")
            .status(),
        403
    );
    assert_eq!(t.post_json_with(&url, &reader, &json!({})).await.status(), 200, "vod:read may take tickets");
    let streams_only = t.create_key(&["streams:read"]).await;
    assert_eq!(t.post_json_with(&url, &streams_only, &json!({})).await.status(), 403);
    let missing = t.project_url("/vod/nosuchvod/playback-ticket");
    assert_eq!(t.post_json_with(&missing, &t.key, &json!({})).await.status(), 404);

    // On: the very next request needs a token, on every kind of URL.
    let before = ok(&t, &master).await;
    let child = variant_url(&master, std::str::from_utf8(&before).expect("text"));
    let media = ok(&t, &child).await;
    let segment =
        resolve(&child, uris(std::str::from_utf8(&media).expect("text")).last().expect("a segment"));
    switch(&t, "vod", &id, true).await;
    for u in [&master, &child, &segment, &format!("{base}/thumb.jpg"), &resolve(&child, "init.mp4")] {
        denied(&t, u, "missing_token").await;
    }

    // A ticket: the master URL alone leads everywhere, each child URI carrying a session token.
    let tk = ticket(&t, "vod", &id, json!({})).await;
    let playback = tk["playbackUrl"].as_str().expect("playbackUrl").to_string();
    assert!(playback.starts_with(&format!("{master}?token=")), "{playback}");
    assert!(tk["thumbnailUrl"].as_str().expect("thumb").starts_with(&format!("{base}/thumb.jpg?token=")));
    let expires: chrono::DateTime<chrono::Utc> =
        tk["expiresAt"].as_str().expect("expiresAt").parse().expect("date");
    let left = expires - chrono::Utc::now();
    assert!((3590..=3600).contains(&left.num_seconds()), "default 3600 s: {left}");
    ok(&t, tk["thumbnailUrl"].as_str().expect("thumb")).await;
    let text = String::from_utf8(ok(&t, &playback).await.to_vec()).expect("text");
    let variant = variant_url(&playback, &text);
    let session = token_of(&variant);
    assert_ne!(session, token_of(&playback), "children carry a session token, not the ticket");
    let media = String::from_utf8(ok(&t, &variant).await.to_vec()).expect("text");
    let listed = uris(&media);
    assert!(listed.len() >= 2 && listed.iter().all(|u| u.contains(&format!("token={session}"))), "{media}");
    for u in &listed {
        ok(&t, &resolve(&variant, u)).await;
    }
    // A range request of a segment works with the token too.
    let seg = resolve(&variant, listed.last().expect("segment"));
    let resp = t.client.get(&seg).header("Range", "bytes=0-99").send().await.expect("range");
    assert_eq!(resp.status(), 206);

    // Tampering: one character of the claims, of the signature, or a made-up key id.
    let good = token_of(&playback);
    let claims_end = good.rfind('.').and_then(|i| good[..i].rfind('.')).expect("claims");
    let mut forged = good.clone();
    let expires_digit = good.find('~').map(|i| good[i + 1..].find('~').expect("~") + i + 2).expect("expires");
    forged.replace_range(expires_digit..expires_digit + 1, "9");
    assert_ne!(forged, good);
    denied(&t, &with_token(&master, Some(&forged)), "bad_signature").await;
    let mut bad_mac = good.clone();
    let last = bad_mac.pop().expect("char");
    bad_mac.push(if last == '0' { '1' } else { '0' });
    denied(&t, &with_token(&master, Some(&bad_mac)), "bad_signature").await;
    let other_kid = format!("{}.zzzzzzzz.{}", &good[..claims_end], good.rsplit('.').next().expect("mac"));
    denied(&t, &with_token(&master, Some(&other_kid)), "bad_signature").await;
    denied(&t, &with_token(&master, Some("garbage")), "bad_signature").await;
    // A player that re-encodes the query (hls.js adding `_HLS_msn` via URLSearchParams) still
    // presents the same token.
    ok(&t, &with_token(&master, Some(&good.replace('~', "%7E").replace(':', "%3A")))).await;

    // Another resource's token: a stream's ticket on this VOD's URLs.
    let s = t.post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": "other"})).await;
    let stream: Value = s.json().await.expect("json");
    let sid = stream["_id"].as_str().expect("id");
    let st = ticket(&t, "streams", sid, json!({})).await;
    let stream_token = token_of(st["hls"].as_str().expect("hls"));
    denied(&t, &with_token(&master, Some(&stream_token)), "wrong_resource").await;
    denied(&t, &with_token(&seg, Some(&stream_token)), "wrong_resource").await;

    // IP pinning: another address is refused, ours plays.
    let pinned = ticket(&t, "vod", &id, json!({"allowIp": "192.0.2.10"})).await;
    denied(&t, pinned["playbackUrl"].as_str().expect("url"), "ip_mismatch").await;
    let mapped = ticket(&t, "vod", &id, json!({"allowIp": "::ffff:127.0.0.1"})).await;
    ok(&t, mapped["playbackUrl"].as_str().expect("url")).await;
    let ours = ticket(&t, "vod", &id, json!({"allowIp": "127.0.0.1"})).await;
    let ours_text =
        String::from_utf8(ok(&t, ours["playbackUrl"].as_str().expect("url")).await.to_vec()).expect("text");
    // The pin follows the session into the children.
    let pinned_child = variant_url(ours["playbackUrl"].as_str().expect("url"), &ours_text);
    assert!(token_of(&pinned_child).contains("~127.0.0.1."), "{pinned_child}");
    ok(&t, &pinned_child).await;

    // Expiry: a 10-s ticket starts playback, then is refused as expired.
    let short = ticket(&t, "vod", &id, json!({"expiresInSec": 10})).await;
    let short_url = short["playbackUrl"].as_str().expect("url").to_string();
    ok(&t, &short_url).await;
    eventually("the 10-s ticket to expire", Duration::from_secs(20), || async {
        let (status, reason, _) = fetch(&t, &short_url).await;
        (status == 401).then(|| assert_eq!(reason.as_deref(), Some("expired")))
    })
    .await;

    // Off: the very next unsigned request plays again; a stale token is ignored.
    switch(&t, "vod", &id, false).await;
    ok(&t, &master).await;
    ok(&t, &segment).await;
    ok(&t, &short_url).await;
    // No key for a VOD that is not encrypted.
    assert_eq!(fetch(&t, &format!("{base}/key")).await.0, 404);
}

both_backends!(vod_every_deny_reason_and_the_switch);

/// Encrypted media: AES-128-CBC over the whole segment, the IV being its sequence number.
fn decrypt(key: &[u8], msn: u64, data: &[u8]) -> Vec<u8> {
    let iv = u128::from(msn).to_be_bytes();
    let key: [u8; 16] = key.try_into().expect("16-byte key");
    let mut buf = data.to_vec();
    let n = Aes128CbcDec::new(&key.into(), &iv.into())
        .decrypt_padded_mut::<Pkcs7>(&mut buf)
        .expect("decrypts")
        .len();
    buf.truncate(n);
    buf
}

/// Video frames ffprobe decodes from an fMP4 file (0 when it cannot read it).
fn frames(path: &Path) -> u64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(path)
        .output()
        .expect("ffprobe runs");
    String::from_utf8_lossy(&out.stdout).trim().trim_end_matches(',').parse().unwrap_or(0)
}

/// `init` + `segment` written to `dir/name`: ffprobe's frame count.
fn frames_of(dir: &Path, name: &str, init: &[u8], segment: &[u8]) -> u64 {
    let path = dir.join(name);
    std::fs::write(&path, [init, segment].concat()).expect("write");
    frames(&path)
}

/// An encrypted, signed VOD: the key is served only with the token; the stored segments are
/// unreadable without it and readable with it; hls.js plays from the ticket URL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_vod_plays_and_is_unreadable_without_the_key() {
    let t = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let id = complete_vod(&t, dir.path(), true, 6).await;
    let base = format!("{}/play/vod/{id}", t.base);

    let media_url = format!("{base}/240p/index.m3u8");
    let media = String::from_utf8(ok(&t, &media_url).await.to_vec()).expect("text");
    assert!(
        media.contains("#EXT-X-MAP:URI=\"init.mp4\"\n#EXT-X-KEY:METHOD=AES-128,URI=\"../key\"\n"),
        "{media}"
    );
    let init = ok(&t, &format!("{base}/240p/init.mp4")).await;
    let s0 = ok(&t, &format!("{base}/240p/s0.m4s")).await;
    assert_eq!(s0.len() % 16, 0, "whole AES blocks");
    assert_eq!(frames_of(dir.path(), "clear-init-encrypted.mp4", &init, &s0), 0, "no frames without the key");

    // The key: with signed playback off it is as open as the playlists; with it on, only with a
    // token. It is the one that opens the segment.
    let key = ok(&t, &format!("{base}/key")).await;
    assert_eq!(key.len(), 16);
    let clear = decrypt(&key, 0, &s0);
    assert!(frames_of(dir.path(), "decrypted.mp4", &init, &clear) > 0, "decrypted with the served key");
    let s1 = ok(&t, &format!("{base}/240p/s1.m4s")).await;
    assert!(
        frames_of(dir.path(), "decrypted1.mp4", &init, &decrypt(&key, 1, &s1)) > 0,
        "IV = sequence number"
    );

    // The key is stored wrapped, never as it is served.
    let stored: Vec<(String,)> =
        sqlx::query_as("SELECT wrapped FROM content_keys").fetch_all(t.db.pool()).await.expect("query");
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].0.contains(&hex::encode(&key)), "wrapped at rest");

    switch(&t, "vod", &id, true).await;
    denied(&t, &format!("{base}/key"), "missing_token").await;
    let tk = ticket(&t, "vod", &id, json!({})).await;
    let playback = tk["playbackUrl"].as_str().expect("url").to_string();
    let master = String::from_utf8(ok(&t, &playback).await.to_vec()).expect("text");
    let variant = variant_url(&playback, &master);
    let media = String::from_utf8(ok(&t, &variant).await.to_vec()).expect("text");
    let key_uri =
        media.lines().find_map(|l| l.strip_prefix("#EXT-X-KEY:METHOD=AES-128,URI=\"")).expect("key");
    let key_url = resolve(&variant, key_uri.trim_end_matches('"'));
    assert_eq!(ok(&t, &key_url).await, key, "the same key, with the session token");

    Player::play_to_the_end(&playback, 5.5).await;
}

/// hls.js plays a signed (clear) VOD from the ticket URL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hls_js_plays_a_signed_vod_from_the_ticket() {
    let t = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let id = complete_vod(&t, dir.path(), false, 4).await;
    switch(&t, "vod", &id, true).await;
    denied(&t, &format!("{}/play/vod/{id}/master.m3u8", t.base), "missing_token").await;
    let tk = ticket(&t, "vod", &id, json!({"expiresInSec": 60})).await;
    Player::play_to_the_end(tk["playbackUrl"].as_str().expect("url"), 3.5).await;
}

/// A signed, encrypted live stream: hls.js plays it from the ticket URL alone at low latency;
/// parts and segments are unreadable without the key; a 10-s session (`streamExpireSec`) ends
/// while the stream goes on and the ticket itself is still valid; other resources' tokens and
/// unsigned requests are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_encrypted_live() {
    let t = spawn_app(Backend::Sqlite).await;
    let resp = t
        .post_json_with(
            &t.project_url("/streams"),
            &t.key,
            &json!({"name": "secret", "qualities": ["240p"], "drmEnabled": true}),
        )
        .await;
    assert_eq!(resp.status(), 201);
    let stream: Value = resp.json().await.expect("json");
    let id = stream["_id"].as_str().expect("id").to_string();
    let master = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    let _push: Killed = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc2=size=426x240:rate=30",
        60,
        &["-b:v", "400k"],
    );

    // A viewer already watching without a token is cut off by the very next request once
    // signed playback is switched on.
    let unsigned = eventually("the unsigned master playlist", Duration::from_secs(30), || async {
        let (status, _, body) = fetch(&t, &master).await;
        (status == 200).then(|| variant_url(&master, std::str::from_utf8(&body).expect("text")))
    })
    .await;
    eventually("a first segment", Duration::from_secs(30), || async {
        String::from_utf8(ok(&t, &unsigned).await.to_vec()).expect("text").contains("#EXTINF").then_some(())
    })
    .await;
    let watcher = Player::start(&master).await;
    watcher
        .wait_until("2 s of unsigned playback", Duration::from_secs(40), |r| {
            r.last().is_some_and(|r| r.current_time > 2.0)
        })
        .await;
    switch(&t, "streams", &id, true).await;
    denied(&t, &master, "missing_token").await;
    denied(&t, &unsigned, "missing_token").await;
    let reports = watcher
        .wait_until("the unsigned viewer's next reload to be refused", Duration::from_secs(20), |r| {
            r.last().is_some_and(|r| r.errors.iter().any(|e| e.contains("http=401")))
        })
        .await;
    let last = reports.last().expect("a report");
    assert!(
        last.errors.iter().any(|e| e.starts_with("networkError") && e.contains("http=401")),
        "{:?}",
        last.errors
    );
    drop(watcher);

    let tk = ticket(&t, "streams", &id, json!({"streamExpireSec": 10})).await;
    let hls = tk["hls"].as_str().expect("hls").to_string();
    assert!(hls.starts_with(&format!("{master}?token=")));
    assert!(tk.get("webrtc").is_none() && tk.get("rtsp").is_none(), "only the stream's protocols: {tk}");
    let text = eventually("the master playlist", Duration::from_secs(30), || async {
        let (status, _, body) = fetch(&t, &hls).await;
        (status == 200).then(|| String::from_utf8(body.to_vec()).expect("text"))
    })
    .await;
    let started = std::time::Instant::now();
    // The master names the session's children under its token path; the media playlists there
    // are the shared, unsigned rendering, and everything they name inherits the token.
    let variant = variant_url(&hls, &text);
    assert!(variant.contains("/240p/") && !variant.contains("token="), "{variant}");
    let session = path_token(&variant);
    assert!(variant.ends_with(&format!("/live/{id}/t/{session}/{}/240p/index.m3u8", stream_session(&text))));
    denied(&t, &with_path_token(&variant, None), "missing_token").await;
    let media = eventually("a media playlist with a segment", Duration::from_secs(30), || async {
        let text = String::from_utf8(ok(&t, &variant).await.to_vec()).expect("text");
        text.contains("#EXTINF").then_some(text)
    })
    .await;
    assert!(media.contains("#EXT-X-KEY:METHOD=AES-128,URI=\"../../key\""), "{media}");
    let listed = uris(&media);
    assert!(!media.contains("token="), "served as rendered: {media}");
    assert!(
        listed.iter().all(|u| resolve(&variant, u).contains(&format!("/live/{id}/t/{session}/"))),
        "{media}"
    );
    // A token in the query still works, the old way: that copy is rewritten.
    let by_query = String::from_utf8(
        ok(&t, &with_token(&with_path_token(&variant, None), Some(&session))).await.to_vec(),
    )
    .expect("text");
    assert!(uris(&by_query).iter().all(|u| u.contains(&format!("token={session}"))), "{by_query}");
    let init_url = resolve(&variant, listed.iter().find(|u| u.starts_with("init")).expect("init"));
    let seg_uri = media.lines().skip_while(|l| !l.starts_with("#EXTINF")).nth(1).expect("a segment");
    let seg_url = resolve(&variant, seg_uri);
    let part_uri = listed.iter().find(|u| u.starts_with('p')).expect("a part");
    let part_url = resolve(&variant, part_uri);
    let init = ok(&t, &init_url).await;
    let segment = ok(&t, &seg_url).await;
    let part = ok(&t, &part_url).await;
    denied(&t, &with_path_token(&seg_url, None), "missing_token").await;
    denied(&t, &with_path_token(&part_url, None), "missing_token").await;
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        frames_of(dir.path(), "segment.mp4", &init, &segment),
        0,
        "segment unreadable without the key"
    );
    assert_eq!(frames_of(dir.path(), "part.mp4", &init, &part), 0, "part unreadable without the key");
    let key_url = resolve(&variant, "../../key");
    assert!(key_url.ends_with(&format!("/live/{id}/t/{session}/key")), "{key_url}");
    denied(&t, &with_path_token(&key_url, None), "missing_token").await;
    let key = ok(&t, &key_url).await;
    let msn: u64 = seg_uri.trim_start_matches('s').split('.').next().expect("msn").parse().expect("msn");
    assert!(frames_of(dir.path(), "clear.mp4", &init, &decrypt(&key, msn, &segment)) > 0, "the key opens it");

    // Another resource's token on the stream: a VOD ticket is refused.
    let vod_dir = tempfile::tempdir().expect("tempdir");
    let vod_id = complete_vod(&t, vod_dir.path(), false, 4).await;
    let vt = ticket(&t, "vod", &vod_id, json!({})).await;
    let vod_token = token_of(vt["playbackUrl"].as_str().expect("url"));
    denied(&t, &with_token(&master, Some(&vod_token)), "wrong_resource").await;
    denied(&t, &with_path_token(&part_url, Some(&vod_token)), "wrong_resource").await;
    denied(&t, &with_path_token(&part_url, Some("v1~forged.k.00")), "bad_signature").await;

    // hls.js plays from the ticket URL alone (it needs a fresh 10-s session of its own).
    let tk2 = ticket(&t, "streams", &id, json!({})).await;
    let player = Player::start(tk2["hls"].as_str().expect("hls")).await;
    let reports = player
        .wait_until("4 s of live playback", Duration::from_secs(40), |r| {
            r.last().is_some_and(|r| r.current_time > 4.0)
        })
        .await;
    let last = reports.last().expect("a report");
    assert!(last.fatal_errors().is_empty(), "{:?}", last.errors);

    // The 10-s session ends while the stream goes on; its ticket still starts a new one.
    eventually("the 10-s session to expire", Duration::from_secs(30), || async {
        let (status, reason, _) = fetch(&t, &variant).await;
        (status == 401).then(|| assert_eq!(reason.as_deref(), Some("expired")))
    })
    .await;
    assert!(started.elapsed() >= Duration::from_secs(9), "not before its 10 s");
    denied(&t, &part_url, "expired").await;
    denied(&t, &key_url, "expired").await;
    let again = String::from_utf8(ok(&t, &hls).await.to_vec()).expect("text");
    ok(&t, &variant_url(&hls, &again)).await;

    // Off: the next unsigned request plays; an encrypted session still gets its key.
    switch(&t, "streams", &id, false).await;
    ok(&t, &master).await;
    ok(&t, &with_path_token(&key_url, None)).await;
}

/// The session name a signed live master lists its renditions under
/// (`t/<token>/<session>/<rendition>/index.m3u8`).
fn stream_session(master: &str) -> String {
    let line = master.lines().find(|l| !l.is_empty() && !l.starts_with('#')).expect("a variant");
    line.split('/').nth(2).expect("session").to_string()
}

/// Key rotation across processes without a restart: `sluice admin rotate-signing-key` while
/// process A serves; process B, started after, signs with the new key; A accepts B's tickets (it
/// loads the key it did not know) and both accept tickets signed before; tampering is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_rotation_keeps_issued_tickets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let free = crate::support::free_port;
    let (a, b) = (free(), free());
    let key = crate::support::bootstrap_key(sluice_command(dir.path(), a));
    let client = reqwest::Client::new();
    let serve =
        |port: u16| Killed(sluice_command(dir.path(), port).arg("serve").spawn().expect("sluice serve"));
    let _server_a = serve(a);
    wait_ready(a).await;
    let api = |port: u16, path: &str| format!("http://127.0.0.1:{port}/v1/projects/demo{path}");
    let stream: Value = client
        .post(api(a, "/streams"))
        .bearer_auth(&key)
        .json(&json!({"name": "rotating"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = stream["_id"].as_str().expect("id").to_string();
    let on = client
        .patch(api(a, &format!("/streams/{id}/signed-playback")))
        .bearer_auth(&key)
        .json(&json!({"enabled": true}));
    assert_eq!(on.send().await.expect("switch").status(), 200);
    // A ticket's token from `port`, and its master URL on `on` (the stream is served by both).
    let issue = |port: u16| {
        let (client, key, url) =
            (client.clone(), key.clone(), api(port, &format!("/streams/{id}/playback-ticket")));
        async move {
            let t: Value = client
                .post(url)
                .bearer_auth(&key)
                .json(&json!({}))
                .send()
                .await
                .expect("ticket")
                .json()
                .await
                .expect("json");
            token_of(t["hls"].as_str().expect("hls"))
        }
    };
    // Authorised but not live: 404, where a refused token is 401.
    let status = |port: u16, token: String| {
        let (client, id) = (client.clone(), id.clone());
        async move {
            let url = format!("http://127.0.0.1:{port}/play/live/{id}/master.m3u8?token={token}");
            client.get(url).send().await.expect("get").status().as_u16()
        }
    };
    let before = issue(a).await;
    assert_eq!(status(a, before.clone()).await, 404);

    let out = sluice_command(dir.path(), a).args(["admin", "rotate-signing-key"]).output().expect("rotate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _server_b = serve(b);
    wait_ready(b).await;
    let after = issue(b).await;
    let kid = |token: &str| token.rsplit('.').nth(1).expect("kid").to_string();
    assert_ne!(kid(&before), kid(&after), "B signs with the new key");
    assert_eq!(status(a, after.clone()).await, 404, "A accepts the new key without a restart");
    assert_eq!(status(b, before.clone()).await, 404, "the old ticket still verifies on B");
    assert_eq!(status(a, before.clone()).await, 404, "and on A");
    assert_eq!(status(a, after.replace("stream:", "stream:x")).await, 401, "tampering is refused");
    assert_eq!(
        status(a, format!("{}.zzzzzzzz.{}", &after[..after.len() - 74], &after[after.len() - 64..])).await,
        401
    );
}
