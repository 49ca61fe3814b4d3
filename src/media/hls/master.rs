//! The master playlist (RFC 8216bis 4.4.6.1 EXT-X-STREAM-INF, 4.4.6.2 EXT-X-MEDIA), the same
//! for a live ladder and a VOD's renditions.

use std::fmt::Write;

/// A video variant of the master playlist.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    pub uri: String,
    /// Peak bits per second of the variant, audio included.
    pub bandwidth: u64,
    pub width: u32,
    pub height: u32,
    /// The video codec (`avc1.…`).
    pub codec: String,
    pub frame_rate: Option<f64>,
}

/// The audio rendition every variant refers to.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioRendition {
    pub uri: String,
    pub codec: String,
    pub channels: u32,
}

/// The video variants a master playlist lists: `(uri, width, height)`, in its order (those
/// without a `RESOLUTION` are left out).
pub fn read_variants(text: &str) -> Vec<(&str, u32, u32)> {
    let mut out = Vec::new();
    let mut size = None;
    for line in text.lines().map(str::trim) {
        if let Some(attrs) = line.strip_prefix("#EXT-X-STREAM-INF:") {
            size = attrs.split(',').find_map(|a| {
                let (w, h) = a.strip_prefix("RESOLUTION=")?.split_once('x')?;
                Some((w.parse().ok()?, h.parse().ok()?))
            });
        } else if !line.is_empty() && !line.starts_with('#') {
            if let Some((w, h)) = size.take() {
                out.push((line, w, h));
            }
        }
    }
    out
}

/// The master playlist: one `EXT-X-STREAM-INF` per variant, highest bandwidth first, and the
/// shared audio rendition in group `audio`.
pub fn render_master(variants: &[Variant], audio: Option<&AudioRendition>) -> String {
    let mut out = String::from("#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    if let Some(a) = audio {
        let _ = writeln!(
            out,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio\",DEFAULT=YES,AUTOSELECT=YES,CHANNELS=\"{}\",URI=\"{}\"",
            a.channels, a.uri
        );
    }
    let mut sorted: Vec<&Variant> = variants.iter().collect();
    sorted.sort_by_key(|v| std::cmp::Reverse(v.bandwidth));
    for v in sorted {
        let codecs = match audio {
            Some(a) => format!("{},{}", v.codec, a.codec),
            None => v.codec.clone(),
        };
        let _ = write!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={},RESOLUTION={}x{},CODECS=\"{codecs}\"",
            v.bandwidth, v.width, v.height
        );
        if let Some(fps) = v.frame_rate {
            let _ = write!(out, ",FRAME-RATE={fps:.3}");
        }
        if audio.is_some() {
            out.push_str(",AUDIO=\"audio\"");
        }
        let _ = writeln!(out, "\n{}", v.uri);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_lists_every_variant_with_its_attributes() {
        let v = |name: &str, bw, w, h| Variant {
            uri: format!("{name}/index.m3u8"),
            bandwidth: bw,
            width: w,
            height: h,
            codec: "avc1.64001f".into(),
            frame_rate: Some(30.0),
        };
        let audio = AudioRendition { uri: "audio/index.m3u8".into(), codec: "mp4a.40.2".into(), channels: 2 };
        let text =
            render_master(&[v("480p", 1_700_000, 854, 480), v("720p", 3_300_000, 1280, 720)], Some(&audio));
        assert!(text.starts_with("#EXTM3U\n"));
        let lines: Vec<&str> = text.lines().collect();
        let inf: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with("#EXT-X-STREAM-INF:")).collect();
        assert_eq!(inf.len(), 2);
        assert_eq!(
            inf[0],
            "#EXT-X-STREAM-INF:BANDWIDTH=3300000,RESOLUTION=1280x720,CODECS=\"avc1.64001f,mp4a.40.2\",FRAME-RATE=30.000,AUDIO=\"audio\""
        );
        let after = lines.iter().position(|l| *l == inf[0]).unwrap() + 1;
        assert_eq!(lines[after], "720p/index.m3u8", "the URI follows its STREAM-INF");
        assert!(text.contains("#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\""));
        assert!(text.contains("URI=\"audio/index.m3u8\""));
        assert_eq!(read_variants(&text), [("720p/index.m3u8", 1280, 720), ("480p/index.m3u8", 854, 480)]);
        let silent = render_master(&[v("source", 900_000, 640, 360)], None);
        assert!(silent.contains("CODECS=\"avc1.64001f\"") && !silent.contains("AUDIO="));
    }
}
