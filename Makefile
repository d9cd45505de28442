# Grimoire — two commands: `make demo` and `make test`. Everything else is a helper.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.grimoire-installed
# The CPU wheel of torch; installed before anything that depends on torch so no
# resolver ever reaches for the multi-GB CUDA build (checked by envcheck below).
TORCH := torch==2.13.0
TYPECHECK_PATH := .grimoire/typecheck

.PHONY: help setup qemu-user browser stunnel run wipe smoke demo test test-unit test-integration test-cluster lint typecheck bench bench-ingest bench-recall bench-locomo bench-maintenance bench-faults bench-learning bench-clade bench-fleet bench-fold services-up services-down services-status clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet $(TORCH)
	$(PIP) install --quiet -e '.[worker,dev]'
	$(PY) -m grimoire.infra.envcheck
	touch $(STAMP)

setup: $(STAMP) ## create .venv with the pinned dependencies (CPU torch) and check it

# The int8 embedding test runs the model again on an emulated AVX2-only CPU
# (tests/integration/test_embedding.py): Debian's qemu-user, on x86-64 hosts.
qemu-user: ## install qemu-user (x86-64 hosts) for the cross-CPU embedding test
	@if [ "$$(uname -m)" = x86_64 ] && ! command -v qemu-x86_64 >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null 2>&1 \
		|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user; }; \
	fi

# The inspector's browser test (tests/integration/test_inspector.py) drives Debian's
# chromium through Playwright; Playwright's own browser downloads are never used.
browser: ## install Debian's chromium (headless) for the inspector's browser test
	command -v chromium >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

# The Kafka TLS test (tests/integration/test_kafka_tls.py) puts Debian's stunnel in front of
# tansu, whose own TLS flags leave its listener in plaintext (docs/operations.md).
stunnel: ## install Debian's stunnel4 (the TLS terminator) for the Kafka TLS test
	command -v stunnel4 >/dev/null || command -v stunnel >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends stunnel4)

run: setup ## the whole service locally (broker, Redis, worker, HTTP API + inspector, MCP) until Ctrl-C; kept on disk in .grimoire/run
	$(PY) -m grimoire.infra.cli up

wipe: ## delete what `make run` kept (.grimoire/run: the journal, Redis, keys); refused while it runs
	@if [ -f .grimoire/run/run/up.pid ] && kill -0 "$$(cat .grimoire/run/run/up.pid)" 2>/dev/null; then \
		echo "make run is running (pid $$(cat .grimoire/run/run/up.pid)): stop it first"; exit 1; fi
	rm -rf .grimoire/run

smoke: setup browser ## start the stack as `make run` does, exercise every route, MCP tool and the inspector; JSON last line
	mkdir -p bench-results
	$(PY) -m grimoire.infra.cli smoke | tee bench-results/smoke.log | tail -1 > bench-results/smoke.json; cat bench-results/smoke.json

demo: setup ## start local tansu + Redis, a worker, simulated agents; print recall answers; stop
	$(PY) -m grimoire.infra.cli demo

# Test processes (pytest-xdist), a file to each at a time; each starts its own broker and
# Redis (tests/integration/conftest.py). TEST_PROCESSES=0 runs them in this process.
TEST_PROCESSES ?= 2
# Files that start stacks of their own, kill workers or wait on an object store's
# background work: run after the rest, alone, so no second test process competes for
# the two cores while they wait (beside one, they missed their waits in 2 of 6 runs).
SOLO_TESTS := tests/integration/test_durable_stack.py tests/integration/test_scale_out.py \
	tests/integration/test_replay_learning.py tests/integration/test_forget_erases.py \
	tests/integration/test_staging_purge.py tests/integration/test_paging_ties.py \
	tests/integration/test_embedding.py tests/integration/test_bench_fleet.py \
	tests/integration/test_bench_clade.py
test: setup qemu-user browser stunnel lint typecheck ## lint, type-check, then the whole suite against real local services
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile $(addprefix --ignore=,$(SOLO_TESTS))
	$(PY) -m pytest $(SOLO_TESTS)

test-unit: setup ## only the pure tests (no services)
	$(PY) -m pytest tests/unit

test-integration: setup qemu-user browser stunnel ## only the tests against the real broker and Redis
	$(PY) -m pytest -n $(TEST_PROCESSES) --dist loadfile $(addprefix --ignore=,$(SOLO_TESTS)) tests/integration
	$(PY) -m pytest $(SOLO_TESTS)

# The session's Redis is a real Redis Cluster of 3 masters on consecutive ports from
# GRIMOIRE_TEST_REDIS_PORT (tests/integration/conftest.py starts it and forms it).
CLUSTER_TESTS := tests/integration/test_recall.py tests/integration/test_write_path.py \
	tests/integration/test_pipeline.py tests/integration/test_store_contract.py \
	tests/integration/test_outbox_contract.py tests/integration/test_fence.py
test-cluster: setup ## the recall and write-path integration tests against a real 3-master Redis Cluster
	GRIMOIRE_TEST_REDIS_CLUSTER=3 GRIMOIRE_TEST_REDIS_PORT=$${GRIMOIRE_TEST_REDIS_PORT:-17001} \
		$(PY) -m pytest $(CLUSTER_TESTS)

lint: setup ## ruff check + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup ## mypy --strict on the pure core
	mkdir -p $(TYPECHECK_PATH) && ln -sfn "$(CURDIR)" $(TYPECHECK_PATH)/grimoire
	MYPYPATH=$(TYPECHECK_PATH) $(VENV)/bin/mypy -p grimoire.streams

bench: bench-ingest bench-recall bench-locomo bench-maintenance bench-faults bench-learning bench-clade bench-fleet ## every benchmark (each prints one JSON object as its last line)

bench-ingest: setup ## the real write path on 20,000 generated events (repetitive and all-distinct in memory; all-distinct again on the durable stack with tenant keys)
	mkdir -p bench-results
	$(PY) -m bench ingest --events $${EVENTS:-20000} | tee bench-results/ingest.json

bench-recall: setup ## recall latency (in process and over Kafka) at 10,000 and 100,000 memories
	mkdir -p bench-results
	$(PY) -m bench recall | tee bench-results/recall.json

bench-maintenance: setup ## one due maintenance pass (decay, curator, compaction) at 10,000 and 100,000 memories
	mkdir -p bench-results
	$(PY) -m bench maintenance | tee bench-results/maintenance.json

bench-faults: setup ## every input kind on the durable stack; SIGKILLs of ingest and recall workers, Redis and the broker; 10,000 hostile messages; against a clean run
	mkdir -p bench-results
	$(PY) -m bench faults --events $${EVENTS:-20000} | tee bench-results/faults.json

bench-learning: setup ## agents acting on their recalls against oracle, Thompson sampling, learning off and uniform choice: regret, late success, success-first recall (RUNS per agent)
	mkdir -p bench-results
	$(PY) -m bench learning --runs $${RUNS:-60} | tee bench-results/learning.json

bench-clade: setup ## sibling agents sharing evidence in a clade against the same agents alone: regret per agent, no heuristic from clade evidence alone (RUNS per agent)
	mkdir -p bench-results
	rc=0; $(PY) -m bench clade --runs $${RUNS:-60} > bench-results/clade.log || rc=$$?; tail -1 bench-results/clade.log > bench-results/clade.json; cat bench-results/clade.json; exit $$rc

bench-fold: setup ## the apply loop alone (no model, no broker): CPU per folded event, Redis requests per batch (FOLD_ARGS)
	mkdir -p bench-results
	$(PY) -m bench fold $(FOLD_ARGS) | tee bench-results/fold.log | tail -1 > bench-results/fold.json; cat bench-results/fold.json

bench-fleet: setup ## AGENTS (1,000) on the 12 s block cadence: lag, recall, maintenance share, the largest fleet under one block (FLEET_ARGS)
	mkdir -p bench-results
	$(PY) -m bench fleet --agents $${AGENTS:-1000} $(FLEET_ARGS) | tee bench-results/fleet.log | tail -1 > bench-results/fleet.json; cat bench-results/fleet.json

bench-locomo: setup ## LoCoMo evidence retrieval through the pipeline: per category, on the report fold, bootstrap intervals (LOCOMO_ARGS="--data F --conversations a,b --folds K --report-fold I --ablate NAME")
	mkdir -p bench-results
	$(PY) -m bench locomo $(LOCOMO_ARGS) | tee bench-results/locomo.log; tail -1 bench-results/locomo.log > bench-results/locomo.json

services-up: setup ## start local tansu + Redis (GRIMOIRE_LOCAL_KAFKA_PORT/REDIS_PORT)
	$(PY) -m grimoire.infra.local.services up

services-down: setup ## stop the local services this project started
	$(PY) -m grimoire.infra.local.services down

services-status: setup ## show the local services
	$(PY) -m grimoire.infra.local.services status

clean: ## remove the venv and local state (stops local services first)
	-test -x $(PY) && $(PY) -m grimoire.infra.local.services down
	rm -rf $(VENV) .grimoire *.egg-info .pytest_cache .mypy_cache .ruff_cache
