//! A stream's own slate picture (CONTRACT: Continuity): `PUT /streams/<id>/slate` takes a JPEG
//! or PNG of at most 2 MiB, checked before anything is stored; anything else is 400, 413 or 415
//! and changes nothing; `DELETE` restores the default card. What the slate shows on screen is
//! tested with hls.js in `continuity.rs`.

use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{both_backends, error_message, TestApp};

/// A one-colour picture made by ffmpeg: `codec` is `png` or `mjpeg`.
pub fn picture(codec: &str, colour: &str, size: &str) -> Vec<u8> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-f", "lavfi", "-i", &format!("color=c={colour}:s={size}")])
        .args(["-frames:v", "1", "-c:v", codec, "-pix_fmt"])
        .arg(if codec == "png" { "rgb24" } else { "yuvj420p" })
        .args(["-f", "image2pipe", "-"])
        .output()
        .expect("ffmpeg runs");
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "ffmpeg: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub async fn put_slate(t: &TestApp, id: &str, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    t.with_key(Method::PUT, &t.project_url(&format!("/streams/{id}/slate")), &t.key)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("request")
}

async fn slate_of(t: &TestApp, id: &str) -> (u16, Value) {
    let resp = t.get_with(&t.project_url(&format!("/streams/{id}/slate")), &t.key).await;
    (resp.status().as_u16(), resp.json().await.expect("json"))
}

both_backends!(a_slate_picture_is_checked_before_it_is_stored);

async fn a_slate_picture_is_checked_before_it_is_stored(t: TestApp) {
    let stream: Value = t
        .post_json_with(&t.project_url("/streams"), &t.key, &json!({"name": "slate"}))
        .await
        .json()
        .await
        .expect("json");
    let id = stream["_id"].as_str().expect("id");
    // The default card: nothing of the stream's own.
    let (status, body) = slate_of(&t, id).await;
    assert_eq!(status, 404, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("default")), "{body}");

    let png = picture("png", "green", "640x360");
    let resp = put_slate(&t, id, "image/png", png.clone()).await;
    assert_eq!(resp.status(), 200);
    let set: Value = resp.json().await.expect("json");
    assert_eq!(
        (set["contentType"].as_str(), set["width"].as_i64(), set["height"].as_i64()),
        (Some("image/png"), Some(640), Some(360))
    );
    assert_eq!(set["size"].as_u64(), Some(png.len() as u64));
    assert_eq!(set["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(slate_of(&t, id).await, (200, set.clone()));

    // Everything refused leaves that picture in place.
    let jpeg = picture("mjpeg", "red", "320x240");
    let refusals: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        ("image/gif", b"GIF89a\x01\x00\x01\x00".to_vec(), 415, "image/jpeg or image/png"),
        ("text/plain", b"hello".to_vec(), 415, "image/jpeg or image/png"),
        ("image/png", jpeg.clone(), 415, "image/jpeg, not the image/png"),
        ("image/jpeg", b"not a picture at all".to_vec(), 415, "not a JPEG or PNG"),
        ("image/png", png[..png.len() / 2].to_vec(), 400, "decode"),
        ("image/jpeg", jpeg[..40].to_vec(), 400, "JPEG"),
        ("image/png", picture("png", "blue", "4100x16"), 400, "1 to 4096"),
        ("image/png", vec![0x89; 2 * 1024 * 1024 + 1], 413, "2 MiB"),
    ];
    for (content_type, body, status, says) in refusals {
        let message = error_message(put_slate(&t, id, content_type, body).await, status).await;
        assert!(message.to_string().contains(says), "{content_type} → {status}: {message} (wants {says:?})");
        assert_eq!(slate_of(&t, id).await, (200, set.clone()), "after a refused {content_type}");
    }
    // No content type at all.
    let resp = t
        .with_key(Method::PUT, &t.project_url(&format!("/streams/{id}/slate")), &t.key)
        .body(png.clone())
        .send()
        .await
        .expect("request");
    error_message(resp, 415).await;

    // A JPEG replaces it; a key that may only read may not.
    let resp = put_slate(&t, id, "image/jpeg", jpeg).await;
    assert_eq!(resp.status(), 200);
    let (_, now) = slate_of(&t, id).await;
    assert_eq!((now["contentType"].as_str(), now["width"].as_i64()), (Some("image/jpeg"), Some(320)));
    let reader = t.create_key(&["streams:read"]).await;
    let resp = t
        .with_key(Method::PUT, &t.project_url(&format!("/streams/{id}/slate")), &reader)
        .header("content-type", "image/png")
        .body(png)
        .send()
        .await
        .expect("request");
    error_message(resp, 403).await;
    assert_eq!(slate_of(&t, id).await.0, 200, "the reader can see it");

    // DELETE restores the card, and again is no error.
    for _ in 0..2 {
        let resp = t
            .with_key(Method::DELETE, &t.project_url(&format!("/streams/{id}/slate")), &t.key)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 204);
        assert_eq!(slate_of(&t, id).await.0, 404);
    }
    // Unknown stream.
    let resp = put_slate(&t, "nope", "image/png", picture("png", "green", "64x64")).await;
    error_message(resp, 404).await;
}
