#!/usr/bin/env bash
# Generates the Python client of Sluice from openapi/openapi.json with openapi-python-client into
# ./sluice_client (not committed). Fails if the generator prints any warning: a warning means a
# part of the API is missing from the client.
#
#   python3 -m venv .venv && .venv/bin/pip install -r requirements.txt
#   PATH="$PWD/.venv/bin:$PATH" bash generate.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
document="${1:-$here/../../../openapi/openapi.json}"

# --fail-on-warning makes it exit non-zero on the warnings it classifies; the output is checked
# too, for any other line that is not the one progress line.
status=0
output="$(openapi-python-client generate --path "$document" --output-path "$here/sluice_client" \
    --meta none --overwrite --fail-on-warning --config "$here/generator.yaml" 2>&1)" || status=$?
printf '%s\n' "$output"
unexpected="$(printf '%s\n' "$output" | grep -v -E '^(Generating .*)?$' || true)"
if [ "$status" -ne 0 ] || [ -n "$unexpected" ]; then
    echo "generate.sh: openapi-python-client did not generate cleanly (exit $status)" >&2
    exit 1
fi
echo "generate.sh: Python client written to $here/sluice_client"
