#!/usr/bin/env bash
# The one place for every ffmpeg recipe of the tests and benches (media-fixtures/README.md).
#
#   make.sh clip NAME...          makes each clip NAME into the cache (once) and prints its path
#   make.sh push URL VIDEO GOP [OUTPUT OPTION...]
#                                 a publisher: encodes a generated source in real time to URL
#                                 (VIDEO a lavfi source, or painted=WxH:R for painted frames)
#                                 (FLV for RTMP; PUSH_FORMAT=mpegts for SRT)
#   make.sh loop FILE URL         a publisher of a file: FILE in real time, looping, not re-encoded
#   make.sh once FILE URL         FILE once, in real time, not re-encoded (then the push ends)
#   make.sh rush FILE URL         the same without -re (a common mistake): FILE looping, sent as
#                                 fast as the server reads it
#   make.sh check [NAME...]       makes the clips twice, in two fresh caches, and fails unless
#                                 both runs give the same bytes (default: the small test clips)
#
# Clip names carry their parameters, so a test asks for exactly what it uses:
#   vod-SRC-WxH-Rfps-Ss.mp4       lavfi SRC (testsrc, testsrc2) W×H at R fps, 440 Hz tone, S s:
#                                 H.264 (ultrafast, keyframe every 30 frames) + AAC 96k, moov last
#   vod-audio-Ss.mp4              the tone alone, AAC 96k
#   vod-frames-WxH-Rfps-Ss.mp4    each frame's number painted as 12 bars (PAINTED below), 440 Hz
#                                 tone, S s: H.264 (ultrafast, keyframe every 30 frames) + AAC 96k
#   audio-aac-Bk-Ss.mp4           the tone alone, AAC at B kbit/s, S s
#   ingest-720p30-2500k-Ss.flv    720p30 H.264 2.4 Mbit/s (veryfast, keyframe every 2 s) + AAC 96k
#   ladder-1080p30-8000k-Ss.mp4   1080p30 H.264 8 Mbit/s (veryfast, keyframe every 2 s) + AAC 128k
#
# Clips are deterministic: lavfi sources, fixed encoder settings, one encoder thread, bitexact
# muxing and no metadata, so the same ffmpeg makes the same bytes on any machine (`check`).
# The cache is SLUICE_FIXTURES_DIR, by default target/media-fixtures; a clip is written to a
# temporary name and renamed, so concurrent makers never expose half a file.
# `push` and `loop` exec ffmpeg: the caller's child process is ffmpeg itself, and killing it
# stops the push.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${SLUICE_FIXTURES_DIR:-$here/../target/media-fixtures}"

# Frame number N painted in binary: 12 vertical bars, bar b (from the left) light when bit b of
# N is set. The tests read it back off a decoded picture (tests/support/media.rs, `painted`).
painted() { echo "color=c=black:size=$1:rate=$2,format=gray,geq=lum='if(bitand(N\,pow(2\,floor(X*12/W)))\,235\,16)',format=yuv420p"; }

# Output options every clip shares: reproducible bytes (x264 with several threads and a bitrate
# target does not give the same bytes twice, so one thread).
bitexact=(-fflags +bitexact -flags:v +bitexact -flags:a +bitexact -map_metadata -1 -threads 1)
tone=(-f lavfi -i "sine=frequency=440:sample_rate=48000")

die() {
    echo "make.sh: $*" >&2
    exit 2
}

# recipe NAME OUT: the ffmpeg command that makes clip NAME into OUT.
recipe() {
    local name="$1" out="$2"
    local re_vod='^vod-(testsrc2?)-([0-9]+x[0-9]+)-([0-9]+)fps-([0-9]+)s\.mp4$'
    local re_audio='^vod-audio-([0-9]+)s\.mp4$'
    local re_frames='^vod-frames-([0-9]+x[0-9]+)-([0-9]+)fps-([0-9]+)s\.mp4$'
    local re_aac='^audio-aac-([0-9]+)k-([0-9]+)s\.mp4$'
    local re_ingest='^ingest-720p30-2500k-([0-9]+)s\.flv$'
    local re_ladder='^ladder-1080p30-8000k-([0-9]+)s\.mp4$'
    local ff=(ffmpeg -nostdin -loglevel error -y)
    if [[ $name =~ $re_vod ]]; then
        local src="${BASH_REMATCH[1]}=size=${BASH_REMATCH[2]}:rate=${BASH_REMATCH[3]}"
        "${ff[@]}" -f lavfi -i "$src" "${tone[@]}" \
            -c:v libx264 -preset ultrafast -pix_fmt yuv420p -g 30 \
            -c:a aac -b:a 96k -t "${BASH_REMATCH[4]}" "${bitexact[@]}" -f mp4 "$out"
    elif [[ $name =~ $re_frames ]]; then
        "${ff[@]}" -f lavfi -i "$(painted "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")" "${tone[@]}" \
            -c:v libx264 -preset ultrafast -pix_fmt yuv420p -g 30 \
            -c:a aac -b:a 96k -t "${BASH_REMATCH[3]}" "${bitexact[@]}" -f mp4 "$out"
    elif [[ $name =~ $re_audio ]]; then
        "${ff[@]}" "${tone[@]}" -c:a aac -b:a 96k -t "${BASH_REMATCH[1]}" "${bitexact[@]}" -f mp4 "$out"
    elif [[ $name =~ $re_aac ]]; then
        "${ff[@]}" "${tone[@]}" -c:a aac -b:a "${BASH_REMATCH[1]}k" -t "${BASH_REMATCH[2]}" "${bitexact[@]}" -f mp4 "$out"
    elif [[ $name =~ $re_ingest ]]; then
        "${ff[@]}" -f lavfi -i "testsrc2=size=1280x720:rate=30" "${tone[@]}" -t "${BASH_REMATCH[1]}" \
            -c:v libx264 -preset veryfast -b:v 2400k -maxrate 2400k -bufsize 4800k -pix_fmt yuv420p \
            -g 60 -c:a aac -b:a 96k "${bitexact[@]}" -f flv "$out"
    elif [[ $name =~ $re_ladder ]]; then
        "${ff[@]}" -f lavfi -i "testsrc2=size=1920x1080:rate=30" "${tone[@]}" -t "${BASH_REMATCH[1]}" \
            -c:v libx264 -preset veryfast -b:v 8000k -pix_fmt yuv420p -g 60 \
            -c:a aac -b:a 128k "${bitexact[@]}" -f mp4 "$out"
    else
        die "no recipe makes '$name' (see the names at the top of media-fixtures/make.sh)"
    fi
}

# clip DIR NAME: makes NAME in DIR unless it is there; prints its path.
clip() {
    local dir="$1" name="$2"
    mkdir -p "$dir"
    if [[ ! -s "$dir/$name" ]]; then
        local tmp="$dir/.$name.$$.tmp"
        recipe "$name" "$tmp" || { rm -f "$tmp"; die "ffmpeg failed making $name"; }
        mv -f "$tmp" "$dir/$name"
    fi
    echo "$dir/$name"
}

cmd="${1:-}"
shift || true
case "$cmd" in
    clip)
        [[ $# -gt 0 ]] || die "clip needs a NAME"
        for name in "$@"; do clip "$cache" "$name"; done
        ;;
    push)
        [[ $# -ge 3 ]] || die "push needs URL VIDEO GOP"
        url="$1" video="$2" gop="$3"
        # VIDEO `painted=WxH:R`: the frame numbers painted, as the vod-frames clips.
        if [[ $video =~ ^painted=([0-9]+x[0-9]+):([0-9]+)$ ]]; then
            video="$(painted "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")"
        fi
        shift 3
        # Exactly the publisher the tests always had (stdin is theirs: null in the tests).
        exec ffmpeg -loglevel error -re -f lavfi -i "$video" \
            -f lavfi -i "sine=frequency=440:sample_rate=44100" \
            -c:v libx264 -preset ultrafast -tune zerolatency -pix_fmt yuv420p \
            -g "$gop" -c:a aac "$@" -t 300 -f "${PUSH_FORMAT:-flv}" "$url"
        ;;
    loop)
        [[ $# -eq 2 ]] || die "loop needs FILE URL"
        # SRT carries MPEG-TS; RTMP, FLV.
        format=flv
        [[ $2 == srt://* ]] && format=mpegts
        exec ffmpeg -nostdin -loglevel quiet -re -stream_loop -1 -i "$1" -c copy -f "$format" "$2"
        ;;
    once)
        [[ $# -eq 2 ]] || die "once needs FILE URL"
        exec ffmpeg -nostdin -loglevel quiet -re -i "$1" -c copy -f flv "$2"
        ;;
    rush)
        [[ $# -eq 2 ]] || die "rush needs FILE URL"
        exec ffmpeg -nostdin -loglevel quiet -stream_loop -1 -i "$1" -c copy -f flv "$2"
        ;;
    check)
        [[ $# -gt 0 ]] || set -- vod-testsrc2-320x240-30fps-4s.mp4 vod-testsrc-640x360-25fps-2s.mp4 \
            vod-audio-3s.mp4 ingest-720p30-2500k-2s.flv
        a="$(mktemp -d)" b="$(mktemp -d)"
        trap 'rm -rf "$a" "$b"' EXIT
        status=0
        for name in "$@"; do
            one="$(sha256sum "$(clip "$a" "$name")" | cut -d' ' -f1)"
            two="$(sha256sum "$(clip "$b" "$name")" | cut -d' ' -f1)"
            if [[ $one == "$two" ]]; then
                echo "same bytes: $name $one"
            else
                echo "DIFFERENT: $name $one $two" >&2
                status=1
            fi
        done
        exit "$status"
        ;;
    *)
        die "usage: make.sh clip NAME... | push URL VIDEO GOP [OPTION...] | loop FILE URL | rush FILE URL | check [NAME...]"
        ;;
esac
