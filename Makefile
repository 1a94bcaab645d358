# memflow — two commands on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: run test test-quick bench bench-quality lint gremlin-start gremlin-stop janusgraph-start \
	janusgraph-stop milvus-start milvus-stop postgres-start postgres-stop dev serve sample clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip uv
	$(BIN)/uv pip install -q --python $(BIN)/python -e '.[st,dev]'
	$(BIN)/python -m resources.models.onnx_embeddings --export
	touch $(STAMP)

## Ingest the bundled sample landing zone through every asset, then answer a sample recall.
run: $(STAMP)
	$(BIN)/memflow run --recall

## Set up and run the whole test suite with every server it needs: TinkerPop's Gremlin Server
## (started here), JanusGraph, a Milvus server and PostgreSQL for the Dagster daemon tests
## (started by the tests that use them, shared
## by the workers, stopped by the last one; stopped here too in case a worker died). A server
## that cannot start fails its tests; none is skipped.
test: $(STAMP)
	$(BIN)/ruff check .
	bash scripts/gremlin-server.sh start
	status=0; $(BIN)/python -m pytest -q -n 2 $(PYTEST_ARGS) || status=$$?; \
	bash scripts/gremlin-server.sh stop; bash scripts/gremlin-server.sh janusgraph stop; \
	$(BIN)/python -m tests.support.milvus_server stop; bash scripts/postgres.sh stop; exit $$status

## The same without the tests that need JanusGraph or the Milvus server (marker `server`; the
## TinkerGraph and Milvus Lite backends still run): for development. CI runs `make test`.
test-quick: $(STAMP)
	$(BIN)/ruff check .
	bash scripts/gremlin-server.sh start
	status=0; $(BIN)/python -m pytest -q -n 2 -m "not server" $(PYTEST_ARGS) \
		|| status=$$?; bash scripts/gremlin-server.sh stop; exit $$status

## Benchmarks; results land in bench/results/*.json and BENCHMARKS.md.
bench: $(STAMP)
	bash scripts/gremlin-server.sh start
	status=0; bash bench/run_all.sh || status=$$?; \
	bash scripts/gremlin-server.sh stop; exit $$status

## Both quality sets: the project's and LoCoMo (LOCOMO_DATA=DIR keeps/reuses its pipeline run).
bench-quality: $(STAMP)
	$(BIN)/python bench/bench_quality.py $(if $(LOCOMO_DATA),--locomo-data $(LOCOMO_DATA))

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## The Dagster UI on the same data directory as the CLI.
dev: $(STAMP)
	DAGSTER_HOME=$${DAGSTER_HOME:-$$PWD/.memflow/dagster} bash -c 'mkdir -p $$DAGSTER_HOME && $(BIN)/dagster dev -w workspace.yaml'

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
