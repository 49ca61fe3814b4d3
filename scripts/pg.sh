#!/usr/bin/env bash
# Makes sure the Postgres the tests use is there: a server on 127.0.0.1:5432 that lets user
# `postgres` in without a password over TCP, with a database `test`. That is what
# SLUICE_TEST_POSTGRES_URL defaults to (postgres://postgres@127.0.0.1:5432/test).
#
# Idempotent: exits at once when `psql -h 127.0.0.1 -U postgres -d test` works already.
# Otherwise it starts (or creates) the Debian cluster, trusts loopback TCP in pg_hba.conf and
# creates the database. Needs the packages of scripts/deps.sh test, and root or sudo.
set -euo pipefail

host=127.0.0.1
port=5432
db="test"
ready_timeout=60

log() { echo "pg.sh: $*"; }
fail() {
    echo "pg.sh: $*" >&2
    exit 1
}

# -w: never prompt for a password (CI has no stdin); a refusal is an answer, not a hang.
can_connect() {
    PGCONNECT_TIMEOUT=5 psql -w -h "$host" -p "$port" -U postgres -d "$1" -Atqc 'select 1' \
        >/dev/null 2>&1
}

if can_connect "$db"; then
    log "postgres://postgres@$host:$port/$db is ready"
    exit 0
fi

if ! command -v psql >/dev/null 2>&1 || ! command -v pg_ctlcluster >/dev/null 2>&1; then
    fail "PostgreSQL is not installed; run scripts/deps.sh test first"
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    fail "cannot reach postgres://postgres@$host:$port/$db and cannot fix it without root or sudo"
fi

wait_ready() {
    local deadline=$((SECONDS + ready_timeout))
    until pg_isready -q -h "$host" -p "$port"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            fail "server on $host:$port not ready after ${ready_timeout}s (see /var/log/postgresql/)"
        fi
        sleep 0.5
    done
}

# The cluster that serves port 5432, as "VERSION NAME"; else the first `main` under
# /etc/postgresql; else none.
find_cluster() {
    local found version
    found="$(pg_lsclusters -h 2>/dev/null | awk -v p="$port" '$3 == p {print $1, $2; exit}')"
    if [ -n "$found" ]; then
        echo "$found"
        return
    fi
    # shellcheck disable=SC2012 # version directories: plain names like 15
    version="$(ls /etc/postgresql 2>/dev/null | head -1)"
    if [ -n "$version" ] && [ -d "/etc/postgresql/$version/main" ]; then
        echo "$version main"
    fi
}

cluster="$(find_cluster)"
if [ -z "$cluster" ]; then
    # apt's postinst normally creates `main`; a container image may have skipped or removed it.
    # shellcheck disable=SC2012 # version directories: plain names like 15
    version="$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1)"
    [ -n "$version" ] || fail "no PostgreSQL server binaries under /usr/lib/postgresql"
    log "creating cluster $version/main on port $port"
    "${as_root[@]}" pg_createcluster "$version" main --port "$port"
    cluster="$version main"
fi
read -r version name <<<"$cluster"

if ! pg_isready -q -h "$host" -p "$port"; then
    log "starting cluster $version/$name"
    # Without systemd (containers, CI) the socket directory of tmpfiles.d may be missing.
    if [ ! -d /var/run/postgresql ]; then
        "${as_root[@]}" install -d -o postgres -g postgres -m 2775 /var/run/postgresql
    fi
    "${as_root[@]}" pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start ||
        log "pg_ctlcluster start failed; waiting in case it is starting already"
fi
wait_ready

if ! can_connect postgres; then
    # Debian's default pg_hba.conf asks for a password over TCP. pg_hba.conf is first match
    # wins, so the trust lines go on top; the marker keeps a second run from adding them twice.
    hba="$("${as_root[@]}" runuser -u postgres -- psql -p "$port" -Atqc 'show hba_file' 2>/dev/null ||
        echo "/etc/postgresql/$version/$name/pg_hba.conf")"
    marker="# added by sluice scripts/pg.sh"
    if ! "${as_root[@]}" grep -qF "$marker" "$hba"; then
        log "trusting 127.0.0.1/32 and ::1/128 in $hba"
        # shellcheck disable=SC2016 # expanded by the inner shell
        "${as_root[@]}" sh -c '
            tmp="$(mktemp)"
            { printf "%s\n" "$2" \
                "host all all 127.0.0.1/32 trust" \
                "host all all ::1/128 trust"
              cat "$1"; } >"$tmp"
            cat "$tmp" >"$1"
            rm -f "$tmp"' sh "$hba" "$marker"
    fi
    "${as_root[@]}" pg_ctlcluster --skip-systemctl-redirect "$version" "$name" reload
    deadline=$((SECONDS + ready_timeout))
    until can_connect postgres; do
        [ "$SECONDS" -lt "$deadline" ] ||
            fail "user postgres still cannot connect over TCP to $host:$port (check $hba)"
        sleep 0.5
    done
fi

if ! can_connect "$db"; then
    log "creating database $db"
    "${as_root[@]}" runuser -u postgres -- createdb -p "$port" "$db"
fi

can_connect "$db" || fail "psql -h $host -U postgres -d $db still fails"
log "postgres://postgres@$host:$port/$db is ready"
