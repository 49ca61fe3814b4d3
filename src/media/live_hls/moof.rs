//! What a CMAF chunk says of its first sample: whether a decoder can start there (ISO/IEC
//! 14496-12 8.8: `moof`/`traf`/`tfhd` and `trun`, `sample_is_non_sync_sample`). A part is
//! `INDEPENDENT=YES` exactly when its first video sample is a sync sample, whatever asked for
//! the keyframe, so the playlist never claims what the bytes do not hold.

/// `sample_is_non_sync_sample` in a sample's flags (8.8.3.1).
const NON_SYNC: u32 = 0x0001_0000;

/// Whether the first sample of the first track fragment of the chunk `data` (a `moof` and its
/// `mdat`, in that order) is a sync sample; `None` when `data` is not such a chunk.
pub fn starts_with_sync_sample(data: &[u8]) -> Option<bool> {
    let moof = child(data, b"moof")?;
    let traf = child(moof, b"traf")?;
    let default_flags = tfhd_default_flags(child(traf, b"tfhd")?)?;
    let flags = trun_first_flags(child(traf, b"trun")?)?.or(default_flags)?;
    Some(flags & NON_SYNC == 0)
}

/// `default_sample_flags` of a `tfhd` body (full box: version and flags first), if present.
fn tfhd_default_flags(tfhd: &[u8]) -> Option<Option<u32>> {
    let flags = be_u32(tfhd)? & 0x00ff_ffff;
    // track_ID, then the optional fields in order.
    let mut at = 8;
    for (bit, len) in [(0x01, 8), (0x02, 4), (0x08, 4), (0x10, 4)] {
        if flags & bit != 0 {
            at += len;
        }
    }
    if flags & 0x20 == 0 {
        return Some(None);
    }
    be_u32(tfhd.get(at..)?).map(Some)
}

/// The flags a `trun` body gives its first sample: `first_sample_flags`, else the first entry's
/// own flags; `Some(None)` when it gives none (the `tfhd` default applies).
fn trun_first_flags(trun: &[u8]) -> Option<Option<u32>> {
    let flags = be_u32(trun)? & 0x00ff_ffff;
    let count = be_u32(trun.get(4..)?)?;
    if count == 0 {
        return None;
    }
    let mut at = 8;
    if flags & 0x001 != 0 {
        at += 4; // data_offset
    }
    if flags & 0x004 != 0 {
        return be_u32(trun.get(at..)?).map(Some);
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
