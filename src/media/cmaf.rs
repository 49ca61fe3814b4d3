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
/// wall clock of each push) are left out. A player may then go on with the section it has.
pub fn same_init(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && timeless(a).is_some_and(|a| Some(a) == timeless(b))
}

/// `init` with the times of its `mvhd`, `tkhd` and `mdhd` zeroed; `None` when it has no `moov`.
fn timeless(init: &[u8]) -> Option<Vec<u8>> {
    fn zero_times(data: &mut [u8]) -> Option<()> {
        let found: Vec<Option<Mp4Box>> = boxes(data).collect();
        for b in found {
            let b = b?;
            let body = &mut data[b.body()];
            match &b.name {
                b"moov" | b"trak" | b"mdia" => zero_times(body)?,
                b"mvhd" | b"tkhd" | b"mdhd" => {
                    // Version 1: two 64-bit times after version and flags; version 0: 32-bit.
                    let times = if *body.first()? == 1 { 4..20 } else { 4..12 };
                    body.get_mut(times)?.fill(0);
                }
                _ => {}
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
pub(crate) mod tests {
    use super::*;

    /// A box named `name` around `body` (a 32-bit size).
    pub(crate) fn boxed(name: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut out = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        out.extend_from_slice(name);
        out.extend_from_slice(body);
        out
    }

    fn chunk(tfhd: &[u8], trun: &[u8]) -> Vec<u8> {
        let traf = [boxed(b"tfhd", tfhd), boxed(b"trun", trun)].concat();
        let moof = boxed(b"moof", &[boxed(b"mfhd", &[0; 8]), boxed(b"traf", &traf)].concat());
        [moof, boxed(b"mdat", &[1, 2, 3])].concat()
    }

    const SYNC: [u8; 4] = [0x02, 0, 0, 0];
    const DELTA: [u8; 4] = [0x01, 0x01, 0, 0];

    #[test]
    fn first_sample_flags_decide() {
        // tfhd: no optional fields; trun: data_offset + first_sample_flags, 2 samples with sizes.
        let tfhd = [0, 0, 0, 0, 0, 0, 0, 1];
        let trun = |first: [u8; 4]| {
            [&[0, 0, 0x02, 0x05][..], &[0, 0, 0, 2], &[0, 0, 0, 9], &first, &[0; 8]].concat()
        };
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(SYNC))), Some(true));
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(DELTA))), Some(false));
    }

    #[test]
    fn per_sample_flags_and_tfhd_defaults() {
        // trun with duration, size and flags per sample (cmafmux's usual layout).
        let trun = |first: [u8; 4]| {
            [&[0, 0, 0x07, 0x01][..], &[0, 0, 0, 1], &[0, 0, 0, 9], &[0; 8], &first].concat()
        };
        let tfhd = [0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(SYNC))), Some(true));
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(DELTA))), Some(false));
        // No flags in the trun: the tfhd's default_sample_flags (after sample_description_index).
        let trun = [0, 0, 0x01, 0x01, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 4];
        let tfhd = |d: [u8; 4]| [&[0, 0x02, 0, 0x22][..], &[0, 0, 0, 1], &[0, 0, 0, 1], &d].concat();
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd(SYNC), &trun)), Some(true));
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd(DELTA), &trun)), Some(false));
    }

    #[test]
    fn samples_and_their_durations_are_read_from_a_chunk_cut_after_its_moof() {
        // Per-sample durations (0x100) and sizes (0x200), and a second traf of 2 samples.
        let trun = [
            &[0, 0, 0x03, 0][..],
            &3u32.to_be_bytes(),
            &[0, 0, 0, 100, 0, 0, 0, 9],
            &[0, 0, 0, 50, 0, 0, 0, 9],
        ]
        .concat();
        let trun = [trun, vec![0, 0, 0, 25, 0, 0, 0, 9]].concat();
        let first =
            boxed(b"traf", &[boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]), boxed(b"trun", &trun)].concat());
        let second = boxed(
            b"traf",
            &[boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 2]), boxed(b"trun", &[0, 0, 0, 0, 0, 0, 0, 2])].concat(),
        );
        let mut chunk = [boxed(b"moof", &[first, second].concat()), boxed(b"mdat", &[0; 64])].concat();
        chunk.truncate(chunk.len() - 40);
        assert_eq!(samples(&chunk), Some(5));
        assert_eq!(sample_durations(&chunk, 100), Some(vec![100, 50, 25]));
        assert_eq!(sample_durations(&chunk, 2), Some(vec![100, 50]), "at most max");
        // The tfhd default (0x08) when the trun has no durations.
        let traf = boxed(
            b"traf",
            &[
                boxed(b"tfhd", &[0, 0, 0, 0x08, 0, 0, 0, 1, 0, 0, 0x0b, 0xb8]),
                boxed(b"trun", &[0, 0, 0, 0, 0, 0, 0, 4]),
            ]
            .concat(),
        );
        assert_eq!(sample_durations(&boxed(b"moof", &traf), 100), Some(vec![3000; 4]));
        assert_eq!(samples(&[0xff; 64]), None);
        assert_eq!(sample_durations(&[0xff; 64], 100), None);
    }

    #[test]
    fn a_chunk_lasts_its_sample_durations() {
        let tfhd = [0, 0, 0, 0, 0, 0, 0, 1];
        // Duration, size, flags and composition offset per sample (cmafmux with B-frames):
        // 3000 + 3000 + 3100 ticks.
        let sample = |d: u32| [d.to_be_bytes(), [0, 0, 0, 9], DELTA, [0, 0, 0, 0]].concat();
        let trun = [
            &[0, 0, 0x0f, 0x01][..],
            &[0, 0, 0, 3],
            &[0, 0, 0, 9],
            &sample(3000),
            &sample(3000),
            &sample(3100),
        ]
        .concat();
        assert_eq!(duration_ticks(&chunk(&tfhd, &trun)), Some(9100));
        // No durations in the trun: the tfhd's default_sample_duration (flag 0x08) times the count.
        let trun = [0, 0, 0x02, 0x01, 0, 0, 0, 4, 0, 0, 0, 9, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4];
        let tfhd = [&[0, 0x02, 0, 0x08][..], &[0, 0, 0, 1], &1024u32.to_be_bytes()].concat();
        assert_eq!(duration_ticks(&chunk(&tfhd, &trun)), Some(4096));
        // Neither: unknown. A trun shorter than its count: not a chunk.
        assert_eq!(duration_ticks(&chunk(&[0, 0, 0, 0, 0, 0, 0, 1], &trun)), None);
        let short = [&[0, 0, 0x01, 0x01][..], &[0, 0, 0, 3], &[0, 0, 0, 9], &[0, 0, 0x0b, 0xb8]].concat();
        assert_eq!(duration_ticks(&chunk(&tfhd, &short)), None);
    }

    #[test]
    fn the_timescale_of_an_init_section() {
        let mdhd = |version: u8, at: usize| {
            let mut body = vec![0u8; at + 8];
            body[0] = version;
            body[at..at + 4].copy_from_slice(&90_000u32.to_be_bytes());
            body
        };
        for (version, at) in [(0, 12), (1, 20)] {
            let mdia = boxed(b"mdia", &[boxed(b"mdhd", &mdhd(version, at))].concat());
            let moov = boxed(
                b"moov",
                &[boxed(b"mvhd", &[0; 100]), boxed(b"trak", &[boxed(b"tkhd", &[0; 84]), mdia].concat())]
                    .concat(),
            );
            let init = [boxed(b"ftyp", b"cmf2"), moov].concat();
            assert_eq!(timescale(&init), Some(90_000), "version {version}");
        }
        assert_eq!(timescale(b"not an init section"), None);
    }

    /// A chunk as cmafmux writes one: `moof` (`mfhd`, `traf` with `tfhd`, `tfdt` and a `trun`
    /// whose data offset points at the `mdat`'s payload), then the `mdat`.
    fn timed_chunk(tfdt_version: u8, time: u64) -> Vec<u8> {
        let tfdt = match tfdt_version {
            1 => [&[1, 0, 0, 0][..], &time.to_be_bytes()].concat(),
            _ => [&[0, 0, 0, 0][..], &(time as u32).to_be_bytes()].concat(),
        };
        let trun = |offset: u32| {
            [
                &[0, 0, 0x03, 0x01][..],
                &[0, 0, 0, 2],
                &offset.to_be_bytes(),
                &[0, 0, 0x0b, 0xb8, 0, 0, 0, 2],
                &[0, 0, 0x0b, 0xb8, 0, 0, 0, 1],
            ]
            .concat()
        };
        let moof = |offset: u32| {
            let traf = [
                boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]),
                boxed(b"tfdt", &tfdt),
                boxed(b"trun", &trun(offset)),
            ]
            .concat();
            boxed(b"moof", &[boxed(b"mfhd", &[0; 8]), boxed(b"traf", &traf)].concat())
        };
        let size = moof(0).len() as u32;
        [moof(size + 8), boxed(b"mdat", &[7, 8, 9])].concat()
    }

    /// The payload a chunk's first `trun` points at (its data offset from the `moof`'s start).
    fn payload(chunk: &[u8]) -> &[u8] {
        let at = find(chunk, b"moof").unwrap().at;
        let trun = child(first_traf(&chunk[at..]).unwrap(), b"trun").unwrap();
        let offset = be_u32(&trun[8..]).unwrap() as usize;
        &chunk[at + offset..]
    }

    #[test]
    fn a_chunk_moves_on_its_timeline() {
        for version in [0, 1] {
            let chunk = timed_chunk(version, 90_000);
            assert_eq!(decode_time(&chunk), Some(90_000));
            let moved = with_decode_time_shifted(&chunk, 45_000).unwrap();
            assert_eq!(moved.len(), chunk.len(), "version {version}: in place");
            assert_eq!(decode_time(&moved), Some(135_000));
            assert_eq!(duration_ticks(&moved), Some(6000));
            assert_eq!(payload(&moved), &[7, 8, 9]);
        }
        // Past 32 bits: the tfdt becomes version 1, and the boxes and the data offset grow.
        let chunk = [boxed(b"styp", b"cmfc"), timed_chunk(0, 4_000_000_000)].concat();
        let moved = with_decode_time_shifted(&chunk, 1_000_000_000).unwrap();
        assert_eq!(moved.len(), chunk.len() + 4);
        assert_eq!(&moved[..12], &chunk[..12], "the styp is kept");
        assert_eq!(decode_time(&moved), Some(5_000_000_000));
        assert_eq!(duration_ticks(&moved), Some(6000));
        assert_eq!(payload(&moved), &[7, 8, 9]);
        let moof = child(&moved, b"moof").unwrap();
        assert_eq!(be_u32(&moved[12..]).unwrap() as usize, moof.len() + 8);
        assert_eq!(starts_with_sync_sample(&moved), starts_with_sync_sample(&chunk));
    }

    #[test]
    fn what_cannot_move_is_said() {
        assert_eq!(decode_time(b"not a chunk"), None);
        assert_eq!(with_decode_time_shifted(b"not a chunk", 1), None);
        // No tfdt.
        let chunk = chunk(&[0, 0, 0, 0, 0, 0, 0, 1], &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        assert_eq!(with_decode_time_shifted(&chunk, 1), None);
        // Two track fragments: which to move is not known.
        let one = timed_chunk(0, 0);
        let traf = child(child(&one, b"moof").unwrap(), b"traf").unwrap();
        let two = boxed(b"moof", &[boxed(b"traf", traf), boxed(b"traf", traf)].concat());
        assert_eq!(with_decode_time_shifted(&two, 1), None);
        // A 32-bit tfdt with more in it than its time cannot grow (here four bytes that, left
        // behind, would read as a box around the trun).
        let mut odd = timed_chunk(0, 4_000_000_000);
        let at = odd.windows(4).position(|w| w == b"tfdt").unwrap() - 4;
        odd[at + 3] = 20;
        odd.splice(at + 16..at + 16, 40u32.to_be_bytes());
        for (name, by) in [(b"moof", 4u32), (b"traf", 4)] {
            let box_at = odd.windows(4).position(|w| w == name).unwrap() - 4;
            let size = be_u32(&odd[box_at..]).unwrap() + by;
            odd[box_at..box_at + 4].copy_from_slice(&size.to_be_bytes());
        }
        assert_eq!(decode_time(&odd), Some(4_000_000_000));
        assert_eq!(with_decode_time_shifted(&odd, 1_000_000_000), None);
        assert!(with_decode_time_shifted(&odd, 1).is_some(), "in place it still moves");
        // A decode time that would overflow.
        assert_eq!(with_decode_time_shifted(&timed_chunk(1, u64::MAX - 1), 2), None);
        // Cut short anywhere: never a panic.
        for end in 0..one.len() {
            let _ = with_decode_time_shifted(&one[..end], u64::from(u32::MAX));
        }
    }

    #[test]
    fn inits_that_differ_in_their_times_only_are_the_same() {
        let header = |name: &[u8; 4], version: u8, time: u8, rest: &[u8]| {
            let times = if version == 1 { 16 } else { 8 };
            boxed(name, &[&[version, 0, 0, 0][..], &vec![time; times], rest].concat())
        };
        let init = |time: u8, width: u8| {
            let mdia = boxed(
                b"mdia",
                &[header(b"mdhd", 0, time, &[0, 1, 0x5f, 0x90]), boxed(b"hdlr", b"vide")].concat(),
            );
            let trak = boxed(b"trak", &[header(b"tkhd", 1, time, &[0, 0, 0, 1, width]), mdia].concat());
            [boxed(b"ftyp", b"cmf2"), boxed(b"moov", &[header(b"mvhd", 1, time, &[0; 4]), trak].concat())]
                .concat()
        };
        assert!(same_init(&init(1, 64), &init(2, 64)), "times only");
        assert!(!same_init(&init(1, 64), &init(1, 80)), "a track of another size");
        assert!(!same_init(b"no moov", b"no moov"), "not initialization sections");
        let short = init(1, 64);
        assert!(!same_init(&short[..short.len() - 3], &short[..short.len() - 3]), "cut short");
    }

    #[test]
    fn garbage_is_not_a_chunk() {
        assert_eq!(starts_with_sync_sample(b""), None);
        assert_eq!(starts_with_sync_sample(&[0xff; 64]), None);
        assert_eq!(starts_with_sync_sample(&boxed(b"mdat", &[0; 16])), None);
        // A box that claims more than there is.
        let mut moof = boxed(b"moof", &[0; 8]);
        moof[3] = 200;
        assert_eq!(starts_with_sync_sample(&moof), None);
        // No samples.
        let tfhd = [0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &[0, 0, 0, 0, 0, 0, 0, 0])), None);
    }

    #[test]
    fn codec_strings() {
        assert_eq!(avc1_codec(&[1, 0x64, 0x00, 0x1f, 0xff]).as_deref(), Some("avc1.64001f"));
        assert_eq!(avc1_codec(&[0, 0x64]), None);
        assert_eq!(mp4a_codec(&[0x12, 0x10]).as_deref(), Some("mp4a.40.2"), "AAC-LC");
        assert_eq!(mp4a_codec(&[0x2b, 0x92]).as_deref(), Some("mp4a.40.5"), "HE-AAC");
        assert_eq!(mp4a_codec(&[]), None);
    }
}
