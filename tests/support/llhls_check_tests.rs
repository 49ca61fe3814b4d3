//! The checker against playlists that keep each rule and mutations that break exactly one.

use super::*;

/// A video rung as Sluice serves it: 30 fps, 200-ms configured parts (7,7,7,7,8,8,8,8 frames).
const BASE: &str = r#"#EXTM3U
#EXT-X-VERSION:9
#EXT-X-TARGETDURATION:2
#EXT-X-PART-INF:PART-TARGET=0.26867
#EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=0.807,CAN-SKIP-UNTIL=12
#EXT-X-MEDIA-SEQUENCE:0
#EXT-X-MAP:URI="init.mp4"
#EXT-X-PROGRAM-DATE-TIME:2026-11-29T10:00:00.000Z
#EXTINF:2.00000,
seg0.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-29T10:00:02.000Z
#EXT-X-PART:DURATION=0.23333,URI="part1.0.m4s",INDEPENDENT=YES
#EXT-X-PART:DURATION=0.23333,URI="part1.1.m4s"
#EXT-X-PART:DURATION=0.23333,URI="part1.2.m4s"
#EXT-X-PART:DURATION=0.23333,URI="part1.3.m4s"
#EXT-X-PART:DURATION=0.26667,URI="part1.4.m4s"
#EXT-X-PART:DURATION=0.26667,URI="part1.5.m4s"
#EXT-X-PART:DURATION=0.26667,URI="part1.6.m4s"
#EXT-X-PART:DURATION=0.26667,URI="part1.7.m4s"
#EXTINF:2.00000,
seg1.m4s
#EXT-X-PROGRAM-DATE-TIME:2026-11-29T10:00:04.000Z
#EXT-X-PART:DURATION=0.23333,URI="part2.0.m4s",INDEPENDENT=YES
#EXT-X-PRELOAD-HINT:TYPE=PART,URI="part2.1.m4s"
#EXT-X-RENDITION-REPORT:URI="../720p/index.m3u8",LAST-MSN=2,LAST-PART=0
"#;

const VOD: &str = "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n#EXT-X-MEDIA-SEQUENCE:0\n\
#EXT-X-PLAYLIST-TYPE:VOD\n#EXT-X-MAP:URI=\"init.mp4\"\n#EXTINF:4.00000,\ns0.m4s\n#EXTINF:1.23333,\ns1.m4s\n\
#EXT-X-ENDLIST\n";

/// `base` with the first `from` made `to`; a fixture that lacks `from` fails the test.
#[track_caller]
fn with(base: &str, from: &str, to: &str) -> String {
    assert!(base.contains(from), "the fixture lacks {from:?}");
    base.replacen(from, to, 1)
}

/// `base` without the lines containing any of `needles`.
fn without(base: &str, needles: &[&str]) -> String {
    let kept = base.lines().filter(|l| !needles.iter().any(|n| l.contains(n)));
    let text: String = kept.map(|l| format!("{l}\n")).collect();
    assert_ne!(text.len(), base.len(), "nothing of {needles:?} in the fixture");
    text
}

#[track_caller]
fn one(found: Vec<String>, section: &str) {
    assert_eq!(found.len(), 1, "one finding under §{section} expected: {found:#?}");
    assert!(found[0].starts_with(&format!("§{section} ")), "§{section} expected: {found:#?}");
}

#[track_caller]
fn all(found: Vec<String>, section: &str) {
    assert!(!found.is_empty(), "findings under §{section} expected");
    assert!(found.iter().all(|f| f.starts_with(&format!("§{section} "))), "§{section} only: {found:#?}");
}

#[track_caller]
fn none(found: Vec<String>) {
    assert!(found.is_empty(), "no findings expected: {found:#?}");
}

fn pdt(msn: u64) -> String {
    format!("2026-01-01T00:{:02}:{:02}.000Z", 2 * msn / 60, 2 * msn % 60)
}

/// 2-s segments of four 0.5-s parts: `first..next` complete (the first `skip` replaced by
/// EXT-X-SKIP) and `open` parts of `next`; parts listed while they start within `window` s of
/// the end; a hint for the next part and a report of this same position for `../b`.
fn playlist(first: u64, next: u64, open: u64, skip: u64, window: f64) -> String {
    let mut t = format!(
        "#EXTM3U\n#EXT-X-VERSION:9\n#EXT-X-TARGETDURATION:2\n#EXT-X-PART-INF:PART-TARGET=0.5\n\
         #EXT-X-SERVER-CONTROL:CAN-BLOCK-RELOAD=YES,PART-HOLD-BACK=1.5,CAN-SKIP-UNTIL=12\n\
         #EXT-X-MEDIA-SEQUENCE:{first}\n"
    );
    if skip > 0 {
        t += &format!("#EXT-X-SKIP:SKIPPED-SEGMENTS={skip}\n");
    }
    t += "#EXT-X-MAP:URI=\"init.mp4\"\n";
    let end = 2.0 * (next - first) as f64 + 0.5 * open as f64;
    for m in first + skip..=next {
        let parts = if m == next { open } else { 4 };
        if parts == 0 {
            break;
        }
        t += &format!("#EXT-X-PROGRAM-DATE-TIME:{}\n", pdt(m));
        for i in 0..parts {
            if end - (2.0 * (m - first) as f64 + 0.5 * i as f64) <= window {
                let independent = if i == 0 { ",INDEPENDENT=YES" } else { "" };
                t += &format!("#EXT-X-PART:DURATION=0.50000,URI=\"p{m}.{i}.m4s\"{independent}\n");
            }
        }
        if m < next {
            t += &format!("#EXTINF:2.00000,\ns{m}.m4s\n");
        }
    }
    let (msn, part) = if open > 0 { (next, open - 1) } else { (next - 1, 3) };
    t += &format!("#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"p{next}.{open}.m4s\"\n");
    t + &format!("#EXT-X-RENDITION-REPORT:URI=\"../b/index.m3u8\",LAST-MSN={msn},LAST-PART={part}\n")
}

fn live(first: u64, next: u64, open: u64) -> String {
    playlist(first, next, open, 0, 6.0)
}

fn ended(text: &str) -> String {
    let hint = text.lines().find(|l| l.starts_with("#EXT-X-PRELOAD-HINT")).expect("a hint");
    with(text, hint, "#EXT-X-ENDLIST")
}

/// EXT-X-DISCONTINUITY (and `tag`) before segment `msn`.
fn disc(text: &str, msn: u64, tag: &str) -> String {
    let at = format!("#EXT-X-PROGRAM-DATE-TIME:{}", pdt(msn));
    with(text, &at, &format!("#EXT-X-DISCONTINUITY\n{tag}{at}"))
}

#[test]
fn valid_playlists_have_no_findings() {
    none(check_media(BASE));
    one(check_media_should(BASE), "6.2.1"); // EXT-X-VERSION 9 where 6 would do.
    none(check_media(VOD));
    none(check_media(&live(0, 5, 2)));
    none(check_media(&live(3, 9, 0)));
    none(check_media(&ended(&live(0, 5, 0))));
    none(check_media(&playlist(0, 10, 2, 4, 6.0)));
    none(check_media(&disc(&live(0, 5, 2), 3, "#EXT-X-MAP:URI=\"init3.mp4\"\n")));
    let ranges = "#EXT-X-DATERANGE:ID=\"ad\",CLASS=\"c\",START-DATE=\"2026-11-29T10:00:01.000Z\",\
                  DURATION=2.0,END-DATE=\"2026-11-29T10:00:03.000+00:00\",X-COM-ID=\"x\",SCTE35-OUT=0xFC00\n\
                  #EXT-X-DATERANGE:ID=\"ad\",CUE=\"PRE,ONCE\"\n#EXT-X-MAP";
    none(check_media(&with(BASE, "#EXT-X-MAP", ranges)));
}

#[test]
fn basic_and_once_only_tags() {
    one(check_media(&with(BASE, "#EXTM3U\n", "#EXT-X-M3U\n")), "4.4.1.1");
    one(check_media(""), "4.4.1.1");
    one(check_media(&with(BASE, "#EXT-X-VERSION:9\n", "#EXT-X-VERSION:9\n#EXT-X-VERSION:9\n")), "4.4.1.2");
    let twice =
        with(BASE, "#EXT-X-MAP", "#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-INDEPENDENT-SEGMENTS\n#EXT-X-MAP");
    one(check_media(&twice), "4.4.2");
    one(
        check_media(&with(
            BASE,
            "#EXT-X-TARGETDURATION:2\n",
            "#EXT-X-TARGETDURATION:2\n#EXT-X-TARGETDURATION:2\n",
        )),
        "4.4.3",
    );
    one(check_media("#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=1\na.m3u8\n"), "4.4.6");
}

#[test]
fn attribute_lists() {
    one(check_media(&with(BASE, "LAST-PART=0", "LAST-PART=0,LAST-PART=0")), "4.2");
    one(check_media(&with(BASE, "LAST-MSN=2", "last-msn=2")), "4.2");
    one(check_media(&with(BASE, "URI=\"../720p/index.m3u8\"", "URI=\"../720p/index.m3u8")), "4.2");
    one(check_media(&with(BASE, "LAST-PART=0", "LAST-PART=0,")), "4.2");
    one(check_media(&with(BASE, "LAST-MSN=2", "LAST-MSN= 2")), "4.2");
    // A comma inside a quoted-string is the string's.
    none(check_media(&with(BASE, "../720p/index.m3u8", "../720p/a,b.m3u8")));
}

#[test]
fn target_duration_media_sequence_discontinuity_sequence_playlist_type() {
    one(check_media(&without(BASE, &["#EXT-X-TARGETDURATION"])), "4.4.3.1");
    all(check_media(&with(BASE, "#EXT-X-TARGETDURATION:2", "#EXT-X-TARGETDURATION:0")), "4.4.3.1");
    one(check_media("#EXTM3U\n#EXT-X-TARGETDURATION:0\n#EXT-X-ENDLIST\n"), "4.4.3.1");
    one(check_media(&with(BASE, "#EXTINF:2.00000,\nseg0", "#EXTINF:2.50000,\nseg0")), "4.4.3.1");
    none(check_media(&with(BASE, "#EXTINF:2.00000,\nseg0", "#EXTINF:2.49999,\nseg0")));
    let late =
        with(&without(BASE, &["#EXT-X-MEDIA-SEQUENCE"]), "seg0.m4s\n", "seg0.m4s\n#EXT-X-MEDIA-SEQUENCE:0\n");
    one(check_media(&late), "4.4.3.2");
    one(check_media(&with(BASE, "seg0.m4s\n", "seg0.m4s\n#EXT-X-DISCONTINUITY-SEQUENCE:0\n")), "4.4.3.3");
    let after_disc = "#EXT-X-DISCONTINUITY\n#EXT-X-DISCONTINUITY-SEQUENCE:0\n#EXT-X-MAP";
    one(check_media(&with(BASE, "#EXT-X-MAP", after_disc)), "4.4.3.3");
    one(check_media(&with(BASE, "#EXT-X-MAP", "#EXT-X-PLAYLIST-TYPE:LIVE\n#EXT-X-MAP")), "4.4.3.5");
    one(check_media(&without(VOD, &["#EXT-X-ENDLIST"])), "6.2.1");
}

#[test]
fn part_inf_and_server_control() {
    one(check_media(&without(BASE, &["#EXT-X-PART-INF"])), "4.4.3.7");
    one(check_media(&with(BASE, "PART-TARGET=0.26867", "X-TARGET=0.26867")), "4.4.3.7");
    let sc = |from: &str, to: &str| check_media(&with(BASE, from, to));
    one(sc("CAN-SKIP-UNTIL=12", "CAN-SKIP-UNTIL=11.9"), "4.4.3.8");
    one(sc(",CAN-SKIP-UNTIL=12", ",CAN-SKIP-DATERANGES=YES"), "4.4.3.8");
    one(sc("CAN-SKIP-UNTIL=12", "CAN-SKIP-UNTIL=12,CAN-SKIP-DATERANGES=NO"), "4.4.3.8");
    one(sc("CAN-BLOCK-RELOAD=YES,", "CAN-BLOCK-RELOAD=YES,HOLD-BACK=5.9,"), "4.4.3.8");
    none(sc("CAN-BLOCK-RELOAD=YES,", "CAN-BLOCK-RELOAD=YES,HOLD-BACK=6,"));
    one(sc("PART-HOLD-BACK=0.807,", ""), "4.4.3.8");
    one(sc("PART-HOLD-BACK=0.807", "PART-HOLD-BACK=0.53733"), "4.4.3.8");
    none(sc("PART-HOLD-BACK=0.807", "PART-HOLD-BACK=0.53734"));
    one(sc("CAN-BLOCK-RELOAD=YES", "CAN-BLOCK-RELOAD=NO"), "4.4.3.8");
    one(sc("PART-HOLD-BACK=0.807", "PART-HOLD-BACK=.8o7"), "4.4.3.8");
    // Between twice and three times PART-TARGET: a SHOULD only.
    let low = with(BASE, "PART-HOLD-BACK=0.807", "PART-HOLD-BACK=0.6");
    none(check_media(&low));
    assert_eq!(check_media_should(&low).len(), 2, "{:#?}", check_media_should(&low));
    assert!(check_media_should(&low)[0].starts_with("§4.4.3.8 SHOULD"));
}

#[test]
fn media_segment_tags() {
    let m = |from: &str, to: &str| check_media(&with(BASE, from, to));
    one(m("#EXTINF:2.00000,\nseg0", "seg0"), "4.4.4.1");
    one(m("#EXTINF:2.00000,\nseg0", "#EXTINF:2.0s,\nseg0"), "4.4.4.1");
    one(m("#EXTINF:2.00000,\nseg0", "#EXTINF:2.00000\nseg0"), "4.4.4.1");
    one(check_media(&format!("{BASE}#EXTINF:2.00000,\n")), "4.4.4.1");
    one(m("seg0.m4s\n", "#EXT-X-BYTERANGE:1000\nseg0.m4s\n"), "4.4.4.2");
    one(m("seg0.m4s\n", "#EXT-X-BYTERANGE:1000@\nseg0.m4s\n"), "4.4.4.2");
    let ranges = "#EXTINF:1.00000,\n#EXT-X-BYTERANGE:1000@0\nseg0.mp4\n\
                  #EXTINF:1.00000,\n#EXT-X-BYTERANGE:900\nseg0.mp4\n";
    none(check_media(&with(BASE, "#EXTINF:2.00000,\nseg0.m4s\n", ranges)));
    let key = |k: &str| m("#EXTINF:2.00000,\nseg0", &format!("{k}\n#EXTINF:2.00000,\nseg0"));
    none(key("#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0x0123456789ABCDEF0123456789ABCDEF"));
    one(key("#EXT-X-KEY:METHOD=NONE,URI=\"k\""), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=AES-128"), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=ROT13,URI=\"k\""), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=AES-256-GCM,URI=\"k\",IV=0x01"), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=SAMPLE-AES-CTR,URI=\"k\",IV=0x01"), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0xabc"), "4.4.4.4");
    one(key("#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0x0123456789ABCDEF0123456789ABCDEF0"), "4.4.4.4");
    one(m("#EXT-X-MAP:URI=\"init.mp4\"", "#EXT-X-MAP:BYTERANGE=\"100@0\""), "4.4.4.5");
    one(m("#EXT-X-MAP:URI=\"init.mp4\"", "#EXT-X-MAP:URI=\"init.mp4\",BYTERANGE=\"100\""), "4.4.4.5");
    one(m("#EXT-X-MAP", "#EXT-X-KEY:METHOD=AES-128,URI=\"k\"\n#EXT-X-MAP"), "4.4.4.5");
    none(m("#EXT-X-MAP", "#EXT-X-KEY:METHOD=AES-128,URI=\"k\",IV=0x01\n#EXT-X-MAP"));
    one(m("2026-11-29T10:00:00.000Z", "2026-11-29 10:00:00.000Z"), "4.4.4.6");
    one(m("2026-11-29T10:00:00.000Z", "2026-02-29T10:00:00.000Z"), "4.4.4.6");
    one(m("2026-11-29T10:00:00.000Z", "2026-11-29T10:00:00.000+2"), "4.4.4.6");
    none(m("2026-11-29T10:00:00.000Z", "2024-02-29T10:00:00.5+08:00"));
    one(m("seg0.m4s\n", "#EXT-X-BITRATE:fast\nseg0.m4s\n"), "4.4.4.8");
    none(m("seg0.m4s\n", "#EXT-X-GAP\n#EXT-X-BITRATE:800\nseg0.m4s\n"));
}

#[test]
fn partial_segments() {
    let m = |from: &str, to: &str| check_media(&with(BASE, from, to));
    one(m("URI=\"part1.1.m4s\"", "X-URI=\"part1.1.m4s\""), "4.4.4.9");
    one(m("DURATION=0.23333,URI=\"part1.1.m4s\"", "URI=\"part1.1.m4s\""), "4.4.4.9");
    one(m("DURATION=0.23333,URI=\"part1.1.m4s\"", "DURATION=-0.23333,URI=\"part1.1.m4s\""), "4.4.4.9");
    one(m("URI=\"part1.0.m4s\",INDEPENDENT=YES", "URI=\"part1.0.m4s\",INDEPENDENT=NO"), "4.4.4.9");
    one(m("URI=\"part1.1.m4s\"", "URI=\"part1.1.m4s\",GAP=NO"), "4.4.4.9");
    one(
        m("URI=\"part1.0.m4s\",INDEPENDENT=YES", "URI=\"part1.0.m4s\",INDEPENDENT=YES,BYTERANGE=\"100\""),
        "4.4.4.9",
    );
    one(
        m("URI=\"part1.0.m4s\",INDEPENDENT=YES", "URI=\"part1.0.m4s\",INDEPENDENT=YES,BYTERANGE=\"1@\""),
        "4.4.4.9",
    );
    let ranged = with(
        BASE,
        "URI=\"part1.0.m4s\",INDEPENDENT=YES",
        "URI=\"seg1.mp4\",INDEPENDENT=YES,BYTERANGE=\"100@0\"",
    );
    none(check_media(&with(&ranged, "URI=\"part1.1.m4s\"", "URI=\"seg1.mp4\",BYTERANGE=\"100\"")));
    // Tags of the Parent Segment come before its first part.
    let part0 = "#EXT-X-PART:DURATION=0.23333,URI=\"part1.0.m4s\",INDEPENDENT=YES\n";
    let pdt1 = "#EXT-X-PROGRAM-DATE-TIME:2026-11-29T10:00:02.000Z\n";
    one(m(&format!("{pdt1}{part0}"), &format!("{part0}{pdt1}")), "4.4.4.9");
    one(
        m(
            "URI=\"part2.0.m4s\",INDEPENDENT=YES\n",
            "URI=\"part2.0.m4s\",INDEPENDENT=YES\n#EXT-X-DISCONTINUITY\n",
        ),
        "4.4.4.9",
    );
    one(m(part0, &format!("{part0}#EXT-X-MAP:URI=\"init1.mp4\"\n")), "4.4.4.9");
    // No longer than PART-TARGET; at least 85% of it, but for the exceptions.
    let long = with(
        &with(BASE, "0.26667,URI=\"part1.4", "0.27667,URI=\"part1.4"),
        "0.26667,URI=\"part1.5",
        "0.25667,URI=\"part1.5",
    );
    one(check_media(&long), "4.4.4.9");
    let short = |p1: &str, p2: &str| {
        let t = with(BASE, "0.23333,URI=\"part1.1.m4s\"", p1);
        check_media(&with(&t, "0.23333,URI=\"part1.2.m4s\"", p2))
    };
    one(short("0.20000,URI=\"part1.1.m4s\"", "0.26666,URI=\"part1.2.m4s\""), "4.4.4.9");
    none(short("0.20000,URI=\"part1.1.m4s\",INDEPENDENT=YES", "0.26666,URI=\"part1.2.m4s\""));
    // 85% of 0.26867 is 0.2283695.
    none(short("0.22837,URI=\"part1.1.m4s\"", "0.23829,URI=\"part1.2.m4s\""));
    one(short("0.22836,URI=\"part1.1.m4s\"", "0.23830,URI=\"part1.2.m4s\""), "4.4.4.9");
    none(short("0.20000,URI=\"part1.1.m4s\"", "0.26666,URI=\"part1.2.m4s\",GAP=YES"));
    none(short("0.20000,URI=\"part1.1.m4s\",GAP=YES", "0.26666,URI=\"part1.2.m4s\""));
    let final_short = with(BASE, "0.26667,URI=\"part1.7", "0.20000,URI=\"part1.7");
    none(check_media(&with(&final_short, "#EXTINF:2.00000,\nseg1", "#EXTINF:1.93333,\nseg1")));
    none(m("DURATION=0.23333,URI=\"part2.0.m4s\"", "DURATION=0.10000,URI=\"part2.0.m4s\""));
    // The parts of a Parent Segment add up to it (3.2); the oldest listed may have lost some.
    one(m("#EXTINF:2.00000,\nseg1", "#EXTINF:1.90000,\nseg1"), "3.2");
    one(check_media(&with(&live(0, 5, 2), "#EXTINF:2.00000,\ns3", "#EXTINF:2.10000,\ns3")), "3.2");
    // Parts go in order: no complete segment without parts after one with them.
    one(check_media(&without(&live(0, 5, 2), &["\"p3."])), "6.2.2");
}

#[test]
fn date_ranges() {
    let r = |attrs: &str| {
        check_media(&with(BASE, "#EXT-X-MAP", &format!("#EXT-X-DATERANGE:{attrs}\n#EXT-X-MAP")))
    };
    let start = "START-DATE=\"2026-11-29T10:00:01.000Z\"";
    one(r(start), "4.4.5.1");
    one(r("ID=\"a\""), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},END-DATE=\"2026-11-29T10:00:00.000Z\"")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},DURATION=3.5,END-DATE=\"2026-11-29T10:00:03.000Z\"")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},DURATION=-1")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},PLANNED-DURATION=x")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},CUE=\"PRE,POST\"")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},END-ON-NEXT=YES")), "4.4.5.1");
    one(r(&format!("ID=\"a\",CLASS=\"c\",{start},END-ON-NEXT=YES,DURATION=1")), "4.4.5.1");
    one(r(&format!("ID=\"a\",CLASS=\"c\",{start},END-ON-NEXT=NO")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},X-COM-KIND=ad")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},SCTE35-OUT=\"0xFC\"")), "4.4.5.1");
    one(r(&format!("ID=\"a\",{start},START-DATE=\"x\"")), "4.2");
    one(r(&format!("ID=\"a\",CLASS=\"c\",{start}\n#EXT-X-DATERANGE:ID=\"a\",CLASS=\"d\"")), "4.4.5.1");
    let eon = format!(
        "ID=\"a\",CLASS=\"c\",{start},END-ON-NEXT=YES\n#EXT-X-DATERANGE:ID=\"b\",CLASS=\"c\",\
                       START-DATE=\"2026-11-29T10:00:02.000Z\",DURATION=5"
    );
    none(r(&eon));
    one(
        r(&format!("{eon}\n#EXT-X-DATERANGE:ID=\"c\",CLASS=\"c\",START-DATE=\"2026-11-29T10:00:04.000Z\"")),
        "4.4.5.1",
    );
    let no_dates = with(VOD, "#EXT-X-MAP", &format!("#EXT-X-DATERANGE:ID=\"a\",{start}\n#EXT-X-MAP"));
    one(check_media(&no_dates), "4.4.5.1");
}

#[test]
fn skip() {
    let delta = playlist(0, 10, 2, 4, 6.0);
    let skip = "#EXT-X-SKIP:SKIPPED-SEGMENTS=4\n";
    one(check_media(&with(&delta, skip, &format!("{skip}{skip}"))), "4.4.5");
    one(check_media(&with(&with(&delta, skip, ""), "s4.m4s\n", &format!("s4.m4s\n{skip}"))), "4.4.5.2");
    one(check_media(&with(&delta, "SKIPPED-SEGMENTS=4", "X-SKIPPED=4")), "4.4.5.2");
    one(check_media(&with(&delta, ",CAN-SKIP-UNTIL=12", "")), "6.2.5.1");
    one(check_media(&ended(&delta)), "6.2.5.1");
    let removed = with(&delta, "=4\n", "=4,RECENTLY-REMOVED-DATERANGES=\"\"\n");
    one(check_media(&with(&removed, "#EXT-X-VERSION:9", "#EXT-X-VERSION:10")), "6.2.5.1");
    let allowed = with(&removed, "CAN-SKIP-UNTIL=12", "CAN-SKIP-UNTIL=12,CAN-SKIP-DATERANGES=YES");
    one(check_media(&allowed), "8");
    none(check_media(&with(&allowed, "#EXT-X-VERSION:9", "#EXT-X-VERSION:10")));
}

#[test]
fn preload_hints_and_rendition_reports() {
    let m = |from: &str, to: &str| check_media(&with(BASE, from, to));
    one(m("TYPE=PART,URI", "TYPE=FOO,URI"), "4.4.5.3");
    one(m("TYPE=PART,URI=\"part2.1.m4s\"", "TYPE=PART"), "4.4.5.3");
    one(m("URI=\"part2.1.m4s\"", "URI=\"part2.1.m4s\",BYTERANGE-START=-1"), "4.4.5.3");
    none(m("URI=\"part2.1.m4s\"", "URI=\"part2.1.m4s\",BYTERANGE-START=100,BYTERANGE-LENGTH=20"));
    one(check_media(&format!("{BASE}#EXT-X-ENDLIST\n")), "4.4.5.3");
    one(m("URI=\"../720p/index.m3u8\",", ""), "4.4.5.4");
    one(m("../720p/index.m3u8", "https://cdn.example/720p/index.m3u8"), "4.4.5.4");
    one(m("../720p/index.m3u8", "//cdn.example/720p/index.m3u8"), "4.4.5.4");
    none(m("../720p/index.m3u8", "/live/720p/index.m3u8"));
    one(m("LAST-MSN=2", "LAST-MSN=x"), "4.4.5.4");
    one(m("LAST-PART=0", "LAST-PART=0.5"), "4.4.5.4");
}

#[test]
fn versions_and_low_latency_profile() {
    one(check_media(&with(BASE, "#EXT-X-VERSION:9", "#EXT-X-VERSION:5")), "8");
    one(check_media(&without(BASE, &["#EXT-X-VERSION"])), "4.4.1.2");
    one(
        check_media(
            &with(VOD, "#EXTINF:4.00000,", "#EXTINF:4.00000,\n#EXT-X-BYTERANGE:10@0").replace(":7", ":3"),
        ),
        "8",
    );
    none(check_media("#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\ns0.ts\n#EXT-X-ENDLIST\n"));
    one(check_media("#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4.0,\ns0.ts\n#EXT-X-ENDLIST\n"), "4.4.1.2");
    one(check_media(&without(BASE, &["#EXT-X-PRELOAD-HINT"])), "B.1");
    one(check_media(&without(BASE, &["#EXT-X-PROGRAM-DATE-TIME"])), "B.1");
}

#[test]
fn shoulds() {
    let base = check_media_should(BASE).len();
    let more = |text: &str, section: &str| {
        none(check_media(text));
        let found = check_media_should(text);
        assert_eq!(found.len(), base + 1, "{found:#?}");
        assert!(found.iter().any(|f| f.starts_with(&format!("§{section} SHOULD"))), "{found:#?}");
    };
    more(&with(BASE, "10:00:00.000Z", "10:00:00"), "4.4.4.6");
    more(&with(BASE, "#EXT-X-MAP", "#EXT-X-I-FRAMES-ONLY\n#EXT-X-MAP"), "4.4.4.9");
    more(&playlist(0, 5, 2, 0, 8.0), "6.2.2");
    more(&format!("{BASE}#EXT-X-PRELOAD-HINT:TYPE=PART,URI=\"part2.2.m4s\"\n"), "6.2.6");
    more(&disc(&live(3, 8, 2), 6, ""), "6.2.2");
    none(check_media_should(&with(BASE, "#EXT-X-VERSION:9", "#EXT-X-VERSION:6")));
}

#[test]
fn never_panics() {
    const MAX: &str = "18446744073709551615";
    let big = with(&playlist(0, 10, 2, 4, 6.0), "MEDIA-SEQUENCE:0", &format!("MEDIA-SEQUENCE:{MAX}"));
    check_media(&big);
    check_delta(&live(0, 10, 2), &big);
    check_update(&big, &live(0, 10, 2));
    check_media(&with(&big, "SKIPPED-SEGMENTS=4", &format!("SKIPPED-SEGMENTS={MAX}")));
    check_media(&with(
        &live(0, 5, 2),
        "#EXT-X-MAP",
        &format!("#EXT-X-DISCONTINUITY-SEQUENCE:{MAX}\n#EXT-X-MAP"),
    ));
    let report = with(&live(0, 5, 2), "LAST-MSN=5,LAST-PART=1", &format!("LAST-MSN={MAX},LAST-PART={MAX}"));
    check_rendition_reports(&report, &[("../b/index.m3u8", &live(0, 5, 2))], 2);
    let report = with(&live(0, 5, 2), "LAST-MSN=5,LAST-PART=1", &format!("LAST-MSN=4,LAST-PART={MAX}"));
    check_rendition_reports(&report, &[("../b/index.m3u8", &live(0, 5, 2))], 2);
    let range = format!(
        "#EXT-X-DATERANGE:ID=\"a\",START-DATE=\"0000-01-01T00:00:00Z\",DURATION={MAX}9,\
                         END-DATE=\"9999-12-31T23:59:60.999-23:59\"\n#EXT-X-MAP"
    );
    check_media(&with(BASE, "#EXT-X-MAP", &range));
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let texts = [BASE.to_string(), live(0, 5, 2), playlist(0, 10, 2, 4, 6.0), VOD.to_string()];
    let alphabet: Vec<char> = "#:,=\"@.-0123456789ABEXTPRWé\n\r ".chars().collect();
    for text in &texts {
        for cut in 0..text.len() {
            if text.is_char_boundary(cut) {
                check_media(&text[..cut]);
            }
        }
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut chars: Vec<char> = text.chars().collect();
            let at = (seed % chars.len() as u64) as usize;
            chars[at] = alphabet[(seed >> 32) as usize % alphabet.len()];
            let mutated: String = chars.into_iter().collect();
            check_media(&mutated);
            check_media_should(&mutated);
            check_update(text, &mutated);
            check_delta(text, &mutated);
            check_rendition_reports(&mutated, &[("../b/index.m3u8", text)], 2);
        }
    }
}

#[test]
fn updates() {
    none(check_update(&live(0, 5, 2), &live(0, 5, 3)));
    none(check_update(&live(0, 5, 3), &live(1, 6, 0)));
    none(check_update_should(&live(0, 5, 3), &live(1, 6, 0)));
    none(check_update(&live(0, 5, 0), &ended(&live(0, 5, 0))));
    none(check_update(VOD, VOD));
    one(check_update(&live(1, 6, 0), &live(0, 6, 0)), "6.2.2");
    let later = live(0, 5, 3);
    one(check_update(&live(0, 5, 2), &with(&later, "s1.m4s", "s1b.m4s")), "6.2.2");
    one(check_update(&live(0, 5, 2), &with(&later, "#EXTINF:2.00000,\ns1", "#EXTINF:1.99000,\ns1")), "6.2.1");
    one(check_update(&live(0, 5, 2), &with(&later, &pdt(1), "2026-01-01T00:00:02.001Z")), "6.2.1");
    one(check_update(&live(0, 5, 2), &with(&later, "s1.m4s", "#EXT-X-GAP\ns1.m4s")), "6.2.1");
    one(check_update(&live(0, 5, 2), &with(&later, "TARGETDURATION:2", "TARGETDURATION:3")), "6.2.1");
    one(check_update(&live(0, 5, 2), &with(&later, "PART-TARGET=0.5", "PART-TARGET=0.6")), "6.2.1");
    one(check_update(&live(0, 5, 2), &with(&later, "PART-HOLD-BACK=1.5", "PART-HOLD-BACK=2")), "6.2.1");
    one(check_update(&ended(&live(0, 5, 0)), &live(0, 5, 0)), "6.2.1");
    all(check_update(&ended(&live(0, 5, 0)), &ended(&live(0, 6, 0))), "4.4.3.4");
    let end = ended(&live(0, 5, 0));
    one(
        check_update(&end, &with(&end, "#EXT-X-ENDLIST", "#EXTINF:2.00000,\ns5.m4s\n#EXT-X-ENDLIST")),
        "4.4.3.4",
    );
    let part = "#EXT-X-PART:DURATION=0.50000,URI=\"p5.0.m4s\"\n#EXT-X-ENDLIST";
    one(check_update(&end, &with(&end, "#EXT-X-ENDLIST", part)), "4.4.3.4");
    one(check_update(VOD, &with(VOD, "#EXT-X-ENDLIST", "#EXTINF:1.0,\ns2.m4s\n#EXT-X-ENDLIST")), "6.2.1");
    // A segment leaves only from the start.
    one(check_update(&live(0, 5, 0), &with(&live(0, 5, 0), "#EXTINF:2.00000,\ns4.m4s\n", "")), "6.2.2");
    all(check_update(&live(0, 5, 2), &with(&live(0, 5, 2), "#EXTINF:2.00000,\ns4.m4s\n", "")), "6.2.2");
}

#[test]
fn updates_that_remove_segments() {
    let removal = |earlier: &str, later: &str| check_update(earlier, later);
    one(removal(&without(&live(0, 5, 2), &["MEDIA-SEQUENCE"]), &live(1, 6, 0)), "6.2.2");
    one(removal(&live(0, 3, 2), &live(1, 3, 3)), "6.2.2");
    let (earlier, later) = (disc(&live(0, 5, 2), 3, ""), disc(&live(1, 6, 0), 3, ""));
    one(removal(&earlier, &later), "6.2.2");
    let ds =
        |t: &str, n: u64| with(t, "#EXT-X-MAP", &format!("#EXT-X-DISCONTINUITY-SEQUENCE:{n}\n#EXT-X-MAP"));
    none(removal(&ds(&earlier, 0), &ds(&later, 0)));
    // Removing a segment with a discontinuity moves EXT-X-DISCONTINUITY-SEQUENCE on.
    let earlier = ds(&disc(&live(0, 5, 2), 1, ""), 0);
    one(removal(&earlier, &ds(&live(2, 6, 0), 0)), "6.2.2");
    none(removal(&earlier, &ds(&live(2, 6, 0), 1)));
    one(removal(&ds(&live(0, 5, 2), 1), &ds(&live(0, 5, 3), 0)), "6.2.2");
    let event = |t: &str| with(t, "#EXT-X-MAP", "#EXT-X-PLAYLIST-TYPE:EVENT\n#EXT-X-MAP");
    none(removal(&event(&live(0, 5, 2)), &event(&live(0, 5, 3))));
    one(removal(&event(&live(0, 5, 3)), &event(&live(1, 6, 0))), "6.2.2");
    one(removal(&live(0, 5, 2), &playlist(1, 6, 0, 1, 6.0)), "6.2.5.1");
}

#[test]
fn updates_of_parts() {
    let (earlier, later) = (live(0, 5, 2), live(0, 5, 3));
    one(check_update(&earlier, &without(&later, &["\"p4.0."])), "6.2.2");
    one(check_update(&earlier, &with(&later, "p2.3.m4s", "p2.3z.m4s")), "6.2.2");
    let edge = later
        .lines()
        .filter(|l| !l.starts_with("#EXT-X-PART:") || l.contains("\"p5.1") || l.contains("\"p5.2"));
    one(check_update(&earlier, &edge.map(|l| format!("{l}\n")).collect::<String>()), "6.2.1");
    one(check_update(&earlier, &with(&later, "0.50000,URI=\"p4.1", "0.40000,URI=\"p4.1")), "6.2.1");
    one(check_update(&earlier, &with(&later, "p5.2.m4s", "p5.2x.m4s")), "4.4.5.3");
    // A part under a new initialization section is announced by a TYPE=MAP hint (B.1).
    let new_map = disc(&live(0, 5, 1), 5, "#EXT-X-MAP:URI=\"init5.mp4\"\n");
    one(check_update(&live(0, 5, 0), &new_map), "B.1");
    let hinted = format!("{}#EXT-X-PRELOAD-HINT:TYPE=MAP,URI=\"init5.mp4\"\n", live(0, 5, 0));
    none(check_update(&hinted, &new_map));
    // Parts removed early, in order and off the segment being built: a SHOULD.
    let early = without(&later, &["\"p2.", "\"p3."]);
    none(check_update(&earlier, &early));
    one(check_update_should(&earlier, &early), "6.2.2");
}

#[test]
fn delta_updates() {
    let full = live(0, 10, 2);
    let delta = |skip: u64| playlist(0, 10, 2, skip, 6.0);
    none(check_delta(&full, &delta(4)));
    none(check_delta(&full, &delta(3)));
    none(check_delta_should(&full, &delta(4)));
    none(check_delta(&live(0, 10, 3), &delta(4)));
    none(check_delta(&live(0, 9, 3), &delta(4)));
    one(check_delta(&full, &delta(6)), "6.2.5.1");
    one(check_delta(&full, &delta(1)), "6.2.5.1");
    one(check_delta(&full, &full), "6.2.5.1");
    one(check_delta(&delta(4), &delta(4)), "6.2.5.1");
    let no_skip = |t: &str| with(t, ",CAN-SKIP-UNTIL=12", "");
    one(check_delta(&no_skip(&full), &no_skip(&delta(4))), "6.2.5.1");
    none(check_delta(&no_skip(&full), &no_skip(&full)));
    one(check_delta(&ended(&live(0, 10, 0)), &ended(&playlist(0, 10, 0, 4, 6.0))), "6.2.5.1");
    one(check_delta(&full, &with(&delta(4), "MEDIA-SEQUENCE:0", "MEDIA-SEQUENCE:1")), "4.4.5.2");
    one(check_delta(&full, &without(&delta(4), &[&pdt(6)])), "6.2.5.1");
    one(check_delta(&full, &without(&delta(4), &["#EXT-X-MAP"])), "6.2.5.1");
    one(check_delta(&full, &with(&delta(4), "PART-TARGET=0.5", "PART-TARGET=0.6")), "6.2.5.1");
    one(check_delta(&full, &with(&delta(4), "p10.2.m4s", "p10.3.m4s")), "6.2.5.1");
    one(check_delta(&full, &with(&delta(4), "LAST-PART=1", "LAST-PART=0")), "6.2.5.1");
    one(check_delta(&full, &without(&delta(4), &["\"p8.1."])), "6.2.5.1");
    let ds = with(&delta(4), "#EXT-X-SKIP", "#EXT-X-DISCONTINUITY-SEQUENCE:1\n#EXT-X-SKIP");
    one(check_delta(&full, &ds), "4.4.5.2");
    let range = |t: &str| {
        with(t, "#EXT-X-MAP", "#EXT-X-DATERANGE:ID=\"d\",START-DATE=\"2026-01-01T00:00:30.000Z\"\n#EXT-X-MAP")
    };
    none(check_delta(&range(&full), &range(&delta(4))));
    one(check_delta(&range(&full), &delta(4)), "6.2.5.1");
    let v2 = |t: &str| with(t, "CAN-SKIP-UNTIL=12", "CAN-SKIP-UNTIL=12,CAN-SKIP-DATERANGES=YES");
    let removed = with(&v2(&delta(4)), "=4\n", "=4,RECENTLY-REMOVED-DATERANGES=\"\"\n")
        .replace("VERSION:9", "VERSION:10");
    none(check_delta(&v2(&full), &removed));
    one(check_delta_should(&v2(&full), &removed), "6.2.5.1");
}

#[test]
fn rendition_reports() {
    let own = live(0, 5, 2);
    let b = "../b/index.m3u8";
    let rr = |own: &str, other: &str, tolerance| check_rendition_reports(own, &[(b, other)], tolerance);
    none(rr(&own, &own, 0));
    none(rr(&own, &live(0, 5, 3), 1));
    one(rr(&own, &live(0, 5, 3), 0), "4.4.5.4");
    one(rr(&own, &live(0, 7, 1), 2), "4.4.5.4");
    none(rr(&own, &live(0, 5, 0), 2));
    one(rr(&own, &live(0, 5, 0), 1), "4.4.5.4");
    one(rr(&own, "", 0), "4.4.5.4");
    let lone = format!("#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXT-X-RENDITION-REPORT:URI=\"{b}\"\n");
    one(rr(&lone, &own, 0), "4.4.5.4");
    let extra = format!("{own}#EXT-X-RENDITION-REPORT:URI=\"../x/index.m3u8\",LAST-MSN=5,LAST-PART=1\n");
    one(rr(&extra, &own, 0), "4.4.5.4");
    one(check_rendition_reports(&own, &[(b, &own), ("../c/index.m3u8", &own)], 0), "B.1");
    let twice = format!("{own}#EXT-X-RENDITION-REPORT:URI=\"{b}\",LAST-MSN=5,LAST-PART=1\n");
    one(rr(&twice, &own, 0), "B.1");
    one(rr(&with(&own, "LAST-MSN=5,LAST-PART=1", "LAST-MSN=4,LAST-PART=6"), &own, 9), "4.4.5.4");
    none(rr(&with(&own, "LAST-MSN=5,", ""), &own, 0));
    none(rr(&with(&own, ",LAST-MSN=5,LAST-PART=1", ""), &own, 0));
    // Renditions without parts: LAST-PART is required of reports on ones with parts, and
    // wrong on ones without.
    let plain = |last: u64, report: &str| {
        let segments: String = (0..=last).map(|m| format!("#EXTINF:2.00000,\ns{m}.m4s\n")).collect();
        format!("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n{segments}{report}")
    };
    one(rr(&plain(4, &format!("#EXT-X-RENDITION-REPORT:URI=\"{b}\",LAST-MSN=5\n")), &own, 9), "4.4.5.4");
    one(rr(&with(&own, "LAST-MSN=5,LAST-PART=1", "LAST-MSN=4,LAST-PART=3"), &plain(4, ""), 9), "4.4.5.4");
    let on_plain = plain(4, &format!("#EXT-X-RENDITION-REPORT:URI=\"{b}\",LAST-MSN=4\n"));
    none(rr(&on_plain, &plain(5, ""), 1));
    one(rr(&on_plain, &plain(5, ""), 0), "4.4.5.4");
}
