#!/usr/bin/env bash
# Gremlin servers for memflow's contract tests and benchmarks, in two flavours:
#
#   tinkergraph (default)  Apache TinkerPop Gremlin Server on the in-memory TinkerGraph
#   janusgraph             JanusGraph's Gremlin Server on BerkeleyDB JE, persisted on disk
#
#   scripts/gremlin-server.sh [FLAVOUR] fetch    resolve the server's jars with Maven (once)
#   scripts/gremlin-server.sh [FLAVOUR] start    start it in the background, wait until it answers
#   scripts/gremlin-server.sh [FLAVOUR] stop     stop the server this script started
#   scripts/gremlin-server.sh [FLAVOUR] status   exit 0 when it answers a traversal, else 1
#
# Environment: MEMFLOW_GREMLIN_PORT (tinkergraph, default 18182), MEMFLOW_JANUSGRAPH_PORT
# (janusgraph, default 18303), MEMFLOW_JANUSGRAPH_DATA (janusgraph's storage directory, default
# .janusgraph/data-<port>), MEMFLOW_GREMLIN_START_TIMEOUT (seconds, default 180), MEMFLOW_PYTHON
# (interpreter with gremlinpython; default .venv/bin/python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FLAVOUR=tinkergraph
if [[ $# -ge 2 ]]; then
  FLAVOUR="$1"
  shift
fi

case "$FLAVOUR" in
  tinkergraph)
    NAME="gremlin-server"
    STATE="$ROOT/.gremlin"
    POM="gremlin/pom.xml"
    PORT="${MEMFLOW_GREMLIN_PORT:-18182}"
    MAIN="org.apache.tinkerpop.gremlin.server.GremlinServer"
    YAML="gremlin/gremlin-server.yaml"
    ;;
  janusgraph)
    NAME="janusgraph-server"
    STATE="$ROOT/.janusgraph"
    POM="janusgraph/pom.xml"
    PORT="${MEMFLOW_JANUSGRAPH_PORT:-18303}"
    MAIN="org.janusgraph.graphdb.server.JanusGraphServer"
    YAML="janusgraph/janusgraph-server.yaml"
    DATA="${MEMFLOW_JANUSGRAPH_DATA:-$STATE/data-${PORT}}"
    PROPS="$STATE/janusgraph-${PORT}.properties"
    ;;
  *)
    echo "gremlin-server: unknown flavour $FLAVOUR (tinkergraph or janusgraph)" >&2
    exit 2
    ;;
esac

LIB="$STATE/lib"
URL="ws://127.0.0.1:${PORT}/gremlin"
PIDFILE="$STATE/server-${PORT}.pid"
LOG="$STATE/server-${PORT}.log"
CONF="$STATE/${NAME}-${PORT}.yaml"
START_TIMEOUT="${MEMFLOW_GREMLIN_START_TIMEOUT:-180}"
if [[ -n "${MEMFLOW_PYTHON:-}" ]]; then
  PY="$MEMFLOW_PYTHON"
elif [[ -x "$ROOT/.venv/bin/python" ]]; then
  PY="$ROOT/.venv/bin/python"
else
  PY="python3"
fi

die() { echo "$NAME: $*" >&2; exit 1; }

log_tail() {
  if [[ -f "$LOG" ]]; then
    echo "---- last lines of $LOG ----" >&2
    tail -n 40 "$LOG" >&2
  fi
}

# A real traversal over the graph through gremlinpython (GraphBinary), not just an open port.
answers() {
  "$PY" - "$URL" >/dev/null 2>&1 <<'PYEOF'
import sys
from gremlin_python.driver.driver_remote_connection import DriverRemoteConnection
from gremlin_python.process.anonymous_traversal import traversal
conn = DriverRemoteConnection(sys.argv[1], "g", pool_size=1)
try:
    assert traversal().with_(conn).V().limit(1).count().to_list()[0] in (0, 1)
finally:
    conn.close()
PYEOF
}

# The pid in the pid file, if that process is a server this script started with this config
# (a stale pid file, or a pid reused by another program, is not ours).
our_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$MAIN $CONF" || return 1
  echo "$pid"
}

fetch() {
  local stamp
  stamp="$(sha256sum "$POM" | cut -d' ' -f1)"
  if [[ -f "$LIB/.complete" && "$(cat "$LIB/.complete")" == "$stamp" ]]; then
    return 0
  fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed once to fetch the server's jars"
  echo "$NAME: fetching the server's jars ($POM) into $LIB" >&2
  rm -rf "$LIB.tmp"
  mkdir -p "$STATE"
  mvn -q -B -f "$POM" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$LIB.tmp" >&2 \
    || die "mvn could not resolve $POM"
  rm -rf "$LIB"
  mv "$LIB.tmp" "$LIB"
  echo "$stamp" >"$LIB/.complete"
}

# This port's copy of the server's configuration.
render_config() {
  mkdir -p "$STATE"
  case "$FLAVOUR" in
    tinkergraph)
      sed -e "s/^port: .*/port: ${PORT}/" "$YAML" >"$CONF"
      ;;
    janusgraph)
      mkdir -p "$DATA"
      sed -e "s|^storage.directory=.*|storage.directory=$(cd "$DATA" && pwd)|" \
        janusgraph/janusgraph-berkeleyje.properties >"$PROPS"
      sed -e "s/^port: .*/port: ${PORT}/" \
        -e "s|janusgraph/janusgraph-berkeleyje.properties|${PROPS}|" "$YAML" >"$CONF"
      ;;
  esac
}

start() {
  if our_pid >/dev/null && answers; then
    echo "$NAME: already running (pid $(our_pid)) at $URL"
    return 0
  fi
  if answers; then
    echo "$NAME: a Gremlin server already answers at $URL; not starting another"
    return 0
  fi
  command -v java >/dev/null || die "java (11 or newer) is needed to run the server"
  fetch
  stop >/dev/null
  render_config
  # setsid: the server outlives the shell that started it and ignores its terminal's signals;
  # `stop` ends it by pid.
  setsid java -Xms128m -Xmx1g -XX:+UseSerialGC -cp "$LIB/*" $MAIN "$CONF" \
    >"$LOG" 2>&1 </dev/null &
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
  echo "$NAME: started (pid $pid) at $URL"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    rm -f "$PIDFILE"
    echo "$NAME: not running"
    return 0
  fi
  # TERM: the JVM's shutdown hooks close the graph (JanusGraph flushes and closes BerkeleyDB).
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  rm -f "$PIDFILE"
  echo "$NAME: stopped (pid $pid)"
}

status() {
  if answers; then
    local pid
    pid="$(our_pid || echo "not started by this script")"
    echo "$NAME: running at $URL (pid $pid)"
    return 0
  fi
  echo "$NAME: not running at $URL"
  return 1
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 [tinkergraph|janusgraph] {fetch|start|stop|status}" ;;
esac
