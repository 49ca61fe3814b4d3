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
    let trun =
        |first: [u8; 4]| [&[0, 0, 0x02, 0x05][..], &[0, 0, 0, 2], &[0, 0, 0, 9], &first, &[0; 8]].concat();
    assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(SYNC))), Some(true));
    assert_eq!(starts_with_sync_sample(&chunk(&tfhd, &trun(DELTA))), Some(false));
}

#[test]
fn per_sample_flags_and_tfhd_defaults() {
    // trun with duration, size and flags per sample (cmafmux's usual layout).
    let trun =
        |first: [u8; 4]| [&[0, 0, 0x07, 0x01][..], &[0, 0, 0, 1], &[0, 0, 0, 9], &[0; 8], &first].concat();
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
    let trun =
        [&[0, 0, 0x03, 0][..], &3u32.to_be_bytes(), &[0, 0, 0, 100, 0, 0, 0, 9], &[0, 0, 0, 50, 0, 0, 0, 9]]
            .concat();
    let trun = [trun, vec![0, 0, 0, 25, 0, 0, 0, 9]].concat();
    let first = boxed(b"traf", &[boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]), boxed(b"trun", &trun)].concat());
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
    let trun =
        [&[0, 0, 0x0f, 0x01][..], &[0, 0, 0, 3], &[0, 0, 0, 9], &sample(3000), &sample(3000), &sample(3100)]
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
            &[boxed(b"mvhd", &[0; 100]), boxed(b"trak", &[boxed(b"tkhd", &[0; 84]), mdia].concat())].concat(),
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
        let traf =
            [boxed(b"tfhd", &[0, 0, 0, 0, 0, 0, 0, 1]), boxed(b"tfdt", &tfdt), boxed(b"trun", &trun(offset))]
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
    // A video sample entry (78 bytes of fields) whose `btrt` says another bitrate.
    let entry = |bitrate: u8, width: u8| {
        let mut fields = vec![0u8; 78];
        fields[25] = width;
        let btrt = boxed(b"btrt", &[[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, bitrate]].concat());
        let stsd = boxed(
            b"stsd",
            &[&[0u8, 0, 0, 0, 0, 0, 0, 1][..], &boxed(b"avc1", &[fields, btrt].concat())].concat(),
        );
        let stbl = boxed(b"stbl", &stsd);
        let mdia = boxed(b"mdia", &boxed(b"minf", &stbl));
        [boxed(b"ftyp", b"cmf2"), boxed(b"moov", &boxed(b"trak", &mdia))].concat()
    };
    assert!(same_init(&entry(1, 64), &entry(2, 64)), "bitrates only");
    assert!(!same_init(&entry(1, 64), &entry(1, 80)), "a sample entry of another size");
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

#[test]
fn a_segment_splits_into_its_chunks() {
    let a = chunk(&[0, 0, 0, 0, 0, 0, 0, 1], &[0, 0, 0, 0, 0, 0, 0, 0]);
    let b = chunk(&[0, 0, 0, 0, 0, 0, 0, 1], &[0, 0, 0, 0, 0, 0, 0, 0]);
    let styp = boxed(b"styp", b"cmfs");
    let mut segment = styp.clone();
    segment.extend_from_slice(&a);
    segment.extend_from_slice(&b);
    let (first, second) = (styp.len() + a.len(), styp.len() + a.len() + b.len());
    assert_eq!(chunks(&segment), Some(vec![0..first, first..second]));
    // A cut through a box, or bytes after the last mdat, or no chunk: not a segment.
    assert_eq!(chunks(&segment[..second - 1]), None);
    assert_eq!(chunks(&styp), None);
    let mut trailing = segment.clone();
    trailing.extend_from_slice(&boxed(b"free", b""));
    assert_eq!(chunks(&trailing), None);
}
