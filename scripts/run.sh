#!/usr/bin/env bash
# Runs Sluice on this machine with the embedded defaults (SQLite and files in ./data, HTTP on
# 127.0.0.1:8080): installs what is missing, builds, creates a `demo` project on the first run
# and serves. Arguments are passed to `sluice serve` (e.g. --http-addr 0.0.0.0:8080).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# rustup installs into ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

bash scripts/deps.sh build
bash scripts/console.sh
cargo build --release --locked

sluice=./target/release/sluice
data_dir="${SLUICE_DATA_DIR:-./data}"
marker="$data_dir/.bootstrapped"

if [ ! -e "$marker" ]; then
    mkdir -p "$data_dir"
    # The output holds the admin password and a `*` API key. It is printed once and kept
    # nowhere else: the database stores only hashes.
    if out="$("$sluice" admin bootstrap --project demo 2>&1)"; then
        echo
        echo "First run: created the demo project. Note these now; they are not shown again."
        echo "$out"
        echo
        touch "$marker"
    elif [[ "$out" == *"exists already"* ]]; then
        echo "The demo project exists already (its credentials were shown when it was created)."
        touch "$marker"
    else
        echo "$out" >&2
        exit 1
    fi
else
    echo "The demo project exists; its credentials were shown at the first run."
    echo "New API key: $sluice admin create-key --project demo"
fi

cat <<'EOT'
To go live: create a stream (POST /v1/projects/demo/streams {"name":"cam"}); its answer says
where to push. OBS, Settings -> Stream -> Service: Custom...
  RTMP or RTMPS: Server = obs.server, Stream Key = obs.streamKey,
                 Use authentication: pushUsername / pushPassword
  SRT:           Server = srtUrl (the whole URL), Stream Key = (empty)
ffmpeg: -f flv "<ingestUrl>", or -f mpegts "<srtUrl>". Playback: playbackUrls.hls.
EOT
echo "Starting sluice serve: open the console at http://127.0.0.1:8080/ and sign in with the e-mail and"
echo "password printed at the first run (API docs at /docs). Ctrl-C stops."
exec "$sluice" serve "$@"
