#!/usr/bin/env bash
# The contract of openapi/openapi.json, exercised against the real binary (issue 14):
#   0. validates the document (openapi-spec-validator) and checks that the binary serves it;
#   1. generates a Python client (openapi-python-client) and a TypeScript client
#      (@hey-api/openapi-ts) from the document, failing on any generator warning, and type-checks
#      the TypeScript program under `strict`;
#   2. starts `sluice serve` (development mode, free ports, a temporary data dir) and runs the two
#      programs of examples/sdk/ against it: streams, list filters, a signed webhook delivery to a
#      receiver of their own, a VOD uploaded and transcoded to `complete`;
#   3. runs schemathesis over every operation, all checks and phases (coverage, fuzzing,
#      stateful), with a `*` key and the project bound to the real one, then once more with a
#      session for the operations only a signed-in user may call. Any failed check or warning
#      fails the stage, and so does an error or a panic in the server's log.
# The server is always stopped. Tools go to target/contract (Python venvs from pinned
# requirements) and examples/sdk/typescript/node_modules (npm ci); logs and schemathesis reports
# to target/contract/logs.
#
#   bash scripts/contract.sh                 # uses target/debug/sluice
#   SLUICE_BIN=path/to/sluice bash scripts/contract.sh
#
# SLUICE_SDK_MEDIA: a short video file to upload instead of the clip made with ffmpeg (by default
# the smallest playable *.mp4 of media-fixtures/ when that folder exists).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

sluice="${SLUICE_BIN:-target/debug/sluice}"
work="$root/target/contract"
logs="$work/logs"
sdk="$root/examples/sdk"
contract="$root/scripts/contract"

timings=()
stage_name=""
stage_start=0
stage() {
    finish_stage
    stage_name="$*"
    stage_start=$SECONDS
    echo
    echo "==> contract: $* ($(date +%H:%M:%S))"
}
finish_stage() {
    if [ -n "$stage_name" ]; then
        timings+=("$(printf '%4ss  %s' "$((SECONDS - stage_start))" "$stage_name")")
    fi
    stage_name=""
}

for tool in python3 node ffmpeg curl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "contract.sh: $tool not found (bash scripts/deps.sh test installs it)" >&2
        exit 1
    fi
done
if [ ! -x "$sluice" ]; then
    echo "contract.sh: $sluice not found; build it first (cargo build) or set SLUICE_BIN" >&2
    exit 1
fi
sluice="$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")"
mkdir -p "$work" "$logs"
rm -f "$logs"/*.log "$logs"/*.xml "$logs"/*.ndjson

# A venv per tool set, rebuilt when its pinned requirements change.
venv() {
    local dir="$1" requirements="$2" stamp
    stamp="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.requirements" 2>/dev/null)" = "$stamp" ]; then
        echo "$dir: up to date"
        return
    fi
    rm -rf "$dir"
    python3 -m venv "$dir"
    "$dir/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements"
    echo "$stamp" >"$dir/.requirements"
    echo "$dir: installed from $requirements"
}

stage "tools: Python venvs (pinned) and npm ci"
venv "$work/sdk-venv" "$sdk/python/requirements.txt"
venv "$work/st-venv" "$contract/requirements.txt"
npm ci --prefix "$sdk/typescript" --no-audit --no-fund --loglevel=error

stage "document: openapi-spec-validator, and the binary serves the committed document"
"$work/st-venv/bin/openapi-spec-validator" openapi/openapi.json
"$sluice" openapi >"$work/served-openapi.json"
cmp -s "$work/served-openapi.json" openapi/openapi.json || {
    echo "contract.sh: \`$sluice openapi\` differs from openapi/openapi.json (refresh it, or rebuild)" >&2
    exit 1
}

stage "generate: Python client (openapi-python-client), no warning allowed"
PATH="$work/sdk-venv/bin:$PATH" bash "$sdk/python/generate.sh"

stage "generate: TypeScript client (@hey-api/openapi-ts), no warning allowed; tsc --strict"
bash "$sdk/typescript/generate.sh"

stage "server: sluice serve on free ports, temporary data dir"
run="$(mktemp -d "${TMPDIR:-/tmp}/sluice-contract.XXXXXX")"
server_pid=""
cleanup() {
    local status=$?
    if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
        kill "$server_pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$server_pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$run"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r http_port rtmp_port rtsp_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
')
export SLUICE_DATA_DIR="$run/data"
boot="$("$sluice" admin bootstrap --project demo --json)"
SLUICE_KEY="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["apiKey"]["key"])' <<<"$boot")"
admin_email="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["user"]["email"])' <<<"$boot")"
admin_password="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["user"]["password"])' <<<"$boot")"
export SLUICE_KEY SLUICE_PROJECT=demo SLUICE_URL="http://127.0.0.1:$http_port"
# The operator's bearer of /v1/admin/* (the server reads it from the environment).
SLUICE_ADMIN_TOKEN="contract-operator-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
export SLUICE_ADMIN_TOKEN

# Development mode: the programs' webhook receivers listen on loopback. The per-key and failed-auth
# limits are raised so that the fuzzer meets the handlers rather than 429 (which is documented,
# and would pass, but test nothing).
"$sluice" serve \
    --http-addr "127.0.0.1:$http_port" --rtmp-addr "127.0.0.1:$rtmp_port" --rtsp-addr "127.0.0.1:$rtsp_port" \
    --mode development --rate-limit-per-key 100000 --rate-limit-burst 100000 --auth-failures-per-min 100000 \
    >"$logs/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 300); do
    if curl -fsS -o /dev/null "$SLUICE_URL/readyz" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "contract.sh: sluice serve exited; the end of its log:" >&2
        tail -n 30 "$logs/server.log" >&2
        exit 1
    fi
    sleep 0.2
done
curl -fsS -o /dev/null "$SLUICE_URL/readyz"
echo "sluice serve (pid $server_pid) ready at $SLUICE_URL"

media="${SLUICE_SDK_MEDIA:-}"
if [ -z "$media" ] && [ -d media-fixtures ]; then
    # The smallest clip of the fixtures that ffprobe finds a video and an audio stream in,
    # leaving out the ones made to be refused.
    while IFS= read -r candidate; do
        case "$(basename "$candidate")" in *trunc* | *broken* | *bad* | *corrupt* | *invalid* | *audio*) continue ;; esac
        if [ "$(ffprobe -v error -show_entries stream=codec_type -of csv=p=0 "$candidate" 2>/dev/null | sort -u | tr '\n' ' ')" = "audio video " ]; then
            media="$candidate"
            break
        fi
    done < <(find media-fixtures -maxdepth 2 -name '*.mp4' -size -20M -printf '%s %p\n' | sort -n | cut -d' ' -f2-)
fi
if [ -z "$media" ]; then
    media="$run/clip.mp4"
    ffmpeg -hide_banner -loglevel error -nostdin -y \
        -f lavfi -i testsrc=size=640x360:rate=25:duration=2 -f lavfi -i sine=frequency=440:duration=2 \
        -c:v libx264 -preset ultrafast -pix_fmt yuv420p -c:a aac -shortest -movflags +faststart "$media"
fi
echo "media to upload: $media"

stage "python: examples/sdk/python/demo.py against the server"
(cd "$sdk/python" && "$work/sdk-venv/bin/python" demo.py --media "$media")

stage "typescript: examples/sdk/typescript (node dist/demo.js) against the server"
(cd "$sdk/typescript" && node dist/demo.js --media "$media")

stage "schemathesis: seed resources, then every operation with the * key"
python3 "$contract/seed.py" "$SLUICE_URL" "$SLUICE_PROJECT" "$SLUICE_KEY" "$admin_email" "$admin_password" "$media" \
    >"$run/seed.env"
# shellcheck disable=SC1091
source "$run/seed.env"
export SEED_STREAM SEED_TARGET_STREAM SEED_TARGET SEED_VOD SEED_VOD_COMPLETE SEED_WEBHOOK SEED_DELIVERY SEED_MEMBER SLUICE_KEY_ID SLUICE_SESSION SLUICE_REFRESH
export SCHEMATHESIS_HOOKS="$contract/hooks.py"
session_only=(me listProjects createProject changePassword)
schemathesis() {
    local name="$1" config="$2" limit="$3"
    shift 3
    # Run from the work dir: schemathesis and hypothesis keep their caches in the current one.
    (cd "$work" && timeout --kill-after=10 "$limit" "$work/st-venv/bin/schemathesis" --config-file "$config" run \
        "$root/openapi/openapi.json" --output-sanitize false --no-color \
        --report junit,ndjson --report-junit-path "$logs/schemathesis-$name.xml" \
        --report-ndjson-path "$logs/schemathesis-$name.ndjson" "$@") \
        >"$logs/schemathesis-$name.log" 2>&1 || {
        local status=$?
        cat "$logs/schemathesis-$name.log"
        [ "$status" -eq 124 ] && echo "contract.sh: schemathesis ($name) ran over its ${limit}s bound" >&2
        echo "contract.sh: schemathesis ($name) failed (exit $status); log: $logs/schemathesis-$name.log" >&2
        return 1
    }
    sed -n '/^=* SUMMARY =*$/,$p' "$logs/schemathesis-$name.log"
}
exclude=()
for op in "${session_only[@]}"; do exclude+=(--exclude-operation-id "$op"); done
# Both runs go ahead even when the first fails, so that one CI run reports every finding.
failed=()
schemathesis key "$contract/schemathesis.toml" 420 "${exclude[@]}" || failed+=("schemathesis (key)")

stage "schemathesis: the operations of a signed-in user, with a session"
include=()
for op in "${session_only[@]}" getProject listMembers; do include+=(--include-operation-id "$op"); done
schemathesis session "$contract/schemathesis-session.toml" 180 "${include[@]}" || failed+=("schemathesis (session)")

# A panic or an error logged while answering is a server fault even when no response showed it
# (a background task, a 4xx answered after an internal failure).
if sed -E 's/\x1b\[[0-9;]*m//g' "$logs/server.log" | grep -E ' ERROR |panicked at' >"$logs/server-errors.log"; then
    echo "contract.sh: the server logged errors while under test (first 20; all in $logs/server-errors.log):" >&2
    head -n 20 "$logs/server-errors.log" >&2
    failed+=("server log")
fi

finish_stage
echo
printf '%s\n' "${timings[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "==> contract: failed: ${failed[*]} (logs and reports in $logs)" >&2
    exit 1
fi
echo "==> contract: every stage passed"
