# memflow — two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
QUICK_MARKERS ?= not server and not gremlin and not s3
QUICK_WORKERS ?= 3
# The S3 test server is built unless the tests are pointed at another one (an external
# MEMFLOW_TEST_S3_URL, or moto's emulator with MEMFLOW_TEST_S3_SERVER=moto).
S3_SERVER_BUILD := if [ -z "$$MEMFLOW_TEST_S3_URL" ] && [ "$$MEMFLOW_TEST_S3_SERVER" != moto ]; \
	then bash scripts/versitygw.sh; fi
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

SAMPLE_DATA := $(CURDIR)/.memflow
# Bytecode written ahead: where PYTHONDONTWRITEBYTECODE is set, every process would otherwise
# compile every module it imports from source (Dagster's alone: ~2.5 CPU s a process), and the
# tests start hundreds of them. The packages are compiled at install (uv), memflow's own here
# (not the virtual environments a benchmark keeps under bench/, such as Mem0's).
BYTECODE := $(BIN)/python -m compileall -q -j 0 -x '/\.venv' assets bench memflow pipelines \
	recall resources schemas scripts tests
# pytest rewrites the asserts of every test module it imports (~10 CPU s a worker for this
# suite) and keeps the result beside the bytecode only where bytecode may be written: so it
# may, in the test processes (and the programs they start).
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

.PHONY: up run test test-quick bench bench-quality lint gremlin-start gremlin-stop janusgraph-start \
	janusgraph-stop milvus-start milvus-stop postgres-start postgres-stop dev serve sample clean \
	s3-seaweedfs test-tables-s3

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[st,dev]'
	$(BIN)/python -m resources.models.onnx_embeddings --export
	touch $(STAMP)

## Bring memflow up: the recall API, the Dagster UI and daemon (landing sensor on), on the state
## home's data directory and landing zone (MEMFLOW_HOME, else ~/.local/state/memflow); Ctrl-C
## stops everything.
up: $(STAMP)
	$(BIN)/memflow up

## Ingest the bundled sample landing zone (read, never written) through every asset into
## ./.memflow, then answer a sample recall.
run: $(STAMP)
	$(BIN)/memflow run --landing landing-sample --data $(SAMPLE_DATA) --recall

## Set up and run the whole test suite with every server it needs: TinkerPop's Gremlin Server
## (started here), the Versity S3 Gateway (built here once from the Go module proxy, started by
## the table store's tests), JanusGraph, a Milvus server and PostgreSQL for the Dagster daemon
## tests (started by the tests that use them, shared by the workers, stopped by the last one;
## stopped here too in case a worker died). A server that cannot start fails its tests; none is
## skipped. Three workers on two cores: with two, the cores sat idle ~half the time while tests
## waited on servers and subprocesses (and with four the same tests took 12% more CPU).
## `--dist worksteal`: a worker that runs out of tests takes some queued on a busy one; with
## xdist's default one worker sat idle ~170 s of a 6-minute `make test-quick`.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BYTECODE)
	$(S3_SERVER_BUILD)
	bash scripts/gremlin-server.sh start
	status=0; $(PYTEST) -q -n 3 --dist worksteal --durations=25 $(PYTEST_ARGS) || status=$$?; \
	bash scripts/gremlin-server.sh stop; bash scripts/gremlin-server.sh janusgraph stop; \
	$(BIN)/python -m tests.support.milvus_server stop; bash scripts/postgres.sh stop; \
	$(BIN)/python -m tests.support.s3_server stop; exit $$status

## The tests that need no server, for development: markers `server` (JanusGraph, the Milvus
## server, PostgreSQL), `gremlin` (TinkerPop's Gremlin Server) and `s3` (the S3 test server)
## left out, so nothing is built or started; the embedded stores, the SQLite graph and local
## Delta tables are all tested. CI runs `make test`, which runs everything.
## `make test-quick QUICK_MARKERS="... and not slow"` leaves out the tests that spawn processes too;
## QUICK_WORKERS sets the number of workers (3).
test-quick: $(STAMP)
	$(BIN)/ruff check .
	$(BYTECODE)
	$(PYTEST) -q -n $(QUICK_WORKERS) --dist worksteal -m "$(QUICK_MARKERS)" $(PYTEST_ARGS)

## SeaweedFS's S3 server for the table store's object-storage tests (built once from the Go
## module proxy, 20-60 minutes here; without it they run against the Versity S3 Gateway that
## `make test` builds). Then the table store's contract suite against it.
s3-seaweedfs:
	bash scripts/seaweedfs.sh

test-tables-s3: $(STAMP) s3-seaweedfs
	status=0; $(BIN)/python -m pytest -q -n 0 tests/contract/test_table_store.py || status=$$?; \
	$(BIN)/python -m tests.support.s3_server stop; exit $$status

## Benchmarks; results land in bench/results/*.json and BENCHMARKS.md.
bench: $(STAMP)
	$(BYTECODE)
	bash scripts/gremlin-server.sh start
	status=0; bash bench/run_all.sh || status=$$?; \
	bash scripts/gremlin-server.sh stop; exit $$status

## Both quality sets: the project's and LoCoMo (LOCOMO_DATA=DIR keeps/reuses its pipeline run).
bench-quality: $(STAMP)
	$(BIN)/python bench/bench_quality.py $(if $(LOCOMO_DATA),--locomo-data $(LOCOMO_DATA))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## The Dagster UI and daemon (`dagster dev`) on the data directory of `make run` and the sample
## (read only), with the run queue's one-run-per-block rule; the model settings re-read from
## .env at every run.
dev: $(STAMP)
	$(BIN)/memflow dev --create --landing landing-sample --data $(SAMPLE_DATA)

serve: $(STAMP)
	$(BIN)/memflow serve

sample: $(STAMP)
	$(BIN)/python -m tests.support.sample_landing --out landing-sample

gremlin-start:
	bash scripts/gremlin-server.sh start

gremlin-stop:
	bash scripts/gremlin-server.sh stop

## JanusGraph (BerkeleyDB JE under .janusgraph/data-<port>) on MEMFLOW_JANUSGRAPH_PORT (18303).
janusgraph-start:
	bash scripts/gremlin-server.sh janusgraph start

janusgraph-stop:
	bash scripts/gremlin-server.sh janusgraph stop

## Milvus standalone 2.3 (the `milvus` wheel) on MEMFLOW_MILVUS_PORT (18310, and the next 12).
milvus-start: $(STAMP)
	$(BIN)/python -m tests.support.milvus_server start

milvus-stop: $(STAMP)
	$(BIN)/python -m tests.support.milvus_server stop

## PostgreSQL (Debian's, initialised under .postgres/data-<port>) on MEMFLOW_POSTGRES_PORT (18350).
postgres-start:
	bash scripts/postgres.sh start

postgres-stop:
	bash scripts/postgres.sh stop

## Also drops the test servers' data (JanusGraph's, Milvus's, PostgreSQL's), keeping binaries.
clean:
	bash scripts/postgres.sh stop >/dev/null
	rm -rf .memflow .pytest_cache .ruff_cache .janusgraph/data-* .milvus-server/data-* .postgres
