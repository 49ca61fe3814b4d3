#!/usr/bin/env bash
# Builds the console (console/: npm ci from its lockfile, then its build: the API client generated
# from openapi/openapi.json, a strict type-check, vite) into console/dist, which the next
# `cargo build` embeds in the binary (build.rs). scripts/run.sh and scripts/test.sh run it first.
# A binary built without it still works; it answers `/` with how to build the console.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../console"

npm ci --no-audit --no-fund
npm run build
