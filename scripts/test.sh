#!/usr/bin/env bash
# Runs the whole test suite on this machine: installs what is missing, makes sure the test
# Postgres is up, then formatting, lints and every test (SQLite, Postgres, media, HTTP), then the
# contract of the OpenAPI document against the built binary (scripts/contract.sh).
# Stops at the first stage that fails.
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

stage "format: cargo fmt --all -- --check"
cargo fmt --all -- --check

stage "lint: cargo clippy --all-targets --locked -- -D warnings"
cargo clippy --all-targets --locked -- -D warnings

stage "tests: cargo test --locked (Postgres at ${SLUICE_TEST_POSTGRES_URL##*@})"
cargo test --locked

# The binary cargo test has just built, driven through the OpenAPI document: generated Python
# and TypeScript clients running their programs, and schemathesis over every operation.
stage "contract: scripts/contract.sh (generated SDKs and schemathesis against target/debug/sluice)"
bash scripts/contract.sh

stage "all stages passed"
