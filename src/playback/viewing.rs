//! Playback sessions at the origin (CONTRACT: Viewers): a master playlist fetched by a viewer
//! mints a session ([`crate::services::viewers::Viewers::mint`]) that every URI of that master
//! carries as `vs=` (after the token, in the same rewrite); the playlists a live session reloads
//! count it, and the segments a VOD session fetches add their duration to the VOD's watch time.
//! A request another node relays is not counted here: the node the viewer asked counted it.

use poem::Request;

use super::{is_relayed, Origin};
use crate::media::hls::uris;

/// The `vs` parameter of a query, if it has one.
pub(super) fn vs_of(query: &str) -> Option<&str> {
    query.split('&').find_map(|pair| pair.strip_prefix("vs="))
}

/// A new session of `resource` for a viewer's master fetch (none for a relayed one).
pub(super) fn mint(app: &Origin, req: &Request, resource: &str) -> Option<String> {
    (!is_relayed(app, req)).then(|| app.viewers.mint(resource))
}

/// A viewer's live master fetch of `stream`: a new session, counted from now.
pub(super) fn start_live(app: &Origin, req: &Request, stream: &str) -> Option<String> {
    let vs = mint(app, req, &format!("stream:{stream}"))?;
    app.viewers.touch(stream, &vs);
    Some(vs)
}

/// `text` (a playlist) with `vs=<vs>` in the query of every URI it lists.
pub(super) fn with_session(text: &str, vs: &str) -> String {
    let spliced = uris::splice_param(text.as_bytes(), &uris::ends(text), "vs", vs);
    // Only ASCII was inserted after whole URIs: still UTF-8.
    String::from_utf8(spliced).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A live playlist request of `stream`: its session, if it carries one, counts as watching.
pub(super) fn touch_live(app: &Origin, req: &Request, stream: &str) {
    let Some(vs) = req.uri().query().and_then(vs_of) else { return };
    if !is_relayed(app, req) {
        app.viewers.touch(stream, vs);
    }
}

/// The duration of each segment a VOD media playlist lists, by file name (`s3.m4s`).
pub(super) fn segment_durations(text: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut duration = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("#EXTINF:") {
            duration = rest.split(',').next().and_then(|d| d.trim().parse::<f64>().ok());
        } else if !line.starts_with('#') && !line.is_empty() {
            if let Some(d) = duration.take() {
                let file = line.split('?').next().unwrap_or(line);
                out.push((file.rsplit('/').next().unwrap_or(file).to_string(), d));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_found_and_spliced() {
        assert_eq!(vs_of("_HLS_msn=3&vs=abc&token=t"), Some("abc"));
        assert_eq!(vs_of("vs=x"), Some("x"));
        assert_eq!(vs_of("avs=x&token=vs=y"), None);
        assert_eq!(vs_of(""), None);
        let master = "#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,URI=\"a/index.m3u8\"\n#EXT-X-STREAM-INF:BANDWIDTH=1\n\
                      t/T/S/720p/index.m3u8\n";
        assert_eq!(
            with_session(master, "V"),
            "#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,URI=\"a/index.m3u8?vs=V\"\n#EXT-X-STREAM-INF:BANDWIDTH=1\n\
             t/T/S/720p/index.m3u8?vs=V\n"
        );
    }

    #[test]
    fn segment_durations_by_file() {
        let text =
            "#EXTM3U\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:2.000,\ns0.m4s\n#EXTINF:1.5,\ns1.m4s?token=x\n\
                    #EXTINF:bad,\ns2.m4s\n#EXT-X-ENDLIST\n";
        assert_eq!(segment_durations(text), vec![("s0.m4s".to_string(), 2.0), ("s1.m4s".to_string(), 1.5)]);
    }
}
