//! FLV framing of RTMP media: RTMP audio and video payloads are FLV tag bodies; wrapped in a
//! tag header, they are what `flvdemux` reads.

/// FLV tag types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag {
    Audio = 8,
    Video = 9,
}

/// The 9-byte FLV header (audio and video present) and `PreviousTagSize0`.
pub fn flv_header() -> Vec<u8> {
    vec![b'F', b'L', b'V', 1, 0x05, 0, 0, 0, 9, 0, 0, 0, 0]
}

/// One FLV tag around an RTMP audio/video payload (which is an FLV tag body), with its
/// trailing `PreviousTagSize`.
pub fn flv_tag(tag: Tag, timestamp_ms: u32, data: &[u8]) -> Vec<u8> {
    let size = data.len() as u32;
    let mut out = Vec::with_capacity(11 + data.len() + 4);
    out.push(tag as u8);
    out.extend_from_slice(&size.to_be_bytes()[1..]);
    out.extend_from_slice(&timestamp_ms.to_be_bytes()[1..]);
    out.push((timestamp_ms >> 24) as u8);
    out.extend_from_slice(&[0, 0, 0]);
    out.extend_from_slice(data);
    out.extend_from_slice(&(11 + size).to_be_bytes());
    out
}

/// The tags of an FLV stream after its header, `(type, timestamp ms, body)`: what [`flv_tag`]
/// writes, read back (the tests read clips and GStreamer's `flvmux` output with it). It stops at
/// a tag cut short.
pub fn flv_tags(flv: &[u8]) -> Vec<(u8, u32, Vec<u8>)> {
    let mut tags = Vec::new();
    let mut at = 13; // the 9-byte header and the first previous-tag size
    while at + 11 <= flv.len() {
        let size = u32::from_be_bytes([0, flv[at + 1], flv[at + 2], flv[at + 3]]) as usize;
        let ts = u32::from_be_bytes([flv[at + 7], flv[at + 4], flv[at + 5], flv[at + 6]]);
        let Some(data) = flv.get(at + 11..at + 11 + size) else { break };
        tags.push((flv[at], ts, data.to_vec()));
        at += 11 + size + 4;
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flv_framing() {
        let t = flv_tag(Tag::Video, 0x0102_0304, &[0xAA, 0xBB]);
        assert_eq!(t[0], 9);
        assert_eq!(&t[1..4], &[0, 0, 2], "data size");
        assert_eq!(&t[4..8], &[0x02, 0x03, 0x04, 0x01], "timestamp, then its extension byte");
        assert_eq!(&t[8..11], &[0, 0, 0]);
        assert_eq!(&t[11..13], &[0xAA, 0xBB]);
        assert_eq!(&t[13..], &13u32.to_be_bytes(), "previous tag size = 11 + data");
        assert_eq!(flv_header().len(), 13);
        let stream = [flv_header(), t, flv_tag(Tag::Audio, 7, &[0xCC])[..11].to_vec()].concat();
        assert_eq!(flv_tags(&stream), [(9, 0x0102_0304, vec![0xAA, 0xBB])], "read back; the cut tag is left");
    }
}
