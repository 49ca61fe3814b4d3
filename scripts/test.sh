#!/usr/bin/env bash
# Runs the whole test suite on this machine: installs what is missing, makes sure the test
# Postgres is up, then formatting, lints and every test (SQLite, Postgres, media, HTTP), then the
# contract of the OpenAPI document against the built binary (scripts/contract.sh).
# Stops at the first stage that fails. This is what CI runs (.ci/run).
#
# `scripts/test.sh --fast` runs only the fast tier: the tests that need nothing but the crate
# (unit tests, the OpenAPI document and contract-check tests, the CLI, the layers of src/), none
# of the services or media tools the slow tier (tests/api: Postgres, moto, ffmpeg, GStreamer,
# Chromium) needs.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# rustup installs into ~/.cargo/bin, which a non-login shell may not have on PATH.
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
    PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi

stage() {
    echo
    echo "==> $* ($(date +%H:%M:%S))"
}

if [ "${1:-}" = "--fast" ]; then
    stage "fast tier: cargo test --lib --test openapi --test cli --test layers"
    cargo test --locked --lib --test openapi --test cli --test layers
    stage "fast tier passed"
    exit 0
elif [ $# -gt 0 ]; then
    echo "usage: scripts/test.sh [--fast]" >&2
    exit 2
fi

stage "dependencies: scripts/deps.sh test"
bash scripts/deps.sh test

stage "postgres: scripts/pg.sh"
bash scripts/pg.sh
export SLUICE_TEST_POSTGRES_URL="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"

# rustfmt and clippy are rustup components; a minimal profile leaves them out.
for component in rustfmt clippy; do
    tool="${component/rustfmt/fmt}"
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        if command -v rustup >/dev/null 2>&1; then
            rustup component add "$component"
        else
            echo "test.sh: cargo $tool is missing; install the rustup component $component" >&2
            exit 1
        fi
    fi
done

stage "s3: scripts/moto.sh (an S3-compatible server for the S3 storage tests)"
bash scripts/moto.sh

stage "player: npm ci --prefix tests/player (hls.js for the playback tests)"
npm ci --prefix tests/player --no-audit --no-fund

stage "console: scripts/console.sh (npm ci, generate the client, type-check, vite build)"
bash scripts/console.sh

stage "format: cargo fmt --all -- --check"
cargo fmt --all -- --check

stage "lint: cargo clippy --all-targets --locked -- -D warnings"
cargo clippy --all-targets --locked -- -D warnings

stage "tests: cargo test --locked (Postgres at ${SLUICE_TEST_POSTGRES_URL##*@})"
# Without backtraces a failing test's summary is its panic message and location, which is what a
# log cut to its last lines must still show; SLUICE_TEST_BACKTRACE=1 brings them back.
RUST_BACKTRACE="${SLUICE_TEST_BACKTRACE:-0}" cargo test --locked

# The binary cargo test has just built, driven through the OpenAPI document: generated Python
# and TypeScript clients running their programs, and schemathesis over every operation.
stage "contract: scripts/contract.sh (generated SDKs and schemathesis against target/debug/sluice)"
bash scripts/contract.sh

stage "all stages passed"
