//! The SDP that WHIP and WHEP exchange: reading a client's offer (bounded), finding the codecs
//! Sluice speaks in it, adding gathered candidates to an answer, and reading trickled ones.

use std::net::IpAddr;

use gstreamer as gst;
use gstreamer_sdp as gst_sdp;

/// Largest offer or trickle body read.
pub const MAX_SDP_BYTES: usize = 64 * 1024;
/// Most candidates one trickle request may add.
pub const MAX_TRICKLED: usize = 64;

/// Parses an offer; refuses what is not an SDP session with at least one media section.
pub fn parse_offer(text: &[u8]) -> Result<gst_sdp::SDPMessage, String> {
    if text.len() > MAX_SDP_BYTES {
        return Err(format!("the offer is larger than {MAX_SDP_BYTES} bytes"));
    }
    let text = std::str::from_utf8(text).map_err(|_| "the offer is not UTF-8 text".to_string())?;
    if !text.trim_start().starts_with("v=0") {
        return Err("the offer is not an SDP session description (v=0 first)".into());
    }
    let sdp = gst_sdp::SDPMessage::parse_buffer(text.as_bytes()).map_err(|_| "the offer is not valid SDP")?;
    if sdp.medias_len() == 0 {
        return Err("the offer has no media section".into());
    }
    if sdp.medias_len() > 8 {
        return Err("the offer has more than 8 media sections".into());
    }
    Ok(sdp)
}

/// A codec found in an offer: its m-line and payload type, and the RTP caps it names.
#[derive(Debug, Clone)]
pub struct Offered {
    pub mline: u32,
    pub pt: u32,
    pub caps: gst::Caps,
}

/// The offer's H.264 (constrained baseline preferred: what the WebRTC rung is; packetization
/// mode 1 when Sluice sends, 0 or 1 when it `receiving`) and its Opus.
pub fn codecs(sdp: &gst_sdp::SDPMessageRef, receiving: bool) -> (Option<Offered>, Option<Offered>) {
    let mut video: Option<(u32, Offered)> = None;
    let mut audio = None;
    for (mline, media) in sdp.medias().enumerate() {
        let mline = mline as u32;
        let kind = media.media().unwrap_or_default();
        for format in media.formats() {
            let Ok(pt) = format.parse::<u32>() else { continue };
            let Some(caps) = media.caps_from_media(pt as i32) else { continue };
            let Some(s) = caps.structure(0) else { continue };
            let name = s.get::<&str>("encoding-name").unwrap_or_default().to_ascii_uppercase();
            if kind == "video" && name == "H264" && video.as_ref().is_none_or(|(_, v)| v.mline == mline) {
                // Sluice sends mode 1 (FU-A); it receives either (no mode: single NAL units).
                let mode = s.get::<&str>("packetization-mode").unwrap_or("0");
                if !(mode == "1" || receiving && mode == "0") {
                    continue;
                }
                // `caps_from_media` reads profile-level-id into `profile`. Constrained baseline
                // first, then baseline, then any other profile.
                let rank = match s.get::<&str>("profile").unwrap_or_default() {
                    "constrained-baseline" => 3,
                    "baseline" => 2,
                    _ => 1,
                };
                if video.as_ref().is_none_or(|(r, _)| rank > *r) {
                    video = Some((rank, Offered { mline, pt, caps: rtp_caps(&caps, "video") }));
                }
            } else if kind == "audio" && name == "OPUS" && audio.is_none() {
                audio = Some(Offered { mline, pt, caps: rtp_caps(&caps, "audio") });
            }
        }
    }
    (video.map(|(_, v)| v), audio)
}

/// Leaves only the chosen payload types in the offer's media sections (with their `rtpmap`,
/// `fmtp` and `rtcp-fb` lines), so `webrtcbin` answers with exactly the codecs Sluice speaks.
pub fn keep_only(sdp: &mut gst_sdp::SDPMessageRef, chosen: &[&Offered]) {
    for (index, media) in sdp.medias_mut().enumerate() {
        let Some(pick) = chosen.iter().find(|o| o.mline == index as u32) else { continue };
        let pt = pick.pt.to_string();
        for i in (0..media.formats_len()).rev() {
            if media.format(i) != Some(pt.as_str()) {
                let _ = media.remove_format(i);
            }
        }
        for i in (0..media.attributes_len()).rev() {
            let Some(a) = media.attribute(i) else { continue };
            if !matches!(a.key(), "rtpmap" | "fmtp" | "rtcp-fb") {
                continue;
            }
            let of = a.value().and_then(|v| v.split_whitespace().next()).unwrap_or_default();
            if of != pt && of != "*" {
                let _ = media.remove_attribute(i);
            }
        }
    }
}

/// The caps `caps_from_media` gives carry SDP attributes `webrtcbin` does not want on a pad
/// (`rtcp-fb-*`, `a-*`); keep what names the codec.
fn rtp_caps(caps: &gst::Caps, media: &str) -> gst::Caps {
    let mut out = gst::Caps::new_empty_simple("application/x-rtp");
    if let (Some(s), Some(o)) = (caps.structure(0), out.get_mut().and_then(|c| c.structure_mut(0))) {
        o.set("media", media);
        for field in [
            "encoding-name",
            "payload",
            "clock-rate",
            "packetization-mode",
            "profile-level-id",
            "level-asymmetry-allowed",
            "encoding-params",
            "sprop-stereo",
            "minptime",
            "useinbandfec",
        ] {
            if let Ok(v) = s.value(field) {
                o.set_value(field, v.clone());
            }
        }
    }
    out
}

/// The answer's text with the gathered candidates in their media sections (those `webrtcbin`
/// left out) and, with a public IP, each host candidate once more at that address.
pub fn with_candidates(
    answer: &gst_sdp::SDPMessageRef,
    gathered: &[(u32, String)],
    public_ip: Option<IpAddr>,
) -> Result<String, String> {
    let mut sdp = answer.to_owned();
    for index in 0..sdp.medias_len() {
        let Some(media) = sdp.media_mut(index) else { continue };
        let present: Vec<String> = media
            .attributes()
            .filter(|a| a.key() == "candidate")
            .filter_map(|a| a.value().map(str::to_string))
            .collect();
        let mut added = present.clone();
        for (mline, candidate) in gathered {
            let value = candidate.trim_start_matches("a=").trim_start_matches("candidate:").to_string();
            if *mline == index && !added.contains(&value) {
                added.push(value);
            }
        }
        if let Some(ip) = public_ip {
            let public: Vec<String> = added.iter().filter_map(|c| at_public_ip(c, ip)).collect();
            added.extend(public);
        }
        for value in added.iter().filter(|v| !present.contains(v)) {
            media.add_attribute("candidate", Some(value));
        }
        if !added.is_empty() && media.attribute_val("end-of-candidates").is_none() {
            media.add_attribute("end-of-candidates", None);
        }
    }
    sdp.as_text().map_err(|e| format!("writing the answer: {e}"))
}

/// A host candidate (`foundation component transport priority address port typ host …`) at
/// `ip` instead, with a lower priority and its own foundation; other candidates: `None`.
pub fn at_public_ip(candidate: &str, ip: IpAddr) -> Option<String> {
    let mut fields: Vec<String> = candidate.split_whitespace().map(str::to_string).collect();
    if fields.len() < 8 || fields[6] != "typ" || fields[7] != "host" || fields[4] == ip.to_string() {
        return None;
    }
    if fields[2].eq_ignore_ascii_case("udp") && fields[4].parse::<IpAddr>().ok()?.is_ipv4() != ip.is_ipv4() {
        return None;
    }
    fields[0] = format!("{}p", fields[0]);
    fields[3] = fields[3].parse::<u32>().ok()?.saturating_sub(1).to_string();
    fields[4] = ip.to_string();
    Some(fields.join(" "))
}

/// The candidates of a trickle body (`application/trickle-ice-sdpfrag`, RFC 8840), each with the
/// index of the media section it follows (0 before any `m=` line; with BUNDLE everything goes
/// to the first).
pub fn fragment_candidates(fragment: &str) -> Result<Vec<(u32, String)>, String> {
    if fragment.len() > MAX_SDP_BYTES {
        return Err(format!("the fragment is larger than {MAX_SDP_BYTES} bytes"));
    }
    let mut mline: Option<u32> = None;
    let mut out = Vec::new();
    for line in fragment.lines().map(str::trim) {
        if line.starts_with("m=") {
            mline = Some(mline.map_or(0, |m| m + 1));
        } else if let Some(candidate) = line.strip_prefix("a=candidate:") {
            if candidate.split_whitespace().count() < 8 {
                return Err(format!("not a candidate: {line}"));
            }
            out.push((mline.unwrap_or(0), format!("candidate:{candidate}")));
            if out.len() > MAX_TRICKLED {
                return Err(format!("more than {MAX_TRICKLED} candidates"));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER: &str = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\na=group:BUNDLE 0 1\r\n\
        m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=recvonly\r\n\
        a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\n\
        m=video 9 UDP/TLS/RTP/SAVPF 96 102 108\r\nc=IN IP4 0.0.0.0\r\na=mid:1\r\na=recvonly\r\n\
        a=rtpmap:96 VP8/90000\r\na=rtpmap:102 H264/90000\r\n\
        a=fmtp:102 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=640c1f\r\n\
        a=rtpmap:108 H264/90000\r\n\
        a=fmtp:108 level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f\r\n";

    #[test]
    fn finds_constrained_baseline_h264_and_opus() {
        crate::media::gst::init().expect("GStreamer");
        let sdp = parse_offer(OFFER.as_bytes()).expect("parses");
        let (video, audio) = codecs(&sdp, false);
        let video = video.expect("H.264");
        assert_eq!((video.mline, video.pt), (1, 108));
        let audio = audio.expect("Opus");
        assert_eq!((audio.mline, audio.pt), (0, 111));
        let mut sdp = sdp;
        keep_only(&mut sdp, &[&video, &audio]);
        let text = sdp.as_text().expect("text");
        assert!(text.contains("m=video 9 UDP/TLS/RTP/SAVPF 108\r\n"), "{text}");
        assert!(!text.contains("VP8") && !text.contains("640c1f"), "{text}");
        assert!(text.contains("a=fmtp:108 "), "{text}");
    }

    #[test]
    fn refuses_what_is_not_an_offer() {
        crate::media::gst::init().expect("GStreamer");
        assert!(parse_offer(b"hello").is_err());
        assert!(parse_offer(&[0xff, 0xfe]).is_err());
        assert!(parse_offer(b"v=0\r\n").is_err(), "no media");
        assert!(parse_offer(&vec![b'v'; MAX_SDP_BYTES + 1]).is_err());
    }

    #[test]
    fn public_ip_candidates() {
        let ip: IpAddr = "203.0.113.7".parse().expect("ip");
        let c = "1 1 UDP 2015363327 10.0.0.5 40001 typ host";
        assert_eq!(at_public_ip(c, ip).as_deref(), Some("1p 1 UDP 2015363326 203.0.113.7 40001 typ host"));
        assert_eq!(at_public_ip("1 1 UDP 1 10.0.0.5 4 typ srflx raddr 0.0.0.0 rport 9", ip), None);
        assert_eq!(at_public_ip("short", ip), None);
    }

    #[test]
    fn trickle_fragments() {
        let frag = "a=ice-ufrag:x\r\na=ice-pwd:y\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\n\
            a=candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host\r\nm=video 9 RTP/AVP 0\r\n\
            a=candidate:2 1 udp 2130706431 192.0.2.1 5002 typ host\r\n";
        let c = fragment_candidates(frag).expect("parses");
        assert_eq!(c.len(), 2);
        assert_eq!(c[0], (0, "candidate:1 1 udp 2130706431 192.0.2.1 5000 typ host".to_string()));
        assert_eq!(c[1].0, 1);
        assert!(fragment_candidates("a=candidate:1 2\r\n").is_err());
        let flood: String =
            (0..100).map(|i| format!("a=candidate:{i} 1 udp 1 192.0.2.1 5 typ host\r\n")).collect();
        assert!(fragment_candidates(&flood).is_err());
    }
}
