#!/usr/bin/env bash
# Apache TinkerPop Gremlin Server (TinkerGraph) for memflow's contract tests and benchmarks.
#
#   scripts/gremlin-server.sh fetch    resolve the server's jars into .gremlin/lib (once)
#   scripts/gremlin-server.sh start    start it in the background, wait until it answers
#   scripts/gremlin-server.sh stop     stop the server this script started
#   scripts/gremlin-server.sh status   exit 0 when it answers a traversal, else 1
#
# Environment: MEMFLOW_GREMLIN_PORT (default 18182), MEMFLOW_GREMLIN_START_TIMEOUT (seconds,
# default 120), MEMFLOW_PYTHON (interpreter with gremlinpython; default .venv/bin/python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

STATE="$ROOT/.gremlin"
LIB="$STATE/lib"
PORT="${MEMFLOW_GREMLIN_PORT:-18182}"
URL="ws://127.0.0.1:${PORT}/gremlin"
PIDFILE="$STATE/server-${PORT}.pid"
LOG="$STATE/server-${PORT}.log"
CONF="$STATE/gremlin-server-${PORT}.yaml"
START_TIMEOUT="${MEMFLOW_GREMLIN_START_TIMEOUT:-120}"
if [[ -n "${MEMFLOW_PYTHON:-}" ]]; then
  PY="$MEMFLOW_PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="python3"
fi

die() { echo "gremlin-server: $*" >&2; exit 1; }

log_tail() {
  if [[ -f "$LOG" ]]; then
    echo "---- last lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
  fi
}

# A real traversal through gremlinpython (GraphBinary), not just an open port.
answers() {
  "$PY" - "$URL" >/dev/null 2>&1 <<'PYEOF'
import sys
from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
from gremlin_python.process.anonymous_traversal import traversal
conn = DriverRemoteConnection(sys.argv[1], "g", pool_size=1)
try:
    assert traversal().with_(conn).inject(1).to_list() == [1]
finally:
    conn.close()
PYEOF
}

our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  grep -q "GremlinServer" "/proc/$pid/cmdline" 2>/dev/null || return 1
  echo "$pid"
}

fetch() {
  local stamp
  stamp="$(sha256sum gremlin/pom.xml | cut -d' ' -f1)"
  if [[ -f "$LIB/.complete" && "$(cat "$LIB/.complete")" == "$stamp" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the server's jars"
  echo "gremlin-server: fetching Apache TinkerPop Gremlin Server jars into $LIB" >&2
  rm -rf "$LIB.tmp"
  mkdir -p "$STATE"
  mvn -q -B -f gremlin/pom.xml dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB.tmp" >&2 \
    || die "mvn could not resolve gremlin/pom.xml"
  rm -rf "$LIB"
  mv "$LIB.tmp" "$LIB"
  echo "$stamp" >"$LIB/.complete"
}

start() {
  if our_pid >/dev/null && answers; then
    echo "gremlin-server: already running (pid $(our_pid)) at $URL"
    return 0
  fi
  if answers; then
    echo "gremlin-server: a Gremlin server already answers at $URL; not starting another"
    return 0
  fi
  command -v java >/dev/null || die "java (11 or newer) is needed to run Gremlin Server"
  fetch
  stop >/dev/null
  sed -e "s/^port: .*/port: ${PORT}/" gremlin/gremlin-server.yaml >"$CONF"
  # setsid: the server outlives the shell that started it and ignores its terminal's signals;
  # `stop` ends it by pid.
  setsid java -Xms128m -Xmx1g -XX:+UseSerialGC -cp "$LIB/*" \
    org.apache.tinkerpop.gremlin.server.GremlinServer "$CONF" >"$LOG" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$PIDFILE"
  local waited=0
  until answers; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      log_tail
      die "the server exited during start-up (log: $LOG)"
    fi
    if (( waited >= START_TIMEOUT )); then
      stop >/dev/null
      log_tail
      die "no answer at $URL after ${START_TIMEOUT}s (log: $LOG)"
    fi
    sleep 1
    waited=$((waited + 1))
  done
  echo "gremlin-server: started (pid $pid) at $URL"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    echo "gremlin-server: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$PIDFILE"
  echo "gremlin-server: stopped (pid $pid)"
}

status() {
  if answers; then
    local pid
    pid="$(our_pid || echo "not started by this script")"
    echo "gremlin-server: running at $URL (pid $pid)"
    return 0
  fi
  echo "gremlin-server: not running at $URL"
  return 1
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 {fetch|start|stop|status}" ;;
esac
