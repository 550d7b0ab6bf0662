# Two commands for a new user: `make run` and `make test`. Each installs what it needs, exactly:
# the lock file of its profile (requirements/<profile>.txt, every package pinned with its hashes,
# regenerated from pyproject.toml by `make lock`; docs/adr/0017).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Every package, transitive ones included, must be in the lock file with a matching hash.
PIP_LOCKED := $(BIN)/python -m pip install --quiet --require-hashes
UV_VERSION := 0.13.9

.PHONY: run test install lint db-stop clean lock

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required" if sys.version_info < (3, 11) else 0)'
	$(PYTHON) -m venv $(VENV)

# The project itself, editable, built by the locked setuptools (no unpinned build download).
$(VENV)/.project-installed: pyproject.toml requirements/build.txt | $(BIN)/python
	$(PIP_LOCKED) -r requirements/build.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $@

# One stamp per profile: runtime + local (make run), + test (make test), runtime + lint (make
# lint), every extra (make bench). All are constrained to one resolution, so they stack.
$(VENV)/.%-installed: requirements/%.txt | $(VENV)/.project-installed
	$(PIP_LOCKED) -r $<
	@touch $@

## make install: a developer's virtualenv (what make test and make lint need).
install: $(VENV)/.test-installed $(VENV)/.lint-installed

## make lock: regenerate requirements/*.txt from pyproject.toml after changing a dependency
## (keeps the other pins; UPGRADE=1 moves every package to its newest allowed version).
lock: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==$(UV_VERSION)
	$(BIN)/python scripts/lock.py $(if $(UPGRADE),--upgrade)

## make run: migrate, create a demo merchant, then the API, worker, beat, two sandbox acquirers
## and localstripe (a Stripe-compatible fake, the stripe connector's acquirer, on :8092).
## Without the Redis URLs they share the embedded Redis (broker and acquirer state, .redis/).
## The sandbox keeps its charges in .sandbox/ across restarts (docs/sandbox.md). Ctrl-C stops
## everything and exits 0 (devtools/run_stack.py). Ports: WEB_PORT, SANDBOX_PORT,
## SANDBOX_BETA_PORT and LOCALSTRIPE_PORT (8000, 8090, 8091, 8092), e.g. `make run WEB_PORT=8100`
## next to another stack.
# Three acquirers for make run, the Procfile's: the sandboxes alpha (:8090, first by priority) and
# beta (:8091), each with its own API key, and stripe (:8092, localstripe: a Stripe-compatible
# fake, its secret key from LOCALSTRIPE_SECRET_KEY), which takes JPY only and so every JPY
# payment; unless ACQUIRERS is set (docs/configuration.md, docs/connectors.md). localstripe
# ignores Idempotency-Key: keys are not relied on there (honours_idempotency_keys false).
run key: export WEB_PORT ?= 8000
run: export SANDBOX_PORT ?= 8090
run: export SANDBOX_BETA_PORT ?= 8091
run: export LOCALSTRIPE_PORT ?= 8092
run: export WEB_BIND ?= 127.0.0.1:$(WEB_PORT)
# Where an acquirer sends a shopper back after a customer action (3-D Secure; ADR 0049).
run: export PUBLIC_BASE_URL ?= http://127.0.0.1:$(WEB_PORT)
run: export LOCALSTRIPE_SECRET_KEY ?= sk_test_localstripe_make_run
run: export ACQUIRERS ?= [{"name": "alpha", "base_url": "http://127.0.0.1:$(SANDBOX_PORT)", "api_key": "sandbox_sk_dev", "priority": 10}, {"name": "beta", "base_url": "http://127.0.0.1:$(SANDBOX_BETA_PORT)", "api_key": "sandbox_sk_beta", "priority": 20}, {"name": "stripe", "type": "stripe", "base_url": "http://127.0.0.1:$(LOCALSTRIPE_PORT)", "api_key_env": "LOCALSTRIPE_SECRET_KEY", "api_version": "2024-06-20", "currencies": ["JPY"], "priority": 5, "policy": {"honours_idempotency_keys": false}}]
run: $(VENV)/.local-installed
	@mkdir -p .celery
	@# The Procfile's processes (docker-compose runs the same) and make run's connector fakes.
	@cat Procfile Procfile.connectors > .celery/Procfile.make-run
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	@# gunicorn and Celery default to the production settings; make run's are the local ones.
	@DJANGO_SETTINGS_MODULE="$${DJANGO_SETTINGS_MODULE:-config.settings.local}" \
	  PATH="$(CURDIR)/$(BIN):$$PATH" SANDBOX_ACQUIRER_DATA_DIR="$(CURDIR)/.sandbox" \
	  $(BIN)/python -m devtools.run_stack -f .celery/Procfile.make-run

## make key: another API key for the demo merchant of make run (the earlier ones keep working
## for their rotation overlap, 24 h); prints `export API_KEY=...`.
.PHONY: key
key: $(VENV)/.local-installed
	@DJANGO_SETTINGS_MODULE="$${DJANGO_SETTINGS_MODULE:-config.settings.local}" \
	  $(BIN)/python manage.py demo_setup --key-only

## make test: the whole suite on PostgreSQL (DATABASE_URL, or the embedded server) and Redis
## (REDIS_URL, or the embedded server), on TEST_WORKERS pytest-xdist workers (default 3; much
## of the suite waits on subprocesses), each with a database test_<name>_gwN and a Redis
## database of its own (tests/support/redis.py); the SERIAL tests of tests/conftest.py run one
## after the other on one worker. A hung test fails after 120 s (pytest-timeout). Prints its time.
## make test-fast: tests/lib and tests/unit only, no database and no subprocess (refused:
## tests/support/fast_lane.py), in seconds.
TEST_WORKERS ?= 3
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist loadgroup
# Bytecode caches on, even where the environment turns them off (PYTHONDONTWRITEBYTECODE=1, as
# on the CI machine): the suite starts a few hundred Python processes (gunicorn, Celery,
# manage.py) and every collecting process rewrites the test modules' assertions; without the
# caches each compiles the project's modules from source again (docs/testing.md).
test test-fast: export PYTHONDONTWRITEBYTECODE :=
.PHONY: test-fast
test: $(VENV)/.test-installed
	@start=$$(date +%s); $(BIN)/python -m pytest $(PYTEST_PARALLEL); rc=$$?; \
	  echo "make test: $$(( $$(date +%s) - start )) s (-n $(TEST_WORKERS), rc=$$rc)"; exit $$rc

test-fast: $(VENV)/.test-installed
	@start=$$(date +%s); $(BIN)/python -m pytest -p tests.support.fast_lane tests/lib tests/unit; \
	  rc=$$?; echo "make test-fast: $$(( $$(date +%s) - start )) s (rc=$$rc)"; exit $$rc

## make lint: every pre-commit hook on every file (ruff check, ruff format --check, django-upgrade,
## detect-private-key, mypy --strict on resilience, gateway_client, merchant_client); CI runs it
## before make test.
lint: $(VENV)/.lint-installed
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pre-commit run --all-files --show-diff-on-failure

## make audit: the locked dependencies against the known vulnerabilities (pip-audit, the PyPI
## advisory database): the runtime image's (requirements/runtime.txt) and every tool's
## (requirements/bench.txt, the full resolution). Exact pins and hashes, nothing resolved
## (--require-hashes --disable-pip); a package it cannot check fails the run (--strict). Needs
## pypi.org, so it is not part of make test; pip-audit lives in a virtualenv of its own
## (.venv-audit) and never touches the project's. docs/security.md, "Dependencies".
PIP_AUDIT_VERSION := 2.10.1
AUDIT_VENV := .venv-audit
AUDITED := requirements/runtime.txt requirements/bench.txt
.PHONY: audit
$(AUDIT_VENV)/.pip-audit-$(PIP_AUDIT_VERSION):
	$(PYTHON) -m venv $(AUDIT_VENV)
	$(AUDIT_VENV)/bin/python -m pip install --quiet pip-audit==$(PIP_AUDIT_VERSION)
	@touch $@
audit: $(AUDIT_VENV)/.pip-audit-$(PIP_AUDIT_VERSION)
	$(AUDIT_VENV)/bin/pip-audit --strict --require-hashes --disable-pip --progress-spinner off \
	  $(foreach file,$(AUDITED),--requirement $(file))

## make pin-images: pin every image of the Dockerfile and docker-compose.yml to the digest its
## tag names now on Docker Hub (scripts/pin_images.py; review the diff). Needs the network.
.PHONY: pin-images
pin-images: $(VENV)/.local-installed
	$(BIN)/python scripts/pin_images.py

## make test-broker-restarts: the worker against a broker killed three times with tasks in
## flight, RUNS times (default 10), each run counted; make test runs it once
## (docs/operations.md, "The Celery worker and its broker").
RUNS ?= 10
.PHONY: test-broker-restarts
test-broker-restarts: $(VENV)/.test-installed
	@passed=0; for i in $$(seq 1 $(RUNS)); do \
	  $(BIN)/python -m pytest -q -m broker_restarts tests/e2e/test_broker_restart.py \
	    && passed=$$((passed + 1)); done; \
	echo "broker restarts: $$passed of $(RUNS) runs passed"; [ $$passed -eq $(RUNS) ]

## Stop the embedded PostgreSQL and the embedded Redis (started when their URLs are unset).
db-stop: $(VENV)/.local-installed
	$(BIN)/python -m devtools.embedded_db stop
	$(BIN)/python -m devtools.embedded_redis stop

clean:
	rm -rf $(VENV) .celery staticfiles

## make demo: real requests through the API against a failing sandbox acquirer, then one payment
## through the stripe connector (localstripe); needs `make run` running in another terminal. DEMO_ARGS="--api URL --sandbox URL --api-key KEY" to point it
## elsewhere.
.PHONY: demo
demo: $(VENV)/.local-installed
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

## make bench: the benchmarks of docs/benchmarks.md, one after the other (about 35 minutes),
## against the server of DATABASE_URL (or the embedded one), in a database of their own
## (BENCH_DATABASE, default payments_bench). Needs wrk and valgrind (installed here with apt-get
## when run as root) and pgbench (PostgreSQL's). BENCH="throughput retry_storm" runs only those.
BENCH ?= throughput stack_floor instructions hot_path_ab log_cost tracing_cost index_cost endpoint_compare \
         replay_latency same_key_storm client_compare retry_storm noisy_neighbour breaker_overhead capacity \
         webhook_fairness webhook_delivery \
         notifications_time_to_final \
         latency
.PHONY: bench
bench: $(VENV)/.bench-installed
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && apt-get install -y -qq wrk; } \
	  || { echo "wrk is needed: apt-get install wrk (Debian/Ubuntu) or brew install wrk"; exit 1; }
	@command -v valgrind >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && apt-get install -y -qq valgrind; } \
	  || { echo "valgrind is needed: apt-get install valgrind (Debian/Ubuntu)"; exit 1; }
	@for b in $(BENCH); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit $$?; done

## make bench-webhooks: bench/webhook_fairness.py alone (a few minutes; docs/benchmarks.md,
## "Webhook fan-out and fairness"): payment latency with 0 and 16 webhook endpoints, and a
## merchant's event delay beside a neighbour with slow endpoints, ratios printed.
## WEBHOOK_BENCH_ARGS="--slow-seconds 10" passes options.
.PHONY: bench-webhooks
bench-webhooks: $(VENV)/.bench-installed
	$(BIN)/python bench/webhook_fairness.py $(WEBHOOK_BENCH_ARGS)

## make bench-webhook-delivery: bench/webhook_delivery.py alone (about 10 minutes; docs/benchmarks.md,
## "Webhook deliveries to slow endpoints"): deliveries per second per worker process with
## endpoints answering at once and in 500 ms, and beside a hanging one, for the threads worker
## (ADR 0050) and the prefork one. WEBHOOK_DELIVERY_BENCH_ARGS="--workers threads --rounds 1".
.PHONY: bench-webhook-delivery
bench-webhook-delivery: $(VENV)/.bench-installed
	$(BIN)/python bench/webhook_delivery.py $(WEBHOOK_DELIVERY_BENCH_ARGS)

## make bench-tracing: the CPU per payment with tracing off and on with a 10 % sampler, the
## ratio printed (bench/tracing_cost.py, ADR 0044; about 2 minutes). BENCH_ARGS="--rounds 2".
.PHONY: bench-tracing
bench-tracing: $(VENV)/.bench-installed
	$(BIN)/python bench/tracing_cost.py $(BENCH_ARGS)

## make bench-latency: the service with an acquirer answering at once, in 300 ms and in 1 s, in
## rotating rounds (bench/latency.py, about 3 minutes; docs/benchmarks.md, "A slow acquirer").
## BENCH_LATENCY_ARGS="--server gevent" measures ADR 0048's alternative.
.PHONY: bench-latency
bench-latency: $(VENV)/.bench-installed
	$(BIN)/python bench/latency.py $(BENCH_LATENCY_ARGS)

## make campaign: the fault campaigns in full (about 30 minutes): same-key storms, crash
## injection, the fault matrix, Schemathesis (>= 10,000 requests), a 10-minute soak and the
## secrets grep, on the stack started as subprocesses; the ledger audit is the oracle. Redis:
## REDIS_URL, or the embedded server; the database is <DATABASE_URL's name>_campaigns
## (or CAMPAIGN_DATABASE_URL), recreated. make campaign-short: the short versions (about 4
## minutes, soak 60 s). CAMPAIGN_ARGS="storms crash --out DIR" picks campaigns and options.
.PHONY: campaign campaign-short
campaign: $(VENV)/.test-installed
	$(BIN)/python -m campaigns $(if $(CAMPAIGN_ARGS),$(CAMPAIGN_ARGS),all)

campaign-short: $(VENV)/.test-installed
	$(BIN)/python -m campaigns --short $(if $(CAMPAIGN_ARGS),$(CAMPAIGN_ARGS),all)

## make campaign-openapi: the Schemathesis campaign alone (every check, the stateful phase
## through the document's links, >= 10,000 requests; ADR 0043), with its ledger audit.
.PHONY: campaign-openapi
campaign-openapi: $(VENV)/.test-installed
	$(BIN)/python -m campaigns schemathesis $(CAMPAIGN_ARGS)

## make client: a Python client generated from the OpenAPI document with openapi-python-client,
## in build/payments_api_client (docs/api.md); the document itself in build/openapi.json.
.PHONY: client
client: $(VENV)/.test-installed
	@mkdir -p build
	$(BIN)/python manage.py spectacular --format openapi-json --file build/openapi.json
	$(BIN)/openapi-python-client generate --path build/openapi.json \
	  --output-path build/payments_api_client --meta none --overwrite

## make test-pgbouncer: the concurrency and end-to-end tests and a short throughput run through
## a private PgBouncer in transaction pooling mode (docs/scaling.md). Needs Debian's pgbouncer
## (apt-get install pgbouncer) and DATABASE_URL over TCP, so it is not part of make test.
.PHONY: test-pgbouncer
test-pgbouncer: $(VENV)/.test-installed
	$(BIN)/python scripts/test_pgbouncer.py $(PGBOUNCER_ARGS)
