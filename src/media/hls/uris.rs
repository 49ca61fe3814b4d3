//! Where a playlist's URIs end: the places a signed session's `token` goes (every URI line and
//! every `URI="…"` attribute, RFC 8216bis 4.2: quoted strings hold no quotes). Computed once per
//! rendered playlist, so that signing a playlist for each viewer is a splice, not a parse.

/// One URI of a playlist: the byte offset just past it, and whether it has a query already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UriEnd {
    pub at: usize,
    pub has_query: bool,
}

/// Every URI end of `text`, in order.
pub fn ends(text: &str) -> Vec<UriEnd> {
    let mut out = Vec::new();
    each_uri(text, |start, end| out.push(UriEnd { at: end, has_query: text[start..end].contains('?') }));
    out
}

/// Calls `found` with where each URI of `text` starts and ends (byte offsets), in order.
fn each_uri(text: &str, mut found: impl FnMut(usize, usize)) {
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        if body.is_empty() {
        } else if !body.starts_with('#') {
            found(start, start + body.len());
        } else {
            let mut from = 0;
            while let Some(at) = body[from..].find("URI=\"") {
                let uri_start = from + at + 5;
                let Some(len) = body[uri_start..].find('"') else { break };
                found(start + uri_start, start + uri_start + len);
                from = uri_start + len;
            }
        }
        start += line.len();
    }
}

/// `text` with `prefix` put before every URI (a signed live session's `t/<token>/` path).
pub fn prefix(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8 * (prefix.len() + 1));
    let mut from = 0;
    each_uri(text, |start, _| {
        out.push_str(&text[from..start]);
        out.push_str(prefix);
        from = start;
    });
    out.push_str(&text[from..]);
    out
}

/// `text` with `token=<token>` added to every URI at `ends` (from [`ends`] of the same text):
/// one exact-size allocation and a copy per URI.
pub fn splice(text: &[u8], ends: &[UriEnd], token: &str) -> Vec<u8> {
    splice_param(text, ends, "token", token)
}

/// `text` with `<name>=<value>` added to the query of every URI at `ends`.
pub fn splice_param(text: &[u8], ends: &[UriEnd], name: &str, value: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + ends.len() * (name.len() + value.len() + 2));
    let mut from = 0;
    for e in ends {
        let Some(chunk) = text.get(from..e.at) else { break };
        out.extend_from_slice(chunk);
        out.push(if e.has_query { b'&' } else { b'?' });
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(value.as_bytes());
        from = e.at;
    }
    out.extend_from_slice(text.get(from..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_after_every_uri() {
        let text = "#EXTM3U\n#EXT-X-MAP:URI=\"init0.mp4\"\n#EXTINF:2.0,\ns0.m4s\n\
                    #EXT-X-STREAM-INF:BANDWIDTH=1\n720p/index.m3u8?x=1\n";
        let e = ends(text);
        assert_eq!(e.len(), 3);
        let signed = String::from_utf8(splice(text.as_bytes(), &e, "T")).unwrap();
        assert_eq!(
            signed,
            "#EXTM3U\n#EXT-X-MAP:URI=\"init0.mp4?token=T\"\n#EXTINF:2.0,\ns0.m4s?token=T\n\
             #EXT-X-STREAM-INF:BANDWIDTH=1\n720p/index.m3u8?x=1&token=T\n"
        );
        assert_eq!(splice(b"no uris\n", &[], "T"), b"no uris\n");
    }

    #[test]
    fn prefixes_every_uri() {
        let text = "#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",URI=\"S/audio/index.m3u8\"\n\
                    #EXT-X-STREAM-INF:BANDWIDTH=1\nS/720p/index.m3u8\n";
        assert_eq!(
            prefix(text, "t/T/"),
            "#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"a\",URI=\"t/T/S/audio/index.m3u8\"\n\
             #EXT-X-STREAM-INF:BANDWIDTH=1\nt/T/S/720p/index.m3u8\n"
        );
        assert_eq!(prefix("#EXTM3U\n\n", "t/T/"), "#EXTM3U\n\n");
    }
}
