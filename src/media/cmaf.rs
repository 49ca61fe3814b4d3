//! ISO-BMFF (CMAF) boxes, read in one place for the live origin, the recorder, thumbnails and
//! the benches.
//!
//! What a CMAF chunk says of its first sample: whether a decoder can start there (ISO/IEC
//! 14496-12 8.8: `moof`/`traf`/`tfhd` and `trun`, `sample_is_non_sync_sample`). A part is
//! `INDEPENDENT=YES` exactly when its first video sample is a sync sample, whatever asked for
//! the keyframe, so the playlist never claims what the bytes do not hold. Also how long a chunk
//! lasts (its samples' durations) and an init section's timescale (`mdhd`), for the parts whose
//! length the muxer does not state in decode time; the RFC 6381 codec strings of an init
//! section's `avcC` and AudioSpecificConfig.

/// `sample_is_non_sync_sample` in a sample's flags (8.8.3.1).
const NON_SYNC: u32 = 0x0001_0000;

/// Whether the first sample of the first track fragment of the chunk `data` (a `moof` and its
/// `mdat`, in that order) is a sync sample; `None` when `data` is not such a chunk.
pub fn starts_with_sync_sample(data: &[u8]) -> Option<bool> {
    let traf = first_traf(data)?;
    let default_flags = tfhd_field(child(traf, b"tfhd")?, 0x20)?;
    let flags = trun_first_flags(child(traf, b"trun")?)?.or(default_flags)?;
    Some(flags & NON_SYNC == 0)
}

/// How long the chunk `data` lasts in its track's timescale: the sum of its first track
/// fragment's sample durations (each sample's own in the `trun`, else the `tfhd` default), that
/// is from its first decode time to the next chunk's. `None` when `data` is not such a chunk.
pub fn duration_ticks(data: &[u8]) -> Option<u64> {
    let traf = first_traf(data)?;
    let default = tfhd_field(child(traf, b"tfhd")?, 0x08)?;
    let trun = child(traf, b"trun")?;
    let (flags, count, mut at) = trun_header(trun)?;
    if flags & 0x100 == 0 {
        return Some(u64::from(count) * u64::from(default?));
    }
    let entry = [0x100, 0x200, 0x400, 0x800].iter().filter(|&&bit| flags & bit != 0).count() * 4;
    let mut total = 0u64;
    for _ in 0..count {
        total += u64::from(be_u32(trun.get(at..)?)?);
        at += entry;
    }
    Some(total)
}

/// The duration of each sample of the chunk `data`'s first track fragment, in decode order
/// (each sample's own in the `trun`, else the `tfhd` default), at most `max` of them; `None`
/// when `data` is not such a chunk or states neither. `data` may end after its `moof`.
pub fn sample_durations(data: &[u8], max: usize) -> Option<Vec<u32>> {
    let traf = first_traf(data)?;
    let default = tfhd_field(child(traf, b"tfhd")?, 0x08)?;
    let trun = child(traf, b"trun")?;
    let (flags, count, mut at) = trun_header(trun)?;
    let count = usize::try_from(count).ok()?.min(max);
    if flags & 0x100 == 0 {
        return Some(vec![default?; count]);
    }
    let entry = [0x100, 0x200, 0x400, 0x800].iter().filter(|&&bit| flags & bit != 0).count() * 4;
    let mut out = Vec::with_capacity(count.min(trun.len() / entry));
    for _ in 0..count {
        out.push(be_u32(trun.get(at..)?)?);
        at += entry;
    }
    Some(out)
}

/// How many samples the chunk `data` holds: the `sample_count`s of every `trun` of every track
/// fragment of its `moof`. `data` may end after its `moof`.
pub fn samples(data: &[u8]) -> Option<u64> {
    let moof = child(data, b"moof")?;
    let mut total = 0u64;
    for traf in boxes(moof).map_while(|b| b).filter(|b| &b.name == b"traf") {
        let traf = &moof[traf.body()];
        for trun in boxes(traf).map_while(|b| b).filter(|b| &b.name == b"trun") {
            total += u64::from(trun_header(&traf[trun.body()])?.1);
        }
    }
    Some(total)
}

/// The chunks a segment is made of, in order: each from the boxes before its `moof` (a `styp`)
/// through the `mdat` after it. `None` when `segment` is not a whole sequence of such chunks.
pub fn chunks(segment: &[u8]) -> Option<Vec<std::ops::Range<usize>>> {
    let mut out = Vec::new();
    let (mut start, mut moof) = (0, false);
    for b in boxes(segment) {
        let b = b?;
        match &b.name {
            b"moof" => moof = true,
            b"mdat" if moof => {
                out.push(start..b.at + b.size);
                (start, moof) = (b.at + b.size, false);
            }
            _ => {}
        }
    }
    (start == segment.len() && !out.is_empty()).then_some(out)
}

/// The timescale of the first track of the init section `init` (`moov`/`trak`/`mdia`/`mdhd`).
pub fn timescale(init: &[u8]) -> Option<u32> {
    let mdhd = child(child(child(child(init, b"moov")?, b"trak")?, b"mdia")?, b"mdhd")?;
    // Version 1 has 64-bit creation and modification times.
    let at = if *mdhd.first()? == 1 { 20 } else { 12 };
    be_u32(mdhd.get(at..)?).filter(|&t| t > 0)
}

/// The decode time of the first sample of the chunk `data` (its track fragment's `tfdt`, 8.8.12),
/// in its track's timescale; `None` when `data` is not a chunk with one.
pub fn decode_time(data: &[u8]) -> Option<u64> {
    let tfdt = child(first_traf(data)?, b"tfdt")?;
    match *tfdt.first()? {
        1 => Some(u64::from_be_bytes(tfdt.get(4..12)?.try_into().ok()?)),
        _ => be_u32(tfdt.get(4..)?).map(u64::from),
    }
}

/// The chunk `data` moved `ticks` later on its track's timeline: its `tfdt` plus `ticks`. A
/// 32-bit `tfdt` (version 0) whose new time does not fit becomes a 64-bit one (version 1): the
/// `moof` and `traf` grow by four bytes, and so does every `trun`'s `data_offset` (counted from
/// the `moof`'s start, where its `mdat` now begins four bytes later). `None` when `data` is not
/// a chunk (boxes before a `moof`, such as a `styp`, are kept as they are) with exactly one track
/// fragment that has a `tfdt`.
pub fn with_decode_time_shifted(data: &[u8], ticks: u64) -> Option<Vec<u8>> {
    let moof = find(data, b"moof")?;
    let in_moof = &data[moof.body()];
    let mut trafs = boxes(in_moof).map_while(|b| b).filter(|b| &b.name == b"traf");
    let (traf, None) = (trafs.next()?, trafs.next()) else { return None };
    let tfdt = find(&in_moof[traf.body()], b"tfdt")?;
    // Where the traf and the tfdt begin in `data`.
    let traf_at = moof.at + moof.header + traf.at;
    let tfdt_at = traf_at + traf.header + tfdt.at;
    let new = decode_time(&data[moof.at..])?.checked_add(ticks)?;
    let version = *data.get(tfdt_at + tfdt.header)?;
    let mut out = data.to_vec();
    // After the tfdt's header: version and flags, then the time.
    let time = tfdt_at + tfdt.header + 4;
    if version == 1 {
        out[time..time + 8].copy_from_slice(&new.to_be_bytes());
        return Some(out);
    }
    if let Ok(new) = u32::try_from(new) {
        out[time..time + 4].copy_from_slice(&new.to_be_bytes());
        return Some(out);
    }
    // Version 0 to 1: a 20-byte tfdt in place of the 16-byte one (of any other size, which
    // cmafmux never writes, it is not known what the rest is), in boxes of 32-bit sizes.
    if tfdt.size != 16 || moof.header != 8 || traf.header != 8 {
        return None;
    }
    let mut grown_tfdt = 20u32.to_be_bytes().to_vec();
    grown_tfdt.extend_from_slice(b"tfdt");
    grown_tfdt.extend_from_slice(&[1, 0, 0, 0]);
    grown_tfdt.extend_from_slice(&new.to_be_bytes());
    out.splice(tfdt_at..tfdt_at + 16, grown_tfdt);
    for (at, size) in [(moof.at, moof.size), (traf_at, traf.size)] {
        let grown = u32::try_from(size + 4).ok()?;
        out[at..at + 4].copy_from_slice(&grown.to_be_bytes());
    }
    // The truns of the (grown) traf: their data offsets, when present, move with the mdat.
    let traf_body = traf_at + 8..traf_at + traf.size + 4;
    let in_traf: Vec<Option<Mp4Box>> = boxes(&out[traf_body.clone()]).collect();
    for b in in_traf {
        let b = b?;
        let at = traf_body.start + b.at;
        if &b.name == b"trun" && be_u32(&out[at + 8..])? & 0x001 != 0 {
            if b.header != 8 || b.size < 20 {
                return None;
            }
            let offset = be_u32(&out[at + 16..])?.checked_add(4)?;
            out[at + 16..at + 20].copy_from_slice(&offset.to_be_bytes());
        }
    }
    Some(out)
}

/// Whether two initialization sections describe the same tracks the same way: equal bytes once
/// the creation and modification times of `mvhd`, `tkhd` and `mdhd` (which a muxer sets to the
/// wall clock of each push) and the bitrates of a sample entry's `btrt` (which a muxer takes from
/// the bitrate measured so far: a push whose encoder went on from an earlier push measures
/// more) are left out. A player may then go on with the section it has.
pub fn same_init(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && timeless(a).is_some_and(|a| Some(a) == timeless(b))
}

/// `init` with the times of its `mvhd`, `tkhd` and `mdhd` and its `btrt` bitrates zeroed; `None`
/// when it has no `moov`.
fn timeless(init: &[u8]) -> Option<Vec<u8>> {
    /// Zeroes what differs between pushes in the boxes of `data`.
    fn zero_times(data: &mut [u8]) -> Option<()> {
        let found: Vec<Option<Mp4Box>> = boxes(data).collect();
        for b in found {
            let b = b?;
            let body = &mut data[b.body()];
            match &b.name {
                b"moov" | b"trak" | b"mdia" | b"minf" | b"stbl" => zero_times(body)?,
                b"mvhd" | b"tkhd" | b"mdhd" => {
                    // Version 1: two 64-bit times after version and flags; version 0: 32-bit.
                    let times = if *body.first()? == 1 { 4..20 } else { 4..12 };
                    body.get_mut(times)?.fill(0);
                }
                // Version, flags and the entry count; then the sample entries.
                b"stsd" => zero_entries(body.get_mut(8..)?)?,
                _ => {}
            }
        }
        Some(())
    }
    /// The sample entries of an `stsd`: the boxes after a visual entry's 78 bytes of fields or
    /// an audio entry's 28 hold the `btrt`.
    fn zero_entries(data: &mut [u8]) -> Option<()> {
        let found: Vec<Option<Mp4Box>> = boxes(data).collect();
        for b in found {
            let b = b?;
            let fields = match &b.name {
                b"avc1" | b"avc3" | b"hvc1" | b"hev1" => 78,
                b"mp4a" | b"Opus" => 28,
                _ => continue,
            };
            let entry = &mut data[b.body()];
            let inner: Vec<Option<Mp4Box>> = boxes(entry.get(fields..)?).collect();
            for i in inner {
                let i = i?;
                if &i.name == b"btrt" {
                    let body = i.body();
                    entry.get_mut(fields + body.start..fields + body.end)?.fill(0);
                }
            }
        }
        Some(())
    }
    find(init, b"moov")?;
    let mut out = init.to_vec();
    zero_times(&mut out)?;
    Some(out)
}

/// An optional field of a `tfhd` body (full box: version and flags first) by its flag bit:
/// `Some(None)` when absent.
fn tfhd_field(tfhd: &[u8], want: u32) -> Option<Option<u32>> {
    let flags = be_u32(tfhd)? & 0x00ff_ffff;
    // track_ID, then the optional fields in order.
    let mut at = 8;
    for (bit, len) in [(0x01, 8), (0x02, 4), (0x08, 4), (0x10, 4), (0x20, 4)] {
        if bit == want {
            return if flags & bit == 0 { Some(None) } else { be_u32(tfhd.get(at..)?).map(Some) };
        }
        if flags & bit != 0 {
            at += len;
        }
    }
    Some(None)
}

/// The first track fragment (`traf`) of the chunk `data`'s `moof`.
fn first_traf(data: &[u8]) -> Option<&[u8]> {
    child(child(data, b"moof")?, b"traf")
}

/// A `trun` body's flags, its sample count and where its first sample's entry begins: after
/// version and flags, the count, and the optional `data_offset` (0x001) and
/// `first_sample_flags` (0x004), in that order.
fn trun_header(trun: &[u8]) -> Option<(u32, u32, usize)> {
    let flags = be_u32(trun)? & 0x00ff_ffff;
    let count = be_u32(trun.get(4..)?)?;
    let entries = 8 + [0x001, 0x004].iter().filter(|&&bit| flags & bit != 0).count() * 4;
    Some((flags, count, entries))
}

/// The flags a `trun` body gives its first sample: `first_sample_flags`, else the first entry's
/// own flags; `Some(None)` when it gives none (the `tfhd` default applies).
fn trun_first_flags(trun: &[u8]) -> Option<Option<u32>> {
    let (flags, count, mut at) = trun_header(trun)?;
    if count == 0 {
        return None;
    }
    if flags & 0x004 != 0 {
        // first_sample_flags: the last field before the entries.
        return be_u32(trun.get(at - 4..)?).map(Some);
    }
    if flags & 0x400 == 0 {
        return Some(None);
    }
    // The first entry: duration and size come before its flags when present.
    for bit in [0x100, 0x200] {
        if flags & bit != 0 {
            at += 4;
        }
    }
    be_u32(trun.get(at..)?).map(Some)
}

/// One box of a run of boxes: where it begins, how long its header is (16 with a 64-bit size),
/// its whole size and its name.
#[derive(Debug, Clone, Copy)]
struct Mp4Box {
    at: usize,
    header: usize,
    size: usize,
    name: [u8; 4],
}

impl Mp4Box {
    fn body(self) -> std::ops::Range<usize> {
        self.at + self.header..self.at + self.size
    }
}

/// The boxes that make up `data`, in order: a size of 1 is followed by a 64-bit size, a size of
/// 0 runs to the end. A box that does not fit is `None`, and nothing follows it.
fn boxes(data: &[u8]) -> impl Iterator<Item = Option<Mp4Box>> + '_ {
    let mut at = 0;
    let mut broken = false;
    std::iter::from_fn(move || {
        if broken || data.len() < at + 8 {
            return None;
        }
        let found = box_at(data, at);
        match found {
            Some(b) => at += b.size,
            None => broken = true,
        }
        Some(found)
    })
}

fn box_at(data: &[u8], at: usize) -> Option<Mp4Box> {
    let rest = &data[at..];
    let (header, size) = match be_u32(rest)? {
        1 => (16, usize::try_from(u64::from_be_bytes(rest.get(8..16)?.try_into().ok()?)).ok()?),
        0 => (8, rest.len()),
        n => (8, n as usize),
    };
    if size < header || size > rest.len() {
        return None;
    }
    Some(Mp4Box { at, header, size, name: rest[4..8].try_into().ok()? })
}

/// The first box named `name` among the boxes that make up `data`, if all before it fit.
fn find(data: &[u8], name: &[u8; 4]) -> Option<Mp4Box> {
    boxes(data).map_while(|b| b).find(|b| &b.name == name)
}

/// The body of the first box named `name` among the boxes that make up `data`.
fn child<'a>(data: &'a [u8], name: &[u8; 4]) -> Option<&'a [u8]> {
    find(data, name).map(|b| &data[b.body()])
}

fn be_u32(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(..4)?.try_into().ok()?))
}

/// `avc1.PPCCLL` from an `avcC` record (ISO/IEC 14496-15 5.3.3.1: version, profile,
/// compatibility, level), as RFC 6381 writes it.
pub fn avc1_codec(avcc: &[u8]) -> Option<String> {
    match avcc {
        [1, profile, compat, level, ..] => Some(format!("avc1.{profile:02x}{compat:02x}{level:02x}")),
        _ => None,
    }
}

/// `mp4a.40.N` from an AudioSpecificConfig (ISO/IEC 14496-3 1.6.2.1: the first five bits are
/// the audio object type).
pub fn mp4a_codec(asc: &[u8]) -> Option<String> {
    let aot = asc.first()? >> 3;
    (aot != 0).then(|| format!("mp4a.40.{aot}"))
}

#[cfg(test)]
pub(crate) mod tests;
pub mod write;
