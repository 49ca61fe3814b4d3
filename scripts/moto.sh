#!/usr/bin/env bash
# Installs moto's S3-compatible server (from PyPI, pinned) into target/moto, for the tests of the
# S3 storage path (tests/api/vod_s3.rs). Idempotent: an existing install is kept.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=target/moto
if [ -x "$venv/bin/moto_server" ]; then
    echo "moto.sh: moto_server present in $venv"
    exit 0
fi
mkdir -p target
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check 'moto[server]==5.2.5'
echo "moto.sh: installed moto_server into $venv"
