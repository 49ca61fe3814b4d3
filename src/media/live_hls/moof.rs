//! What a CMAF chunk says of its first sample: whether a decoder can start there (ISO/IEC
//! 14496-12 8.8: `moof`/`traf`/`tfhd` and `trun`, `sample_is_non_sync_sample`). A part is
//! `INDEPENDENT=YES` exactly when its first video sample is a sync sample, whatever asked for
//! the keyframe, so the playlist never claims what the bytes do not hold. Also how long a chunk
//! lasts (its samples' durations) and an init section's timescale (`mdhd`), for the parts whose
//! length the muxer does not state in decode time.

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

/// The timescale of the first track of the init section `init` (`moov`/`trak`/`mdia`/`mdhd`).
pub fn timescale(init: &[u8]) -> Option<u32> {
    let mdhd = child(child(child(child(init, b"moov")?, b"trak")?, b"mdia")?, b"mdhd")?;
    // Version 1 has 64-bit creation and modification times.
    let at = if *mdhd.first()? == 1 { 20 } else { 12 };
    be_u32(mdhd.get(at..)?).filter(|&t| t > 0)
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

/// The body of the first box named `name` among the boxes that make up `data`.
fn child<'a>(mut data: &'a [u8], name: &[u8; 4]) -> Option<&'a [u8]> {
    while data.len() >= 8 {
        let size = be_u32(data)? as usize;
        let (header, size) = match size {
            1 => (16, usize::try_from(u64::from_be_bytes(data.get(8..16)?.try_into().ok()?)).ok()?),
            0 => (8, data.len()),
            n => (8, n),
        };
        if size < header || size > data.len() {
            return None;
        }
        if &data[4..8] == name {
            return Some(&data[header..size]);
        }
        data = &data[size..];
    }
    None
}

fn be_u32(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(..4)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boxed(name: &[u8; 4], body: &[u8]) -> Vec<u8> {
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
}
