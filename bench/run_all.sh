#!/usr/bin/env bash
# `make bench`: every benchmark; each writes bench/results/<name>.json and prints a table.
# The Gremlin Server is started by the Makefile around this script; bench_daemon.py starts
# PostgreSQL itself (scripts/postgres.sh) when it is not running.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
status=0
run() { echo "== $*"; "$@" || { echo "!! failed: $*"; status=1; }; }
run env POLARS_MAX_THREADS=1 $PY bench/bench_validation.py
run env POLARS_MAX_THREADS=1 $PY bench/bench_redaction.py
run env POLARS_MAX_THREADS=1 $PY bench/bench_redaction_adversarial.py
run $PY bench/bench_embedding_sweep.py
run $PY bench/bench_graph_sync.py --gremlin-url "${MEMFLOW_GREMLIN_URL:-ws://127.0.0.1:18182/gremlin}"
run $PY bench/bench_vector_store.py
run $PY bench/bench_latency.py
run $PY bench/bench_vs_mem0.py --ablation
run $PY bench/bench_quality.py
run $PY bench/bench_freshness.py
run $PY bench/bench_hooks.py
run $PY bench/bench_import.py
run $PY bench/bench_ingest_scale.py
run $PY bench/bench_sensor.py
# A 10,000-tenant table with and without Delta's column statistics (a few minutes).
run $PY bench/bench_delta_stats.py
# 100, 1,000 and 10,000 tenants on the embedded default (10,000 takes on the order of an hour on
# 2 cores); BENCH_SCALE_TENANTS=100,1000 for less.
run nice -n 10 $PY bench/bench_scale.py --tenants "${BENCH_SCALE_TENANTS:-100,1000,10000}"
# The same shape on the production stack: the daemon and its landing sensor on PostgreSQL,
# JanusGraph and the Milvus server, each started (and stopped) by the benchmark; 100 and 1,000
# tenants take 1-2 hours on 2 cores.
run nice -n 10 $PY bench/bench_scale.py --stack production \
  --tenants "${BENCH_SCALE_PRODUCTION_TENANTS:-100,1000}"
# The recall service's memory as 100, 1,000 and 10,000 tenants are asked for.
run $PY bench/bench_scope_memory.py --model hash
run $PY bench/bench_scope_memory.py --model onnx --tenants 100,1000
run $PY bench/bench_fuzz.py
# Starts (and stops) the PostgreSQL of scripts/postgres.sh if none answers.
run $PY bench/bench_daemon.py
exit $status
