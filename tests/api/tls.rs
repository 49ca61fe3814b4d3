//! HTTPS and RTMPS with `SLUICE_TLS_CERT`/`SLUICE_TLS_KEY`: the API over HTTPS with a
//! self-signed certificate (made by openssl) and plain HTTP refused on that port; ffmpeg pushing
//! over `rtmps://`; the certificate files replaced and the new pair served without a restart;
//! stalled and garbage handshakes on both TLS ports leaving the server serving.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{eventually, ffmpeg_push, self_signed, spawn_app_with, Backend, TestApp};

/// A client that trusts only the certificate in `cert`.
fn trusting(cert: &Path) -> Client {
    let pem = std::fs::read(cert).expect("cert");
    Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("pem"))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

/// The app serving TLS with the pair at `dir/live.*.pem`; its client and base speak HTTPS.
pub(crate) async fn spawn_tls(dir: &Path) -> (TestApp, String) {
    let (cert, key) = self_signed(dir, "a");
    let (live_cert, live_key) = (dir.join("live.cert.pem"), dir.join("live.key.pem"));
    std::fs::copy(&cert, &live_cert).expect("copy");
    std::fs::copy(&key, &live_key).expect("copy");
    let mut t = spawn_app_with(Backend::Sqlite, |a| {
        a.tls_cert = Some(live_cert);
        a.tls_key = Some(live_key);
        a.rtmps_addr = Some("127.0.0.1:0".parse().expect("addr"));
    })
    .await;
    let plain = t.base.clone();
    t.base = t.base.replacen("http://", "https://", 1);
    t.client = trusting(&cert);
    (t, plain)
}

async fn create(t: &TestApp, name: &str) -> Value {
    let resp = t.post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": name})).await;
    assert_eq!(resp.status(), 201);
    resp.json().await.expect("json")
}

/// Completes a TLS handshake with `addr` trusting only `cert`.
async fn handshake(addr: std::net::SocketAddr, cert: &Path) -> std::io::Result<()> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(cert).expect("pem") {
        roots.add(c.expect("cert")).expect("root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    connector.connect(name, tcp).await.map(|_| ())
}

#[tokio::test]
async fn https_serves_the_api_and_refuses_plain_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (t, plain) = spawn_tls(dir.path()).await;
    assert!(t.base.starts_with("https://127.0.0.1:"), "{}", t.base);
    let health = t.client.get(t.url("/healthz")).send().await.expect("https answers");
    assert_eq!(health.status(), 200);
    // Everything the API hands out follows the scheme: HTTPS, RTMPS for ingest.
    let stream = create(&t, "over tls").await;
    let rtmps = t.app.rtmps_addr().expect("RTMPS listens");
    let ingest = stream["ingestUrl"].as_str().expect("ingestUrl");
    assert!(ingest.starts_with(&format!("rtmps://127.0.0.1:{}/live/", rtmps.port())), "{ingest}");
    assert_eq!(stream["obs"]["server"], format!("rtmps://127.0.0.1:{}/live", rtmps.port()));
    assert_eq!(stream["rtmpPort"], rtmps.port());
    assert!(stream["whipUrl"].as_str().expect("whipUrl").starts_with("https://"), "{stream}");
    assert!(stream["playbackUrls"]["hls"].as_str().expect("hls").starts_with("https://"), "{stream}");
    // Sessions over TLS get Secure cookies.
    let login = t
        .client
        .post(t.url("/v1/auth/login"))
        .json(&json!({"email": t.email, "password": t.password}))
        .send()
        .await
        .expect("login");
    assert_eq!(login.status(), 200);
    let cookies: Vec<String> = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().expect("ascii").to_string())
        .collect();
    assert!(!cookies.is_empty() && cookies.iter().all(|c| c.contains("Secure")), "{cookies:?}");
    // Plain HTTP on the TLS port gets no HTTP answer.
    let clear = Client::new().get(format!("{plain}/healthz")).send().await;
    assert!(clear.is_err(), "plain HTTP on the HTTPS port: {clear:?}");
    // A client that does not trust the certificate refuses it.
    let stranger = Client::builder().build().expect("client").get(t.url("/healthz")).send().await;
    assert!(stranger.is_err(), "{stranger:?}");
}

#[tokio::test]
async fn ffmpeg_pushes_over_rtmps_and_goes_live() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (t, _) = spawn_tls(dir.path()).await;
    let stream = create(&t, "rtmps push").await;
    let id = stream["_id"].as_str().expect("id").to_string();
    let _push = ffmpeg_push(
        stream["ingestUrl"].as_str().expect("ingestUrl"),
        "testsrc=size=320x240:rate=15",
        30,
        &[],
    );
    eventually("live over RTMPS", Duration::from_secs(30), || async {
        let s: Value =
            t.get_with(&t.project_url(&format!("/streams/{id}")), &t.key).await.json().await.ok()?;
        (s["status"] == "live" && s["input"]["videoCodec"] == "h264").then_some(())
    })
    .await;
    let hls = stream["playbackUrls"]["hls"].as_str().expect("hls").to_string();
    eventually("the live playlist over HTTPS", Duration::from_secs(20), || async {
        let r = t.client.get(&hls).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_replaced_certificate_is_served_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (t, _) = spawn_tls(dir.path()).await;
    let rtmps = t.app.rtmps_addr().expect("RTMPS listens");
    let old_cert = dir.path().join("a.cert.pem");
    assert!(handshake(rtmps, &old_cert).await.is_ok(), "RTMPS serves the first certificate");
    let (new_cert, new_key) = self_signed(dir.path(), "b");
    // Replaced as a renewal does: new files renamed over the old names.
    for (from, to) in [(&new_key, "live.key.pem"), (&new_cert, "live.cert.pem")] {
        let tmp = dir.path().join(format!("{to}.tmp"));
        std::fs::copy(from, &tmp).expect("copy");
        std::fs::rename(&tmp, dir.path().join(to)).expect("rename");
    }
    let renewed = trusting(&new_cert);
    eventually("the new certificate served over HTTPS", Duration::from_secs(15), || async {
        let r = renewed.get(t.url("/healthz")).send().await.ok()?;
        (r.status() == 200).then_some(())
    })
    .await;
    assert!(t.client.get(t.url("/healthz")).send().await.is_err(), "the old certificate is no longer served");
    assert!(handshake(rtmps, &new_cert).await.is_ok(), "RTMPS serves the new certificate");
    assert!(handshake(rtmps, &old_cert).await.is_err(), "RTMPS no longer serves the old one");
}

#[tokio::test]
async fn stalled_and_garbage_handshakes_leave_tls_serving() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (t, plain) = spawn_tls(dir.path()).await;
    let https = plain.trim_start_matches("http://").to_string();
    let rtmps = t.app.rtmps_addr().expect("RTMPS listens").to_string();
    let mut stalled = Vec::new();
    for addr in [&https, &rtmps] {
        for _ in 0..5 {
            stalled.push(tokio::net::TcpStream::connect(addr.as_str()).await.expect("connect"));
        }
        let mut garbage = tokio::net::TcpStream::connect(addr.as_str()).await.expect("connect");
        garbage.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff].repeat(2000)).await.ok();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(5), garbage.read(&mut buf)).await;
        assert!(n.is_ok(), "garbage is answered or closed at once on {addr}");
        // Plain RTMP's handshake (C0+C1) on the RTMPS port: refused, nothing else.
        let mut rtmp = tokio::net::TcpStream::connect(addr.as_str()).await.expect("connect");
        let mut c0c1 = vec![3u8];
        c0c1.extend(std::iter::repeat_n(0u8, 1536));
        rtmp.write_all(&c0c1).await.ok();
        let n = tokio::time::timeout(Duration::from_secs(5), rtmp.read(&mut buf)).await;
        assert!(n.is_ok(), "plain RTMP on a TLS port is refused at once on {addr}");
    }
    // The server answers others while the stalled handshakes are open…
    assert_eq!(t.client.get(t.url("/healthz")).send().await.expect("https").status(), 200);
    assert!(handshake(rtmps.parse().expect("addr"), &dir.path().join("a.cert.pem")).await.is_ok());
    // …and closes the stalled ones after the handshake deadline (10 s).
    for mut s in stalled {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf)).await;
        assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "a silent client is closed: {n:?}");
    }
}

/// `sluice serve` in production mode: without TLS and without an https public URL it warns,
/// naming the settings, before it listens; with TLS at a proxy (`SLUICE_PUBLIC_URL=https://…`)
/// it does not.
#[tokio::test]
async fn production_without_tls_warns_naming_the_settings() {
    use crate::support::process::{sluice_command, wait_ready};
    for public_url in [None, Some("https://video.example.com")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = crate::support::free_port();
        let log = dir.path().join("serve.log");
        let mut cmd = sluice_command(dir.path(), port);
        cmd.env("SLUICE_MODE", "production").env("RUST_LOG", "warn");
        if let Some(url) = public_url {
            cmd.env("SLUICE_PUBLIC_URL", url);
        }
        cmd.arg("serve")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"));
        let _serve = crate::support::Killed(cmd.spawn().expect("sluice serve"));
        // The warning comes before the listener: once it answers, the log says all it will.
        wait_ready(port).await;
        let text = std::fs::read_to_string(&log).expect("log");
        let warned = text.contains("NO TLS");
        match public_url {
            None => assert!(
                warned
                    && ["SLUICE_TLS_CERT", "SLUICE_TLS_KEY", "SLUICE_PUBLIC_URL"]
                        .iter()
                        .all(|s| text.contains(s)),
                "{text}"
            ),
            Some(_) => assert!(!warned, "no warning with TLS at a proxy: {text}"),
        }
    }
}
