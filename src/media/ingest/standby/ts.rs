//! What an SRT input that stands by holds (CONTRACT: Continuity, backup ingest): its MPEG-TS
//! packets back to its last video keyframe, with the latest PAT and PMT before them, nothing
//! demuxed or decoded, so that when it takes the stream's session over its pipeline starts from
//! that keyframe at once. A keyframe is a packet of the video PID that starts a PES and has the
//! random-access flag, or whose first bytes hold an H.264 SPS or IDR slice (muxers that do not
//! set the flag). Bounded as the RTMP buffer is.

use std::time::Instant;

/// One transport-stream packet.
const PACKET: usize = 188;
/// The most the buffer holds (as [`super::Gop`]).
const MAX_BYTES: usize = 8 << 20;
/// H.264 in MPEG-TS; AAC in ADTS.
const H264: u8 = 0x1b;
const AAC_ADTS: u8 = 0x0f;

/// An SRT input's packets since its last keyframe, with the tables that demux them.
#[derive(Debug, Default)]
pub struct TsGop {
    pat: Option<Vec<u8>>,
    pmt_pid: Option<u16>,
    pmt: Option<Vec<u8>>,
    video_pid: Option<u16>,
    audio_pid: Option<u16>,
    /// From the last video keyframe on (empty until one came).
    packets: Vec<u8>,
    /// When that keyframe arrived.
    keyframe_at: Option<Instant>,
    /// A packet cut across two messages.
    partial: Vec<u8>,
    keyframes: u64,
    /// GOPs let go for being over the bound.
    pub overflows: u64,
}

impl TsGop {
    /// Takes one message of the caller's (whole packets, or a packet cut across messages).
    /// Errs, naming it, on a codec the stream's outputs cannot take.
    pub fn add(&mut self, message: &[u8]) -> Result<(), String> {
        let mut rest = message;
        if !self.partial.is_empty() {
            let need = (PACKET - self.partial.len()).min(rest.len());
            self.partial.extend_from_slice(&rest[..need]);
            rest = &rest[need..];
            if self.partial.len() < PACKET {
                return Ok(());
            }
            let packet = std::mem::take(&mut self.partial);
            self.packet(&packet)?;
        }
        while !rest.is_empty() {
            // Out of step: on to the next sync byte.
            if rest[0] != 0x47 {
                match rest.iter().position(|b| *b == 0x47) {
                    Some(at) => rest = &rest[at..],
                    None => return Ok(()),
                }
                continue;
            }
            if rest.len() < PACKET {
                self.partial.extend_from_slice(rest);
                return Ok(());
            }
            self.packet(&rest[..PACKET])?;
            rest = &rest[PACKET..];
        }
        Ok(())
    }

    fn packet(&mut self, p: &[u8]) -> Result<(), String> {
        let pid = (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
        let start = p[1] & 0x40 != 0;
        let has_af = p[3] & 0x20 != 0;
        let payload_at = if has_af { 5 + usize::from(p[4]) } else { 4 };
        let payload = p.get(payload_at..).unwrap_or_default();
        if pid == 0 && start {
            self.pmt_pid = pat_pmt_pid(payload).or(self.pmt_pid);
            self.pat = Some(p.to_vec());
            return Ok(());
        }
        if Some(pid) == self.pmt_pid && start {
            if let Some((video, audio)) = pmt_streams(payload)? {
                (self.video_pid, self.audio_pid) = (video, audio);
                self.pmt = Some(p.to_vec());
            }
            return Ok(());
        }
        if Some(pid) == self.video_pid && start {
            let random_access = has_af && p[4] > 0 && p.get(5).is_some_and(|f| f & 0x40 != 0);
            if random_access || starts_a_keyframe(payload) {
                self.packets.clear();
                self.keyframe_at = Some(Instant::now());
                self.keyframes += 1;
            }
        }
        let ours = Some(pid) == self.video_pid || Some(pid) == self.audio_pid;
        if !ours || self.packets.is_empty() && !(Some(pid) == self.video_pid && self.keyframe_at.is_some()) {
            return Ok(());
        }
        if self.packets.len() + PACKET > MAX_BYTES {
            self.packets.clear();
            self.keyframe_at = None;
            self.overflows += 1;
            return Ok(());
        }
        self.packets.extend_from_slice(p);
        Ok(())
    }

    /// Whether it holds a keyframe (with the tables) to start from.
    pub fn ready(&self) -> bool {
        self.pat.is_some() && self.pmt.is_some() && self.keyframe_at.is_some() && !self.packets.is_empty()
    }

    /// Whether it sends audio (its PMT has an AAC stream).
    pub fn has_audio(&self) -> bool {
        self.audio_pid.is_some()
    }

    pub fn keyframes(&self) -> u64 {
        self.keyframes
    }

    pub fn bytes(&self) -> usize {
        self.packets.len()
    }

    /// What a pipeline starts from (the PAT, the PMT, then the packets from the keyframe on)
    /// and when that keyframe arrived. The buffer is left empty; the tables stay.
    pub fn take(&mut self) -> Option<(Vec<u8>, Instant)> {
        if !self.ready() {
            return None;
        }
        let at = self.keyframe_at.take()?;
        let (pat, pmt) = (self.pat.as_deref().unwrap_or_default(), self.pmt.as_deref().unwrap_or_default());
        let mut out = Vec::with_capacity(pat.len() + pmt.len() + self.packets.len());
        out.extend_from_slice(pat);
        out.extend_from_slice(pmt);
        out.append(&mut self.packets);
        Some((out, at))
    }
}

/// The PID of the first program's PMT in a PAT's first packet.
fn pat_pmt_pid(payload: &[u8]) -> Option<u16> {
    let section = payload.get(1 + usize::from(*payload.first()?)..)?;
    if *section.first()? != 0 {
        return None;
    }
    let length = usize::from(u16::from_be_bytes([section[1] & 0x0f, *section.get(2)?]));
    let programs = section.get(8..(3 + length).saturating_sub(4))?;
    programs
        .chunks_exact(4)
        .find(|e| e[0] != 0 || e[1] != 0)
        .map(|e| (u16::from(e[2] & 0x1f) << 8) | u16::from(e[3]))
}

/// The video and audio PIDs a PMT names.
type Pids = (Option<u16>, Option<u16>);

/// The first H.264 and AAC streams' PIDs in a PMT's first packet; errs on a codec the stream
/// cannot take. `None`: not a PMT that reads.
fn pmt_streams(payload: &[u8]) -> Result<Option<Pids>, String> {
    let Some(section) = payload.first().and_then(|p| payload.get(1 + usize::from(*p)..)) else {
        return Ok(None);
    };
    if section.first() != Some(&2) || section.len() < 12 {
        return Ok(None);
    }
    let length = usize::from(u16::from_be_bytes([section[1] & 0x0f, section[2]]));
    let info = usize::from(u16::from_be_bytes([section[10] & 0x0f, section[11]]));
    let end = (3 + length).saturating_sub(4).min(section.len());
    let (mut at, mut video, mut audio) = (12 + info, None, None);
    while at + 5 <= end {
        let kind = section[at];
        let pid = (u16::from(section[at + 1] & 0x1f) << 8) | u16::from(section[at + 2]);
        let es_info = usize::from(u16::from_be_bytes([section[at + 3] & 0x0f, section[at + 4]]));
        match kind {
            H264 => video = video.or(Some(pid)),
            AAC_ADTS => audio = audio.or(Some(pid)),
            // H.262, MPEG-4 part 2, HEVC, VVC, AV1 (by its registration, 0x06, it passes: dropped).
            0x01 | 0x02 | 0x10 | 0x24 | 0x33 => {
                return Err(format!("video stream type 0x{kind:02x}: only H.264 is taken"))
            }
            // MPEG-1/2 audio, LATM AAC, AC-3, E-AC-3.
            0x03 | 0x04 | 0x11 | 0x81 | 0x87 => {
                return Err(format!("audio stream type 0x{kind:02x}: only AAC is taken"))
            }
            _ => {}
        }
        at += 5 + es_info;
    }
    Ok(Some((video, audio)))
}

/// Whether a PES's first packet holds an H.264 SPS or IDR slice in its first bytes.
fn starts_a_keyframe(payload: &[u8]) -> bool {
    if payload.len() < 9 || payload[..3] != [0, 0, 1] {
        return false;
    }
    let es = payload.get(9 + usize::from(payload[8])..).unwrap_or_default();
    es.windows(4).any(|w| w[..3] == [0, 0, 1] && matches!(w[3] & 0x1f, 5 | 7))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet of `pid`: `start` sets PUSI, `rai` an adaptation field with the flag.
    fn packet(pid: u16, start: bool, rai: bool, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x47, (if start { 0x40 } else { 0 }) | (pid >> 8) as u8, pid as u8];
        if rai {
            p.extend_from_slice(&[0x30, 1, 0x40]);
        } else {
            p.push(0x10);
        }
        p.extend_from_slice(payload);
        p.resize(PACKET, 0xff);
        p
    }

    fn pat() -> Vec<u8> {
        // pointer, table 0, length 13, ts id, version, section, last, program 1 → PMT 0x1000, CRC.
        packet(0, true, false, &[0, 0, 0xb0, 13, 0, 1, 0xc1, 0, 0, 0, 1, 0xf0, 0, 1, 2, 3, 4])
    }

    fn pmt(streams: &[(u8, u16)]) -> Vec<u8> {
        let mut s = vec![2, 0xb0, 0, 0, 1, 0xc1, 0, 0, 0xe1, 0x00, 0xf0, 0];
        for (kind, pid) in streams {
            s.extend_from_slice(&[*kind, 0xe0 | (pid >> 8) as u8, *pid as u8, 0xf0, 0]);
        }
        s[2] = (s.len() - 3 + 4) as u8;
        s.extend_from_slice(&[1, 2, 3, 4]);
        packet(0x1000, true, false, &[[0u8].as_slice(), &s].concat())
    }

    /// A PES start: header with no optional fields, then `es`.
    fn pes(es: &[u8]) -> Vec<u8> {
        [&[0, 0, 1, 0xe0, 0, 0, 0x80, 0, 0][..], es].concat()
    }

    #[test]
    fn it_keeps_the_tables_and_the_packets_since_the_last_keyframe() {
        let mut gop = TsGop::default();
        let delta = packet(0x100, true, false, &pes(&[0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, 0x41]));
        let audio = packet(0x101, true, false, &pes(&[0xff, 0xf1]));
        let mut stream =
            [pat(), pmt(&[(H264, 0x100), (AAC_ADTS, 0x101)]), delta.clone(), audio.clone()].concat();
        gop.add(&stream).expect("taken");
        assert!(!gop.ready(), "nothing before a keyframe");
        assert!(gop.has_audio());
        // A keyframe by its flag, then by its SPS with no flag: each starts the buffer over.
        let flagged = packet(0x100, true, true, &pes(&[0, 0, 0, 1, 0x65]));
        let sps = packet(0x100, true, false, &pes(&[0, 0, 0, 1, 0x09, 0xf0, 0, 0, 0, 1, 0x67]));
        stream = [flagged, delta.clone(), audio.clone(), sps.clone(), audio.clone(), delta.clone()].concat();
        // Cut across messages at odd places.
        for piece in stream.chunks(100) {
            gop.add(piece).expect("taken");
        }
        assert!(gop.ready());
        assert_eq!((gop.keyframes(), gop.bytes()), (2, 3 * PACKET));
        let (taken, _) = gop.take().expect("a start");
        assert_eq!(taken, [pat(), pmt(&[(H264, 0x100), (AAC_ADTS, 0x101)]), sps, audio, delta].concat());
        assert!(!gop.ready() && gop.take().is_none(), "taken: empty until the next keyframe");
        // Garbage between packets is skipped.
        gop.add(&[[1u8, 2, 3].as_slice(), &packet(0x100, true, true, &pes(&[]))].concat()).expect("taken");
        assert!(gop.ready());
    }

    #[test]
    fn other_codecs_are_refused_and_a_long_gop_is_let_go() {
        let mut gop = TsGop::default();
        let hevc = [pat(), pmt(&[(0x24, 0x100), (AAC_ADTS, 0x101)])].concat();
        assert!(gop.add(&hevc).expect_err("refused").contains("only H.264"));
        let mp2 = [pat(), pmt(&[(H264, 0x100), (0x04, 0x101)])].concat();
        assert!(TsGop::default().add(&mp2).expect_err("refused").contains("only AAC"));
        let mut gop = TsGop::default();
        gop.add(&[pat(), pmt(&[(H264, 0x100)])].concat()).expect("taken");
        assert!(!gop.has_audio());
        gop.add(&packet(0x100, true, true, &pes(&[]))).expect("taken");
        let delta = packet(0x100, false, false, &[]);
        for _ in 0..MAX_BYTES / PACKET {
            gop.add(&delta).expect("taken");
        }
        assert_eq!(gop.overflows, 1, "over its bound the GOP is let go");
        assert!(!gop.ready() && gop.bytes() <= MAX_BYTES);
    }
}
