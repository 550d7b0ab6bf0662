# Two commands for a new user: `make run` and `make test`. Everything installs from pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test install lint db-stop clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit("Python 3.11+ is required" if sys.version_info < (3, 11) else 0)'
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(STAMP)

install: $(STAMP)

## make run: migrate, create a demo merchant, then the API, worker, beat and sandbox acquirer.
## Without the Redis URLs they share the embedded Redis (broker and acquirer state, .redis/).
## The sandbox keeps its charges in .sandbox/ across restarts (docs/sandbox.md).
run: install
	@mkdir -p .celery
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	$(BIN)/python manage.py demo_setup
	@PATH="$(CURDIR)/$(BIN):$$PATH" SANDBOX_ACQUIRER_DATA_DIR="$(CURDIR)/.sandbox" \
	  $(BIN)/honcho start -f Procfile; rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 130 ] && [ $$rc -ne 143 ]; then \
	    echo "*** make run: a process exited (rc=$$rc; its 'stopped (rc=...)' line is above)," \
	         "so honcho stopped all the others. Nothing restarts it here; see" \
	         "docs/operations.md, 'Supervision and heartbeats'. ***" >&2; fi; exit $$rc

## make test: the whole suite on PostgreSQL (DATABASE_URL, or the embedded server) and Redis
## (REDIS_URL, or the embedded server).
test: install
	$(BIN)/python -m pytest

## make lint: every pre-commit hook on every file (ruff check, ruff format --check, django-upgrade,
## detect-private-key, mypy --strict on gateway_client); CI runs it before make test.
lint: install
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pre-commit run --all-files --show-diff-on-failure

## Stop the embedded PostgreSQL and the embedded Redis (started when their URLs are unset).
db-stop: install
	$(BIN)/python -m config.embedded_db stop
	$(BIN)/python -m config.embedded_redis stop

clean:
	rm -rf $(VENV) .celery staticfiles

## make demo: real requests through the API against a failing sandbox acquirer; needs `make run`
## running in another terminal. DEMO_ARGS="--api URL --sandbox URL --api-key KEY" to point it
## elsewhere.
.PHONY: demo
demo: install
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

## make bench: the benchmarks of docs/benchmarks.md, one after the other (about 15 minutes),
## against the server of DATABASE_URL (or the embedded one), in a database of their own
## (BENCH_DATABASE, default payments_bench). Needs wrk (installed here with apt-get when run as
## root) and pgbench (PostgreSQL's). BENCH="throughput retry_storm" runs only those.
BENCH ?= throughput endpoint_compare replay_latency same_key_storm client_compare retry_storm
.PHONY: bench
$(VENV)/.bench-stamp: pyproject.toml | $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $@

bench: install $(VENV)/.bench-stamp
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && apt-get update -qq && apt-get install -y -qq wrk; } \
	  || { echo "wrk is needed: apt-get install wrk (Debian/Ubuntu) or brew install wrk"; exit 1; }
	@for b in $(BENCH); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py || exit $$?; done

## make campaign: the fault campaigns in full (about 30 minutes): same-key storms, crash
## injection, the fault matrix, Schemathesis (>= 10,000 requests), a 10-minute soak and the
## secrets grep, on the stack started as subprocesses; the ledger audit is the oracle. Redis:
## REDIS_URL, or the embedded server; the database is <DATABASE_URL's name>_campaigns
## (or CAMPAIGN_DATABASE_URL), recreated. make campaign-short: the short versions (about 4
## minutes, soak 60 s). CAMPAIGN_ARGS="storms crash --out DIR" picks campaigns and options.
.PHONY: campaign campaign-short
campaign: install
	$(BIN)/python -m bench.campaigns $(if $(CAMPAIGN_ARGS),$(CAMPAIGN_ARGS),all)

campaign-short: install
	$(BIN)/python -m bench.campaigns --short $(if $(CAMPAIGN_ARGS),$(CAMPAIGN_ARGS),all)
