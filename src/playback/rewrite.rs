//! Signed playlists: every URI a playlist lists — variant and media playlists, `EXT-X-MAP`,
//! `EXT-X-PART`, `EXT-X-PRELOAD-HINT`, `EXT-X-RENDITION-REPORT`, `EXT-X-KEY`, `EXT-X-MEDIA` —
//! gets the session's `token` (CONTRACT: the origin rewrites child URIs): in its query, or, for
//! a live master, as a `t/<token>/` path prefix that everything below inherits.

use crate::media::hls::uris;

/// Appends `uri` with `token=<token>` added to its query.
fn push_with_token(out: &mut String, uri: &str, token: &str) {
    out.push_str(uri);
    out.push_str(if uri.contains('?') { "&token=" } else { "?token=" });
    out.push_str(token);
}

/// `url` with `token=<token>` added to its query (the signed URLs of a ticket).
pub fn with_token(url: &str, token: &str) -> String {
    let mut out = String::with_capacity(url.len() + token.len() + 7);
    push_with_token(&mut out, url, token);
    out
}

/// `text` with every URI carrying `token`.
pub fn sign_playlist(text: &str, token: &str) -> String {
    let spliced = uris::splice(text.as_bytes(), &uris::ends(text), token);
    // Only ASCII was inserted after whole URIs: still UTF-8.
    String::from_utf8(spliced).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A live master playlist for a signed session: every URI gets the path prefix `t/<token>/`
/// (`/live/<id>/t/<token>/<session>/<rendition>/…`). The media playlists, parts and keys below
/// it are named relative to that path, so they carry the token without being rewritten: every
/// signed viewer is served the same bytes of a media playlist version as an unsigned one.
pub fn tokened_master(text: &str, token: &str) -> String {
    uris::prefix(text, &format!("t/{}/", path_segment(token)))
}

/// `token` as one path segment: characters outside RFC 3986's unreserved set and `:` are
/// percent-encoded (a token holds none today; this keeps a future one from splitting the path).
fn path_segment(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A rendered playlist with its URI ends (computed once per version) signed for `token`.
pub fn sign_rendered(text: &[u8], ends: &[uris::UriEnd], token: &str) -> Vec<u8> {
    uris::splice(text, ends, token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_uri_gets_the_token_and_nothing_else_changes() {
        let text = "#EXTM3U\n#EXT-X-MAP:URI=\"init0.mp4\"\n#EXT-X-KEY:METHOD=AES-128,URI=\"../../key\"\n\
                    #EXT-X-PART:DURATION=0.33,URI=\"p1.m4s\",INDEPENDENT=YES\n#EXTINF:2.0,\ns0.m4s\n\
                    #EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p2.m4s\"\n\
                    #EXT-X-RENDITION-REPORT:URI=\"../480p/index.m3u8\",LAST-MSN=1,LAST-PART=0\n\
                    #EXT-X-STREAM-INF:BANDWIDTH=1,CODECS=\"avc1.64001f\"\n720p/index.m3u8?x=1\n";
        let signed = sign_playlist(text, "T.k.1");
        assert_eq!(
            signed,
            "#EXTM3U\n#EXT-X-MAP:URI=\"init0.mp4?token=T.k.1\"\n\
             #EXT-X-KEY:METHOD=AES-128,URI=\"../../key?token=T.k.1\"\n\
             #EXT-X-PART:DURATION=0.33,URI=\"p1.m4s?token=T.k.1\",INDEPENDENT=YES\n#EXTINF:2.0,\n\
             s0.m4s?token=T.k.1\n#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p2.m4s?token=T.k.1\"\n\
             #EXT-X-RENDITION-REPORT:URI=\"../480p/index.m3u8?token=T.k.1\",LAST-MSN=1,LAST-PART=0\n\
             #EXT-X-STREAM-INF:BANDWIDTH=1,CODECS=\"avc1.64001f\"\n720p/index.m3u8?x=1&token=T.k.1\n"
        );
    }

    #[test]
    fn a_master_names_its_children_under_the_token_path() {
        let text = "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nS/720p/index.m3u8\n";
        assert_eq!(
            tokened_master(text, "v1~stream:a~9~-~::1.k.f0 /?"),
            "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\nt/v1~stream:a~9~-~::1.k.f0%20%2F%3F/S/720p/index.m3u8\n"
        );
    }
}
