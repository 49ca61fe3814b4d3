//! A bounded reader of the RTMP chunk stream (RTMP 1.0 spec §5.3), without IO: bytes in,
//! whole messages out.
//!
//! rml_rtmp's own `ChunkDeserializer` cannot face an unauthenticated peer: it reserves the
//! length a header declares (16 MiB a chunk stream) before any of it arrives, keeps one payload
//! buffer for all chunk streams (a header on a second chunk stream in the middle of a message
//! makes `length - received` underflow and the reserve panic), and tracks any number of chunk
//! streams. This reader puts every peer byte through bounds first:
//! - a message longer than its type allows is refused when its header arrives, before any of its
//!   payload is buffered, and payloads grow only with bytes actually received;
//! - each chunk stream keeps its own partial message, at most [`MAX_CHUNK_STREAMS`] of them and
//!   [`MAX_BUFFERED`] bytes in all;
//! - a header that starts a new message on a chunk stream whose message is unfinished is refused;
//! - only header bytes are ever held back, never a whole chunk, whatever chunk size the peer set.
//!
//! `SetChunkSize` and `Abort` act here and are not passed on; every other message is.

use bytes::{Bytes, BytesMut};
use std::collections::HashMap;

/// Chunk streams a peer may use. Encoders use a handful (control, command, audio, video).
pub const MAX_CHUNK_STREAMS: usize = 32;
/// Bytes of unfinished messages held over all chunk streams.
pub const MAX_BUFFERED: usize = 16 * 1024 * 1024;
/// The largest video message: a keyframe of a high-bitrate 4K stream fits.
pub const MAX_VIDEO_MESSAGE: u32 = 8 * 1024 * 1024;
/// The largest audio message.
pub const MAX_AUDIO_MESSAGE: u32 = 1024 * 1024;
/// The largest command, data or control message. A `connect` or `onMetaData` takes a few
/// hundred bytes.
pub const MAX_OTHER_MESSAGE: u32 = 64 * 1024;

/// The chunk size of every peer until it sets another (§5.4.1).
const DEFAULT_CHUNK_SIZE: usize = 128;
/// A 3-byte timestamp field of this value means a 4-byte extended timestamp follows (§5.3.1.3).
const EXTENDED: u32 = 0xFF_FFFF;

const SET_CHUNK_SIZE: u8 = 1;
const ABORT: u8 = 2;
pub(super) const AUDIO: u8 = 8;
pub(super) const VIDEO: u8 = 9;

/// One whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub timestamp: u32,
    pub type_id: u8,
    pub stream_id: u32,
    pub data: Bytes,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChunkError {
    #[error("a message of type {type_id} declares {length} bytes, more than the {max} allowed")]
    TooLarge { type_id: u8, length: u32, max: u32 },
    #[error("more than {MAX_CHUNK_STREAMS} chunk streams")]
    TooManyChunkStreams,
    #[error("unfinished messages exceed {MAX_BUFFERED} bytes")]
    TooMuchBuffered,
    #[error("chunk stream {0} continues a message it never started")]
    NoPreviousHeader(u32),
    #[error("chunk stream {0} starts a message before finishing the last one")]
    Interleaved(u32),
    #[error("invalid chunk size {0}")]
    BadChunkSize(u32),
    #[error("malformed {0} message")]
    Malformed(&'static str),
}

/// What a chunk stream remembers between chunks (§5.3.1.2: later headers omit what is unchanged).
#[derive(Default)]
struct ChunkStream {
    timestamp: u32,
    /// The last 3-byte timestamp field, which tells whether type-3 chunks carry an extended one.
    field: u32,
    /// Added to the timestamp when a type-3 chunk starts a new message. After a type-0 header
    /// this is its absolute timestamp, as ffmpeg and librtmp read it.
    delta: u32,
    length: u32,
    type_id: u8,
    stream_id: u32,
    partial: BytesMut,
}

struct Header {
    csid: u32,
    format: u8,
    field: u32,
    extended: Option<u32>,
    length: u32,
    type_id: u8,
    stream_id: u32,
}

/// Splits the chunk stream into messages; see the module doc for its bounds.
pub struct ChunkReader {
    /// Header bytes that arrived without the rest of their header (at most 18).
    pending: Vec<u8>,
    chunk_size: usize,
    streams: HashMap<u32, ChunkStream>,
    /// The chunk stream whose payload is being read, and how much of this chunk is left.
    reading: Option<(u32, usize)>,
    buffered: usize,
}

impl Default for ChunkReader {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkReader {
    pub fn new() -> Self {
        ChunkReader {
            pending: Vec::new(),
            chunk_size: DEFAULT_CHUNK_SIZE,
            streams: HashMap::new(),
            reading: None,
            buffered: 0,
        }
    }

    /// Reads `input`, appending every message it completes to `out`.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<Message>) -> Result<(), ChunkError> {
        while !input.is_empty() {
            if let Some((csid, left)) = self.reading {
                let n = left.min(input.len());
                let (taken, rest) = input.split_at(n);
                input = rest;
                self.buffered += n;
                let stream = self.streams.get_mut(&csid).ok_or(ChunkError::NoPreviousHeader(csid))?;
                stream.partial.extend_from_slice(taken);
                self.reading = (left > n).then_some((csid, left - n));
                if self.reading.is_none() {
                    self.finish_chunk(csid, out)?;
                }
                continue;
            }
            // A header: from what was held back plus enough of the input to complete it.
            let held = self.pending.len();
            let take = input.len().min(18 - held.min(18));
            self.pending.extend_from_slice(&input[..take]);
            match parse_header(&self.pending, &self.streams)? {
                None => {
                    input = &input[take..];
                    if self.pending.len() >= 18 {
                        return Err(ChunkError::Malformed("chunk header"));
                    }
                }
                Some((header, used)) => {
                    // `used` counts held bytes first; the rest came from `input`.
                    input = &input[used.saturating_sub(held)..];
                    self.pending.clear();
                    self.start_chunk(header, out)?;
                }
            }
        }
        Ok(())
    }

    fn start_chunk(&mut self, h: Header, out: &mut Vec<Message>) -> Result<(), ChunkError> {
        if !self.streams.contains_key(&h.csid) {
            if h.format != 0 {
                return Err(ChunkError::NoPreviousHeader(h.csid));
            }
            if self.streams.len() >= MAX_CHUNK_STREAMS {
                return Err(ChunkError::TooManyChunkStreams);
            }
            self.streams.insert(h.csid, ChunkStream::default());
        }
        let s = self.streams.get_mut(&h.csid).ok_or(ChunkError::NoPreviousHeader(h.csid))?;
        let starts_message = s.partial.is_empty();
        // A fuller header in the middle of a message (rml_rtmp's own writer sends type 0 on
        // every chunk when asked for uncompressed headers) continues it if it describes the
        // same message; anything else would mix two messages.
        let format = if starts_message {
            h.format
        } else if h.format >= 2 || (h.length == s.length && h.type_id == s.type_id) {
            3
        } else {
            return Err(ChunkError::Interleaved(h.csid));
        };
        let value = h.extended.unwrap_or(h.field);
        match format {
            0 => {
                s.timestamp = value;
                s.delta = value;
            }
            1 | 2 => {
                s.timestamp = s.timestamp.wrapping_add(value);
                s.delta = value;
            }
            _ => {
                if starts_message {
                    if let Some(extended) = h.extended {
                        s.delta = extended;
                    }
                    s.timestamp = s.timestamp.wrapping_add(s.delta);
                }
            }
        }
        if format < 3 {
            s.field = h.field;
        }
        if format < 2 {
            s.length = h.length;
            s.type_id = h.type_id;
        }
        if format == 0 {
            s.stream_id = h.stream_id;
        }
        if starts_message {
            let max = match s.type_id {
                VIDEO => MAX_VIDEO_MESSAGE,
                AUDIO => MAX_AUDIO_MESSAGE,
                _ => MAX_OTHER_MESSAGE,
            };
            if s.length > max {
                return Err(ChunkError::TooLarge { type_id: s.type_id, length: s.length, max });
            }
            if self.buffered + s.length as usize > MAX_BUFFERED {
                return Err(ChunkError::TooMuchBuffered);
            }
        }
        let left = (s.length as usize - s.partial.len()).min(self.chunk_size);
        if left == 0 {
            self.finish_chunk(h.csid, out)
        } else {
            self.reading = Some((h.csid, left));
            Ok(())
        }
    }

    /// A chunk ended: when its message is whole, it goes out (or acts here).
    fn finish_chunk(&mut self, csid: u32, out: &mut Vec<Message>) -> Result<(), ChunkError> {
        let Some(s) = self.streams.get_mut(&csid) else { return Ok(()) };
        if s.partial.len() < s.length as usize {
            return Ok(());
        }
        let data = std::mem::take(&mut s.partial).freeze();
        self.buffered -= data.len();
        let message = Message { timestamp: s.timestamp, type_id: s.type_id, stream_id: s.stream_id, data };
        match message.type_id {
            SET_CHUNK_SIZE => {
                let size = read_u32(&message.data).ok_or(ChunkError::Malformed("SetChunkSize"))?;
                // The top bit must be 0 (§5.4.1); a size above the largest message changes nothing.
                if size == 0 || size > 0x7FFF_FFFF {
                    return Err(ChunkError::BadChunkSize(size));
                }
                self.chunk_size = size.min(0xFF_FFFF) as usize;
            }
            ABORT => {
                let aborted = read_u32(&message.data).ok_or(ChunkError::Malformed("Abort"))?;
                if let Some(a) = self.streams.get_mut(&aborted) {
                    self.buffered -= a.partial.len();
                    a.partial.clear();
                    if self.reading.is_some_and(|(c, _)| c == aborted) {
                        self.reading = None;
                    }
                }
            }
            _ => out.push(message),
        }
        Ok(())
    }
}

pub(super) fn read_u32(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(..4)?.try_into().ok()?))
}

fn u24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// Parses one chunk header (basic header, message header, extended timestamp) from the start
/// of `b`; `None` until all of it is there. Returns it with its length.
fn parse_header(
    b: &[u8],
    streams: &HashMap<u32, ChunkStream>,
) -> Result<Option<(Header, usize)>, ChunkError> {
    let Some(&first) = b.first() else { return Ok(None) };
    let format = first >> 6;
    let (csid, mut at) = match first & 0x3F {
        0 => match b.get(1) {
            Some(&x) => (u32::from(x) + 64, 2),
            None => return Ok(None),
        },
        1 => match (b.get(1), b.get(2)) {
            (Some(&lo), Some(&hi)) => (u32::from(hi) * 256 + u32::from(lo) + 64, 3),
            _ => return Ok(None),
        },
        n => (u32::from(n), 1),
    };
    let size = [11, 7, 3, 0][usize::from(format)];
    let Some(m) = b.get(at..at + size) else { return Ok(None) };
    at += size;
    let mut h = Header { csid, format, field: 0, extended: None, length: 0, type_id: 0, stream_id: 0 };
    if format < 3 {
        h.field = u24(&m[0..3]);
    }
    if format < 2 {
        h.length = u24(&m[3..6]);
        h.type_id = m[6];
    }
    if format == 0 {
        h.stream_id = u32::from_le_bytes([m[7], m[8], m[9], m[10]]);
    }
    let field = if format < 3 { h.field } else { streams.get(&csid).map_or(0, |s| s.field) };
    if field == EXTENDED {
        let Some(x) = b.get(at..at + 4) else { return Ok(None) };
        h.extended = Some(u32::from_be_bytes([x[0], x[1], x[2], x[3]]));
        at += 4;
    }
    Ok(Some((h, at)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rml_rtmp::chunk_io::ChunkSerializer;
    use rml_rtmp::messages::MessagePayload;
    use rml_rtmp::time::RtmpTimestamp;

    fn payload(type_id: u8, csid_hint: u32, timestamp: u32, len: usize) -> MessagePayload {
        MessagePayload {
            timestamp: RtmpTimestamp::new(timestamp),
            message_stream_id: csid_hint,
            type_id,
            data: Bytes::from((0..len).map(|i| i as u8).collect::<Vec<_>>()),
        }
    }

    fn read_all(bytes: &[u8], step: usize) -> Result<Vec<Message>, ChunkError> {
        let mut r = ChunkReader::new();
        let mut out = Vec::new();
        for piece in bytes.chunks(step.max(1)) {
            r.push(piece, &mut out)?;
        }
        Ok(out)
    }

    #[test]
    fn reads_what_rml_rtmp_writes_split_anywhere() {
        let mut ser = ChunkSerializer::new();
        let mut bytes = Vec::new();
        let sent = [
            payload(20, 0, 0, 300),
            payload(9, 1, 40, 5000),
            payload(8, 1, 45, 200),
            payload(9, 1, 0x0100_0000, 1000),
            payload(9, 1, 0x0100_0028, 1000),
        ];
        for p in &sent {
            bytes.extend(ser.serialize(p, false, false).unwrap().bytes);
        }
        // The same messages with a full header on every chunk, as rml_rtmp writes when asked.
        let mut full = Vec::new();
        for p in &sent {
            full.extend(ChunkSerializer::new().serialize(p, true, false).unwrap().bytes);
        }
        for (bytes, step) in [1, 7, 128, 129, 100_000].into_iter().flat_map(|s| [(&bytes, s), (&full, s)]) {
            let got = read_all(bytes, step).unwrap();
            assert_eq!(got.len(), sent.len(), "step {step}");
            for (g, s) in got.iter().zip(&sent) {
                assert_eq!(
                    (g.timestamp, g.type_id, g.stream_id),
                    (s.timestamp.value, s.type_id, s.message_stream_id)
                );
                assert_eq!(g.data, s.data);
            }
        }
    }

    #[test]
    fn set_chunk_size_applies_to_the_next_chunk() {
        let mut ser = ChunkSerializer::new();
        let mut bytes = ser.set_max_chunk_size(4096, RtmpTimestamp::new(0)).unwrap().bytes;
        bytes.extend(ser.serialize(&payload(9, 1, 0, 10_000), false, false).unwrap().bytes);
        let got = read_all(&bytes, 3).unwrap();
        assert_eq!(got.len(), 1, "SetChunkSize is consumed, the video passes");
        assert_eq!(got[0].data.len(), 10_000);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Whatever messages rml_rtmp's writer sends, with compressed headers (types 1, 2, 3 and
        /// timestamp deltas, extended ones too) at any chunk size, cut into reads anywhere, the
        /// reader gives back the same messages with the same timestamps.
        #[test]
        fn round_trips_rml_rtmp_writer(
            chunk_size in 1u32..5000,
            step in 1usize..3000,
            // Repeated deltas and lengths make rml_rtmp write type-2 and type-3 headers for new
            // messages; large deltas, extended timestamps.
            messages in proptest::collection::vec(
                (
                    proptest::sample::select(vec![8u8, 9, 9, 18, 20]),
                    proptest::prop_oneof![
                        proptest::sample::select(vec![0u32, 23, 40, 0x00FF_FFFF, 0x0100_0000]),
                        0u32..0x0200_0000,
                    ],
                    proptest::prop_oneof![proptest::sample::select(vec![1usize, 100, 4096]), 1usize..6000],
                    proptest::sample::select(vec![1u32, 1, 1, 0, 2]),
                ),
                1..16,
            ),
        ) {
            let mut ser = ChunkSerializer::new();
            let mut bytes = ser.set_max_chunk_size(chunk_size, RtmpTimestamp::new(0)).unwrap().bytes;
            let mut sent = Vec::new();
            let mut timestamp = 0u32;
            for (type_id, delta, len, stream) in messages {
                timestamp = timestamp.wrapping_add(delta);
                let p = payload(type_id, stream, timestamp, len);
                bytes.extend(ser.serialize(&p, false, false).unwrap().bytes);
                sent.push(p);
            }
            let got = read_all(&bytes, step).unwrap();
            proptest::prop_assert_eq!(got.len(), sent.len());
            for (g, s) in got.iter().zip(&sent) {
                proptest::prop_assert_eq!(
                    (g.timestamp, g.type_id, g.stream_id, &g.data),
                    (s.timestamp.value, s.type_id, s.message_stream_id, &s.data)
                );
            }
        }
    }

    #[test]
    fn a_16_mib_header_is_refused_before_its_payload() {
        // Type 0 on csid 4: timestamp 0, length 0xFFFFFF, video, stream 1 — and nothing else.
        let header = [0x04, 0, 0, 0, 0xFF, 0xFF, 0xFF, 9, 1, 0, 0, 0];
        assert_eq!(
            read_all(&header, 100),
            Err(ChunkError::TooLarge { type_id: 9, length: 0xFF_FFFF, max: MAX_VIDEO_MESSAGE })
        );
        let command = [0x03, 0, 0, 0, 0x01, 0x00, 0x01, 20, 0, 0, 0, 0];
        assert!(matches!(read_all(&command, 100), Err(ChunkError::TooLarge { .. })));
    }

    #[test]
    fn interleaving_and_unknown_streams_are_errors_not_panics() {
        // A message of 200 bytes starts on csid 3 (128 arrive), then csid 3 gets a new type-0
        // header: the input that made rml_rtmp's reserve panic.
        let mut bytes = vec![0x03, 0, 0, 0, 0, 0, 200, 20, 0, 0, 0, 0];
        bytes.extend([0u8; 128]);
        bytes.extend([0x03, 0, 0, 0, 0, 0, 10, 20, 0, 0, 0, 0]);
        assert_eq!(read_all(&bytes, 1000), Err(ChunkError::Interleaved(3)));
        assert_eq!(read_all(&[0xC5], 10), Err(ChunkError::NoPreviousHeader(5)));
    }

    #[test]
    fn chunk_streams_are_bounded() {
        let mut bytes = Vec::new();
        for csid in 3..(3 + MAX_CHUNK_STREAMS as u8 + 1) {
            // A whole 100-byte audio message on a chunk stream of its own.
            bytes.extend([csid, 0, 0, 0, 0, 0, 100, 8, 1, 0, 0, 0]);
            bytes.extend([0u8; 100]);
        }
        assert_eq!(read_all(&bytes, 1000), Err(ChunkError::TooManyChunkStreams));
    }

    #[test]
    fn an_empty_message_comes_out_at_once() {
        let bytes = [0x04, 0, 0, 40, 0, 0, 0, 9, 1, 0, 0, 0];
        let got = read_all(&bytes, 5).unwrap();
        assert_eq!(got, vec![Message { timestamp: 40, type_id: 9, stream_id: 1, data: Bytes::new() }]);
    }

    #[test]
    fn a_zero_chunk_size_is_refused() {
        let bytes = [0x02, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(read_all(&bytes, 100), Err(ChunkError::BadChunkSize(0)));
    }
}
