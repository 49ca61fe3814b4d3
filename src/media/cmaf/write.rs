//! Writing CMAF for one track: the initialization section (`ftyp`, `moov`) and chunks (`moof`
//! and `mdat`, a `styp` before a segment's first), ISO/IEC 14496-12 and 23000-19. The boxes
//! are the ones `cmafmux` writes for the same track (gst-plugins-rs `mux/fmp4/src/fmp4mux/boxes.rs`):
//! brands `cmf2`/`iso6`/`cmfc`, empty sample tables, one `trex`, per-sample durations and
//! sizes, composition offsets (a version-1 `trun` when one is negative), `default-base-is-moof`.
//! Plain bytes: the live packager (`media::live::pack`) decides what goes in a chunk.

/// What the initialization section describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Track {
    /// H.264 in `avc1` sample entries: `avcc` is the decoder configuration record.
    Video { width: u16, height: u16, avcc: Vec<u8> },
    /// AAC in an `mp4a` sample entry: `asc` is the AudioSpecificConfig.
    Audio { channels: u16, rate: u32, asc: Vec<u8> },
}

/// One sample of a chunk, in decode order, in the track's timescale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub size: u32,
    pub duration: u32,
    /// Presentation less decode time.
    pub composition_offset: i32,
    pub sync: bool,
}

/// A sync sample: depends on no other (ISO/IEC 14496-12 8.8.3.1).
const SYNC: u32 = 0x0200_0000;
/// Depends on others, and is not a sync sample.
const NON_SYNC: u32 = 0x0101_0000;

fn write_box(v: &mut Vec<u8>, name: &[u8; 4], body: impl FnOnce(&mut Vec<u8>)) {
    let at = v.len();
    v.extend([0, 0, 0, 0]);
    v.extend(name);
    body(v);
    let size = u32::try_from(v.len() - at).unwrap_or(u32::MAX);
    v[at..at + 4].copy_from_slice(&size.to_be_bytes());
}

fn write_full_box(v: &mut Vec<u8>, name: &[u8; 4], version: u8, flags: u32, body: impl FnOnce(&mut Vec<u8>)) {
    write_box(v, name, |v| {
        v.extend((u32::from(version) << 24 | (flags & 0x00ff_ffff)).to_be_bytes());
        body(v);
    });
}

fn brands(v: &mut Vec<u8>) {
    v.extend(b"cmf2");
    v.extend(0u32.to_be_bytes());
    v.extend(b"iso6cmfc");
}

/// The unity matrix of `mvhd` and `tkhd`.
fn matrix(v: &mut Vec<u8>) {
    for m in [0x0001_0000u32, 0, 0, 0, 0x0001_0000, 0, 0, 0, 0x4000_0000] {
        v.extend(m.to_be_bytes());
    }
}

/// `ftyp` and `moov` for `track` (track 1) at `timescale` ticks a second. No creation times:
/// two pushes of the same stream get the same bytes.
pub fn init(track: &Track, timescale: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(800);
    write_box(&mut v, b"ftyp", brands);
    write_box(&mut v, b"moov", |v| {
        write_full_box(v, b"mvhd", 1, 0, |v| {
            v.extend([0u8; 16]);
            v.extend(timescale.to_be_bytes());
            v.extend(0u64.to_be_bytes());
            v.extend(0x0001_0000u32.to_be_bytes());
            v.extend(0x0100u16.to_be_bytes());
            v.extend([0u8; 10]);
            matrix(v);
            v.extend([0u8; 24]);
            v.extend(2u32.to_be_bytes());
        });
        write_box(v, b"trak", |v| trak(v, track, timescale));
        write_box(v, b"mvex", |v| {
            write_full_box(v, b"trex", 0, 0, |v| {
                v.extend(1u32.to_be_bytes());
                v.extend(1u32.to_be_bytes());
                v.extend([0u8; 12]);
            });
        });
    });
    v
}

fn trak(v: &mut Vec<u8>, track: &Track, timescale: u32) {
    let (volume, size, handler, name): (u16, [u32; 2], &[u8; 4], &[u8]) = match track {
        Track::Video { width, height, .. } => {
            (0, [u32::from(*width) << 16, u32::from(*height) << 16], b"vide", b"VideoHandler\0")
        }
        Track::Audio { .. } => (0x0100, [0, 0], b"soun", b"SoundHandler\0"),
    };
    // Enabled, in the movie, in the preview.
    write_full_box(v, b"tkhd", 1, 0x7, |v| {
        v.extend([0u8; 16]);
        v.extend(1u32.to_be_bytes());
        v.extend([0u8; 4]);
        v.extend(0u64.to_be_bytes());
        v.extend([0u8; 8]);
        v.extend([0u8; 4]);
        v.extend(volume.to_be_bytes());
        v.extend([0u8; 2]);
        matrix(v);
        v.extend(size[0].to_be_bytes());
        v.extend(size[1].to_be_bytes());
    });
    write_box(v, b"mdia", |v| {
        write_full_box(v, b"mdhd", 1, 0, |v| {
            v.extend([0u8; 16]);
            v.extend(timescale.to_be_bytes());
            v.extend(0u64.to_be_bytes());
            // "und", ISO 639-2/T packed in three 5-bit letters.
            v.extend(0x55c4u16.to_be_bytes());
            v.extend([0u8; 2]);
        });
        write_full_box(v, b"hdlr", 0, 0, |v| {
            v.extend([0u8; 4]);
            v.extend(handler);
            v.extend([0u8; 12]);
            v.extend(name);
        });
        write_box(v, b"minf", |v| {
            match track {
                Track::Video { .. } => write_full_box(v, b"vmhd", 0, 1, |v| v.extend([0u8; 8])),
                Track::Audio { .. } => write_full_box(v, b"smhd", 0, 0, |v| v.extend([0u8; 4])),
            }
            write_box(v, b"dinf", |v| {
                write_full_box(v, b"dref", 0, 0, |v| {
                    v.extend(1u32.to_be_bytes());
                    write_full_box(v, b"url ", 0, 1, |_| {});
                });
            });
            write_box(v, b"stbl", |v| stbl(v, track));
        });
    });
}

fn stbl(v: &mut Vec<u8>, track: &Track) {
    write_full_box(v, b"stsd", 0, 0, |v| {
        v.extend(1u32.to_be_bytes());
        match track {
            Track::Video { width, height, avcc } => write_box(v, b"avc1", |v| {
                v.extend([0u8; 6]);
                v.extend(1u16.to_be_bytes());
                v.extend([0u8; 16]);
                v.extend(width.to_be_bytes());
                v.extend(height.to_be_bytes());
                v.extend(0x0048_0000u32.to_be_bytes());
                v.extend(0x0048_0000u32.to_be_bytes());
                v.extend([0u8; 4]);
                v.extend(1u16.to_be_bytes());
                v.extend([0u8; 32]);
                v.extend(0x0018u16.to_be_bytes());
                v.extend((-1i16).to_be_bytes());
                write_box(v, b"avcC", |v| v.extend(avcc));
            }),
            Track::Audio { channels, rate, asc } => write_box(v, b"mp4a", |v| {
                v.extend([0u8; 6]);
                v.extend(1u16.to_be_bytes());
                v.extend([0u8; 8]);
                v.extend(channels.to_be_bytes());
                v.extend(16u16.to_be_bytes());
                v.extend([0u8; 4]);
                // 16.16 fixed point; rates above 65535 Hz (88.2, 96 kHz) do not fit and are
                // written as 0, as the AudioSpecificConfig states them.
                v.extend((if *rate <= 0xffff { *rate << 16 } else { 0 }).to_be_bytes());
                esds(v, asc);
            }),
        }
    });
    for table in [b"stts", b"stsc", b"stco"] {
        write_full_box(v, table, 0, 0, |v| v.extend(0u32.to_be_bytes()));
    }
    write_full_box(v, b"stsz", 0, 0, |v| v.extend([0u8; 8]));
    if matches!(track, Track::Video { .. }) {
        // Not every sample is a sync sample.
        write_full_box(v, b"stss", 0, 0, |v| v.extend(0u32.to_be_bytes()));
    }
}

/// The ES descriptor of an AAC track (ISO/IEC 14496-1 7.2.6.5): object type 0x40 (MPEG-4
/// audio), the AudioSpecificConfig as decoder specific info, SL config 2.
fn esds(v: &mut Vec<u8>, asc: &[u8]) {
    /// A descriptor's tag, its length in the expandable form, and its body.
    fn descriptor(v: &mut Vec<u8>, tag: u8, body: &[u8]) {
        v.push(tag);
        let len = body.len().min(0x0fff_ffff);
        let mut groups = vec![(len & 0x7f) as u8];
        let mut rest = len >> 7;
        while rest > 0 {
            groups.push(0x80 | (rest & 0x7f) as u8);
            rest >>= 7;
        }
        v.extend(groups.iter().rev());
        v.extend(&body[..len]);
    }
    let mut config = vec![0x40, (0x05 << 2) | 0x01];
    config.extend([0u8; 3]);
    config.extend([0u8; 8]);
    descriptor(&mut config, 0x05, asc);
    let mut es = vec![0, 1, 0];
    descriptor(&mut es, 0x04, &config);
    descriptor(&mut es, 0x06, &[0x02]);
    write_full_box(v, b"esds", 0, 0, |v| descriptor(v, 0x03, &es));
}

/// A chunk of `samples` whose first decode time is `decode_time` (the `tfdt`): `moof`
/// (sequence number `sequence`) and `mdat`, with the samples' bytes appended by `payload` in
/// decode order (their `size`s in all); a `styp` first when `segment` (a segment's first chunk).
pub fn chunk(
    sequence: u32,
    decode_time: u64,
    samples: &[Sample],
    segment: bool,
    payload: impl FnOnce(&mut Vec<u8>),
) -> Vec<u8> {
    let size: u64 = samples.iter().map(|s| u64::from(s.size)).sum();
    let mut v = Vec::with_capacity(usize::try_from(size).unwrap_or(0) + 128 + samples.len() * 16);
    if segment {
        write_box(&mut v, b"styp", brands);
    }
    let moof_at = v.len();
    let mixed = samples.iter().any(|s| !s.sync || s.composition_offset != 0);
    let offsets = samples.iter().any(|s| s.composition_offset != 0);
    let negative = samples.iter().any(|s| s.composition_offset < 0);
    let mut data_offset_at = 0;
    write_box(&mut v, b"moof", |v| {
        write_full_box(v, b"mfhd", 0, 0, |v| v.extend(sequence.to_be_bytes()));
        write_box(v, b"traf", |v| {
            // default-base-is-moof; a chunk of sync samples only (audio) states their flags
            // once, as a default.
            let tfhd_flags = if mixed { 0x02_0000 } else { 0x02_0020 };
            write_full_box(v, b"tfhd", 0, tfhd_flags, |v| {
                v.extend(1u32.to_be_bytes());
                if !mixed {
                    v.extend(SYNC.to_be_bytes());
                }
            });
            match u32::try_from(decode_time) {
                Ok(t) => write_full_box(v, b"tfdt", 0, 0, |v| v.extend(t.to_be_bytes())),
                Err(_) => write_full_box(v, b"tfdt", 1, 0, |v| v.extend(decode_time.to_be_bytes())),
            }
            // data offset, durations, sizes; each sample's flags unless they are the default, and
            // composition offsets when any is not zero.
            let mut trun_flags = 0x001 | 0x100 | 0x200;
            if mixed {
                trun_flags |= 0x400;
            }
            if offsets {
                trun_flags |= 0x800;
            }
            write_full_box(v, b"trun", u8::from(negative), trun_flags, |v| {
                v.extend(u32::try_from(samples.len()).unwrap_or(u32::MAX).to_be_bytes());
                data_offset_at = v.len();
                v.extend(0u32.to_be_bytes());
                for s in samples {
                    v.extend(s.duration.to_be_bytes());
                    v.extend(s.size.to_be_bytes());
                    if mixed {
                        v.extend((if s.sync { SYNC } else { NON_SYNC }).to_be_bytes());
                    }
                    if offsets {
                        v.extend(s.composition_offset.to_be_bytes());
                    }
                }
            });
        });
    });
    match u32::try_from(size + 8) {
        Ok(mdat) => {
            v.extend(mdat.to_be_bytes());
            v.extend(b"mdat");
        }
        Err(_) => {
            v.extend(1u32.to_be_bytes());
            v.extend(b"mdat");
            v.extend((size + 16).to_be_bytes());
        }
    }
    // The samples begin right after the mdat's header, counted from the moof's start.
    let data_offset = u32::try_from(v.len() - moof_at).unwrap_or(u32::MAX);
    v[data_offset_at..data_offset_at + 4].copy_from_slice(&data_offset.to_be_bytes());
    payload(&mut v);
    v
}
