#!/usr/bin/env bash
# PostgreSQL for the Dagster instance of the daemon tests and benchmarks: Debian's PostgreSQL,
# a cluster initialised in the worktree, on loopback only.
#
#   scripts/postgres.sh start    initialise (once) and start the cluster, wait until it answers
#   scripts/postgres.sh stop     stop the cluster this script started (fast shutdown)
#   scripts/postgres.sh status   exit 0 when it answers a query, else 1
#   scripts/postgres.sh url      print the server's URL (postgresql://memflow@127.0.0.1:PORT)
#
# Environment: MEMFLOW_POSTGRES_PORT (default 18350), MEMFLOW_POSTGRES_DATA (the cluster's
# directory, default .postgres/data-<port>, or /var/tmp/memflow-postgres-<id>/ when the worktree is
# out of the postgres user's reach), MEMFLOW_POSTGRES_START_TIMEOUT (seconds, default 60).
#
# When the server programs are missing and this runs as root with apt-get, it installs Debian's
# `postgresql` package first (a fresh CI machine). PostgreSQL refuses to run as root, so as root
# the cluster belongs to the `postgres` system user (created by the package) and every server
# program runs through `runuser`. The cluster trusts loopback connections of its one role,
# `memflow` (a test server, nothing else reaches it). Durability is off (fsync,
# synchronous_commit): it is the *daemon* the tests kill, never this server, and a test cluster
# is thrown away with `make clean`.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PORT="${MEMFLOW_POSTGRES_PORT:-18350}"
START_TIMEOUT="${MEMFLOW_POSTGRES_START_TIMEOUT:-60}"
ROLE=memflow

# Where the cluster lives: .postgres/ in the worktree, unless this runs as root in a folder the
# `postgres` user cannot reach (a clone under /root): then a folder of its own under /var/tmp,
# named after the worktree, so start, stop and status of one worktree agree.
resolve_state() {
  STATE="$ROOT/.postgres"
  if [[ "$(id -u)" == 0 ]] && getent passwd postgres >/dev/null \
    && ! runuser -u postgres -- test -x "$ROOT" 2>/dev/null; then
    STATE="/var/tmp/memflow-postgres-$(printf '%s' "$ROOT" | sha1sum | cut -c1-12)"
  fi
  DATA="${MEMFLOW_POSTGRES_DATA:-$STATE/data-${PORT}}"
  LOG="$STATE/server-${PORT}.log"
}
resolve_state

die() { echo "postgres: $*" >&2; exit 1; }

bindir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [[ -n "$dir" && -x "$dir/initdb" ]] && echo "$dir"
}

install_server() {
  if bindir >/dev/null; then
    return 0
  fi
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    die "PostgreSQL's server programs are not installed (Debian: apt-get install -y postgresql)"
  fi
  echo "postgres: installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q postgresql >&2 || { apt-get update -q >&2 && apt-get install -y -q postgresql >&2; } \
    || die "apt-get could not install postgresql"
  bindir >/dev/null || die "postgresql installed, but no /usr/lib/postgresql/*/bin/initdb"
}

# Run a server program as the cluster's owner.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

answers() {
  local bin
  bin="$(bindir)" || return 1
  "$bin/psql" -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d postgres -Atqc 'select 1' >/dev/null 2>&1
}

init_cluster() {
  [[ -f "$DATA/PG_VERSION" ]] && return 0
  local bin
  bin="$(bindir)"
  mkdir -p "$STATE"
  rm -rf "$DATA"
  mkdir -p "$DATA"
  if [[ "$(id -u)" == 0 ]]; then
    getent passwd postgres >/dev/null || die "no 'postgres' system user to own the cluster"
    chown postgres: "$DATA" "$STATE"
  fi
  chmod 700 "$DATA"
  as_owner "$bin/initdb" -D "$DATA" -U "$ROLE" --auth=trust -E UTF8 --locale=C.UTF-8 \
    --no-instructions >"$STATE/initdb-${PORT}.log" 2>&1 \
    || { cat "$STATE/initdb-${PORT}.log" >&2; rm -rf "$DATA"; die "initdb failed"; }
  cat >>"$DATA/postgresql.conf" <<EOF

# memflow test cluster (scripts/postgres.sh)
listen_addresses = '127.0.0.1'
port = ${PORT}
unix_socket_directories = ''
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 64MB
EOF
}

start() {
  if answers; then
    echo "postgres: already answers at 127.0.0.1:${PORT}"
    return 0
  fi
  install_server
  resolve_state  # the postgres user exists now
  init_cluster
  local bin
  bin="$(bindir)"
  mkdir -p "$STATE"
  touch "$LOG"
  [[ "$(id -u)" == 0 ]] && chown postgres: "$LOG"
  # A cluster killed earlier leaves postmaster.pid behind; pg_ctl checks whether that pid lives.
  as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t "$START_TIMEOUT" -o "-p ${PORT}" start \
    >/dev/null 2>&1 || { tail -n 30 "$LOG" >&2; die "the server did not start (log: $LOG)"; }
  local waited=0
  until answers; do
    (( waited >= START_TIMEOUT )) && { tail -n 30 "$LOG" >&2; die "no answer on port ${PORT}"; }
    sleep 1
    waited=$((waited + 1))
  done
  echo "postgres: started at 127.0.0.1:${PORT} (data $DATA)"
}

stop() {
  local bin
  if ! bin="$(bindir)" || [[ ! -f "$DATA/postmaster.pid" ]]; then
    echo "postgres: not running"
    return 0
  fi
  as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  echo "postgres: stopped"
}

status() {
  if answers; then
    echo "postgres: running at 127.0.0.1:${PORT}"
    return 0
  fi
  echo "postgres: not running at 127.0.0.1:${PORT}"
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) echo "postgresql://${ROLE}@127.0.0.1:${PORT}" ;;
  *) die "usage: $0 {start|stop|status|url}" ;;
esac
