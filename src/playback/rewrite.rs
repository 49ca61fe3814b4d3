//! Signed playlists: every URI a playlist lists — variant and media playlists, `EXT-X-MAP`,
//! `EXT-X-PART`, `EXT-X-PRELOAD-HINT`, `EXT-X-RENDITION-REPORT`, `EXT-X-KEY`, `EXT-X-MEDIA` —
//! gets the session's `token` (CONTRACT: the origin rewrites child URIs).

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
    let uris = text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).count()
        + text.matches("URI=\"").count();
    let mut out = String::with_capacity(text.len() + uris * (token.len() + 7));
    for line in text.lines() {
        if line.is_empty() {
        } else if !line.starts_with('#') {
            push_with_token(&mut out, line, token);
        } else {
            // Tag attributes: every `URI="…"` (quoted strings hold no quotes, RFC 8216bis 4.2).
            let mut rest = line;
            while let Some(at) = rest.find("URI=\"") {
                let start = at + 5;
                let Some(len) = rest[start..].find('"') else { break };
                out.push_str(&rest[..start]);
                push_with_token(&mut out, &rest[start..start + len], token);
                rest = &rest[start + len..];
            }
            out.push_str(rest);
        }
        out.push('\n');
    }
    out
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
}
