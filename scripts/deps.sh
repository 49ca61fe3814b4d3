#!/usr/bin/env bash
# The one list of Debian 12 packages Sluice needs. Used by scripts/run.sh, scripts/test.sh,
# .ci/run and the Dockerfile, so the product and its tests never disagree on what is installed.
#
#   scripts/deps.sh runtime   what the `sluice` binary needs at run time
#   scripts/deps.sh build     runtime + compiling (default; scripts/run.sh, the Dockerfile)
#   scripts/deps.sh test      build + the test tools (scripts/test.sh, .ci/run)
#   scripts/deps.sh bench     test + the benchmark tools (wrk, nginx's stream module)
#
# Idempotent: packages already installed are found with dpkg-query and skipped; apt-get runs
# only when something is missing. A Rust toolchain is not a Debian package here (Debian 12 ships
# rustc 1.63, older than the crate's rust-version), so every mode but runtime only checks that
# one exists.
set -euo pipefail

mode="${1:-build}"

runtime_packages=(
    ca-certificates
    libgstreamer1.0-0
    gstreamer1.0-plugins-base
    gstreamer1.0-plugins-good
    gstreamer1.0-plugins-bad
    gstreamer1.0-plugins-ugly
    gstreamer1.0-libav
    gstreamer1.0-nice
    # The pango plugin (textoverlay) and a font draw the slate's card (media::ingest::slate).
    gstreamer1.0-x
    fonts-dejavu-core
    gstreamer1.0-tools
    libgstrtspserver-1.0-0
    libsrt1.5-gnutls
    libswscale6
    # GIO's TLS (rtmp2sink's RTMPS to simulcast targets verifies against the system's CAs).
    glib-networking
)

build_packages=(
    pkg-config
    build-essential
    libgstreamer1.0-dev
    libgstreamer-plugins-base1.0-dev
    libgstreamer-plugins-bad1.0-dev
    libgstrtspserver-1.0-dev
    libsrt-gnutls-dev
    # The ladder's scaler (src/media/gst/scale.rs) links FFmpeg's libswscale.
    libswscale-dev
    libssl-dev
    curl
    nodejs
)

# Media tests push real streams with ffmpeg (and GStreamer's gst-launch-1.0, a runtime package);
# the Postgres tests need a server and psql; the webhook guide's receiver runs on python3;
# playback tests play in headless Chromium with hls.js, installed by npm (tests/player), and the
# console's tests drive Chromium through chromium-driver (WebDriver); the S3
# tests run moto's server from a Python venv (scripts/moto.sh); the TLS tests make self-signed
# certificates with openssl; the plain HLS players of tests/players.rs are ffmpeg, GStreamer's
# playbin3 (gstreamer1.0-tools, a runtime package) and VLC (vlc-bin, vlc-plugin-base); the
# simulcast tests send to nginx's rtmp module (on a systemd host, installing nginx starts a web
# server on port 80; `systemctl disable --now nginx` stops it).
test_packages=(
    ffmpeg
    vlc-bin
    vlc-plugin-base
    postgresql
    postgresql-client
    python3
    python3-venv
    chromium
    chromium-driver
    openssl
    nginx
    libnginx-mod-rtmp
)

# The benchmarks drive load with wrk and compare RTMP ingest with nginx's rtmp module (a test
# package) and balance nodes with its stream module.
bench_packages=(
    wrk
    libnginx-mod-stream
)

min_rust="1.83"

case "$mode" in
    runtime) wanted=("${runtime_packages[@]}") ;;
    build) wanted=("${runtime_packages[@]}" "${build_packages[@]}") ;;
    test) wanted=("${runtime_packages[@]}" "${build_packages[@]}" "${test_packages[@]}") ;;
    bench) wanted=("${runtime_packages[@]}" "${build_packages[@]}" "${test_packages[@]}" "${bench_packages[@]}") ;;
    *)
        echo "usage: $0 [runtime|build|test|bench]" >&2
        exit 2
        ;;
esac

# rustup installs into ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

# Checked before apt so a machine without Rust fails in a second, not after the downloads.
check_cargo() {
    local version
    if ! command -v cargo >/dev/null 2>&1; then
        echo "deps.sh: cargo not found. A Rust toolchain >= $min_rust, installed with rustup, is required" >&2
        echo "  This script cannot install it. Then re-run." >&2
        exit 1
    fi
    version="$(cargo --version | awk '{print $2}')"
    if ! printf '%s\n%s\n' "$min_rust" "${version%%-*}" | sort -V -C; then
        echo "deps.sh: cargo $version is too old; a Rust toolchain >= $min_rust from rustup is" >&2
        echo "  required (rustup update stable). This script cannot install it." >&2
        exit 1
    fi
}

if [ "$mode" != runtime ]; then
    check_cargo
fi

missing=()
for pkg in "${wanted[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)"
    if [ "$status" != "install ok installed" ]; then
        missing+=("$pkg")
    fi
done

# Debian's nodejs comes without npm (a package of its own); NodeSource's carries it. The console
# is built with npm (scripts/console.sh) wherever Sluice is built.
if [ "$mode" != runtime ]; then
    if ! command -v npm >/dev/null 2>&1; then
        missing+=(npm)
    fi
fi

if [ "${#missing[@]}" -eq 0 ]; then
    echo "deps.sh ($mode): all ${#wanted[@]} packages present; nothing installed"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "deps.sh: missing packages: ${missing[*]}" >&2
    echo "  Run this script as root, or install sudo, to let it install them with apt-get." >&2
    exit 1
fi

echo "deps.sh ($mode): installing ${missing[*]}"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "deps.sh ($mode): installed ${#missing[@]} of ${#wanted[@]} packages: ${missing[*]}"
