#!/usr/bin/env bash
# Generates the TypeScript client of Sluice from openapi/openapi.json with @hey-api/openapi-ts
# (settings in openapi-ts.config.js) into ./client (not committed), then type-checks it with the
# program under `strict` (tsconfig.json) and compiles both to ./dist. Fails if the generator
# prints any warning or the compiler any diagnostic.
#
#   npm ci && bash generate.sh && node dist/demo.js --help
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

status=0
output="$(NO_COLOR=1 FORCE_COLOR=0 node node_modules/@hey-api/openapi-ts/bin/run.js 2>&1)" || status=$?
# Without colours in a pipe anyway; strip what is left so the checks below read plain text.
output="$(printf '%s\n' "$output" | sed -E 's/\x1b\[[0-9;]*m//g')"
printf '%s\n' "$output"
# Anything but its progress lines (version, inputs, "Done") is a warning or an error.
unexpected="$(printf '%s\n' "$output" | grep -v -E '^(@hey-api/openapi-ts v[0-9.]+|\[Job [0-9]+\] (⏳ Generating from [0-9]+ inputs?:|  \[[0-9]+\] .*|✅ Done! Your output is in .*))?$' || true)"
if [ "$status" -ne 0 ] || [ -n "$unexpected" ]; then
    echo "generate.sh: @hey-api/openapi-ts did not generate cleanly (exit $status)" >&2
    exit 1
fi

rm -rf dist
node node_modules/typescript/bin/tsc -p tsconfig.json
echo "generate.sh: TypeScript client written to $here/client, type-checked (strict) and compiled to $here/dist"
