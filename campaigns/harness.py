"""The shared harness of the fault campaigns: the project's own stack as subprocesses.

:class:`Stack` starts, as a user would: a fresh PostgreSQL database (``manage.py migrate``),
the sandbox acquirer (``python -m sandbox_acquirer``), gunicorn with several workers, a Celery
worker on Redis with a queue of its own, and Celery beat with a short sweep interval. Every
process logs to a file in the run's output directory (the secrets campaign greps them all).
Campaigns talk to the stack over HTTP (the API, the sandbox's stats and settlement listing),
read the database with plain SQL and ask the operator's command (``manage.py
audit_acquirer --json``) for the ledger audit, their oracle.

Nothing here imports Django: the campaigns are black-box clients of the service.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import secrets
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from devtools.embedded_redis import TOOLS_DB, celery_broker_url, embedded_redis
from tests.support.adyen import AdyenFake
from tests.support.fault_proxy import FaultProxy
from tests.support.localstripe import LocalStripe
from tests.support.processes import created_merchants

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
SANDBOX_READY = "sandbox acquirer listening on "
#: Settings the stack runs with. The campaigns need the ledger app (``audit_acquirer``); this
#: module adds it to config.settings.local when config does not list it yet.
DEFAULT_SETTINGS = "campaigns.settings"

#: Service settings of every campaign stack: reconciliation resolves in seconds, not minutes,
#: and gives up (needs_review) after a short maximum age so a campaign ends.
#: The acquirers' notification signing secret (Standard Webhooks; campaigns/notifications.py
#: has the sandbox send notifications signed with it), in the variable ACQUIRERS names.
NOTIFICATION_SECRET = "whsec_" + base64.b64encode(b"campaign-notification-secret-32b").decode()
NOTIFICATION_SECRET_ENV = "CAMPAIGN_NOTIFICATION_SECRET"  # noqa: S105 - a variable's name
#: The variables the stripe and adyen acquirers' secrets are read from (``api_key_env``).
STRIPE_KEY_ENV = "CAMPAIGN_STRIPE_SECRET_KEY"
ADYEN_KEY_ENV = "CAMPAIGN_ADYEN_API_KEY"
ADYEN_HMAC_ENV = "CAMPAIGN_ADYEN_HMAC_KEYS"

SERVICE_ENV: dict[str, str] = {
    "DJANGO_DEBUG": "false",
    "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
    "PYTHONUNBUFFERED": "1",
    "LOG_LEVEL": "DEBUG",
    # What production writes (observability/log_config.py): the secrets campaign checks every line
    # of every process is the project's JSON, so no process kept a handler of its own.
    "LOG_FORMAT": "json",
    # A beat entry named after this card number, reconciling "pay_<it>" every 2 s
    # (campaigns/settings.py): beat's and the worker's own lines carry it (the secrets
    # campaign's CARDS has it).
    "CAMPAIGN_BEAT_CARD": "6011111111111117",
    "IDEMPOTENCY_KEY_LOCK_TIMEOUT_SECONDS": "10",  # above the API's 8 s acquirer deadline
    # The storms send one merchant's requests faster and more at once than its default limits.
    "MERCHANT_RATE_LIMIT_REQUESTS": "0",
    "MERCHANT_CONCURRENT_PAYMENTS": "0",
    # Schemathesis sends its unauthenticated and wrong-key cases from the one address every
    # campaign client shares: past 20 a minute they would lock the others out (ADR 0018).
    "API_AUTH_FAILURE_LIMIT": "0",
    "RECONCILIATION_SWEEP_INTERVAL_SECONDS": "1",
    # Deferred submission (campaigns/deferred.py): beat's sweep every second, backoffs
    # of seconds, and the fleet's submission rate half the deferred campaign's capacity.
    "DEFERRED_SWEEP_INTERVAL_SECONDS": "1",
    "DEFERRED_BACKOFF_BASE_SECONDS": "1",
    "DEFERRED_BACKOFF_CAP_SECONDS": "4",
    "DEFERRED_SUBMIT_RATE_PER_SECOND": "10",
    # Webhooks: the retry schedule compressed to seconds and the breaker's open period short,
    # so a campaign's flaky endpoint drains in seconds, not hours (campaigns/webhooks.py).
    "WEBHOOK_SWEEP_INTERVAL_SECONDS": "1",
    "WEBHOOK_RETRY_SCHEDULE_SECONDS": "1,2,4",
    "WEBHOOK_BREAKER_OPEN_SECONDS": "2",
    "RECONCILIATION_FIRST_CHECK_SECONDS": "1",
    "RECONCILIATION_GRACE_SECONDS": "3",
    "RECONCILIATION_BACKOFF_BASE_SECONDS": "1",
    "RECONCILIATION_BACKOFF_CAP_SECONDS": "3",
    "RECONCILIATION_MAX_AGE_SECONDS": "16",
    "RECONCILIATION_BATCH_SIZE": "20",
    "RECONCILIATION_ACQUIRER_DEADLINE_SECONDS": "8",
    "RECONCILIATION_LEASE_SECONDS": "200",
    "CELERY_TASK_TIME_LIMIT_SECONDS": "190",
    "PAYMENTS_PROCESSING_RETRY_AFTER_SECONDS": "1",
    "DATABASE_CONN_MAX_AGE": "60",
    # The stack's sandbox is the acquirer "alpha"; the second sandbox "beta" (see
    # Stack.acquirers_json) is configured only where the failover campaign routes to it.
    "ACQUIRER_NAME": "alpha",
}


class CampaignError(RuntimeError):
    """The stack could not be started or queried (not a violation: the campaign did not run)."""


# --- results ------------------------------------------------------------------------------


@dataclass
class CampaignResult:
    """What one campaign measured (``figures``, printed in order) and what it found wrong."""

    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def check(self, condition: bool, violation: str) -> None:
        """Record ``violation`` unless ``condition`` holds."""
        if not condition:
            self.violations.append(violation)

    def report(self) -> str:
        width = max((len(k) for k in self.figures), default=10)
        lines = [f"== campaign {self.name} " + "=" * max(0, 60 - len(self.name))]
        for key, value in self.figures.items():
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
            lines.append(f"  {key:<{width}}  {value}")
        lines.extend(f"  note: {note}" for note in self.notes)
        lines.append(f"  time  {self.seconds:.1f} s")
        if self.violations:
            lines.append(f"  VIOLATIONS ({len(self.violations)}):")
            lines.extend(f"    - {v}" for v in self.violations[:50])
            if len(self.violations) > 50:
                lines.append(f"    ... and {len(self.violations) - 50} more")
        else:
            lines.append("  result: OK (no violation)")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "figures": self.figures,
            "violations": self.violations,
            "notes": self.notes,
        }


# --- the database -------------------------------------------------------------------------


def database_url_with_name(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server (TCP or Unix socket)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(name)))


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


def default_campaign_database_url() -> str:
    """``CAMPAIGN_DATABASE_URL``; else the server of ``DATABASE_URL`` with the database
    ``<name>_campaigns``; else the embedded server (``.pgdata/``) with ``payments_campaigns``."""
    explicit = os.environ.get("CAMPAIGN_DATABASE_URL")
    if explicit:
        return explicit
    base = os.environ.get("DATABASE_URL")
    if base:
        name = database_name(base) or "payments"
        return database_url_with_name(
            base.replace("postgres://", "postgresql://", 1), f"{name}_campaigns"
        )
    sys.path.insert(0, str(ROOT))
    from devtools.embedded_db import embedded_database_config

    settings = embedded_database_config()
    return f"postgresql://postgres@/payments_campaigns?host={quote(settings['HOST'])}"


def recreate_database(url: str) -> None:
    """Drop and create the database of ``url``. Refuses names not ending in ``campaigns``: a
    campaign starts from an empty database and never touches anyone else's."""
    import psycopg

    name = database_name(url)
    if not name.endswith("campaigns"):
        raise CampaignError(
            f"refusing to recreate database {name!r}: its name must end in 'campaigns'"
        )
    admin_url = database_url_with_name(url, "postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        # Processes still connected belong to another run on the same database (or one that
        # was killed without stopping its children): dropping under them would leave them
        # writing to the new database with another acquirer. Refuse instead.
        deadline = time.monotonic() + 10
        while True:
            (users,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [name]
            ).fetchone()
            if not users:
                break
            if time.monotonic() > deadline:
                raise CampaignError(
                    f"database {name!r} has {users} connections: is another campaign running "
                    "on it (or left behind by a killed run)? Stop it or use another database."
                )
            time.sleep(0.5)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    import psycopg

    name = database_name(url)
    if not name.endswith("campaigns"):
        return
    with psycopg.connect(database_url_with_name(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- processes ------------------------------------------------------------------------------


class Process:
    """A subprocess of the stack, its output in ``log_path``."""

    def __init__(self, name: str, popen: subprocess.Popen, log_path: Path) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()

    def rss_bytes(self) -> dict[str, int]:
        """RSS of this process and each child process, by ``name[:role pid]``."""
        import psutil

        try:
            proc = psutil.Process(self.pid)
            found = {self.name: proc.memory_info().rss}
            for child in proc.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    found[f"{self.name}:child {child.pid}"] = child.memory_info().rss
        except psutil.Error:
            return {}
        return found


def _spawn(name: str, command: Sequence[str], env: dict[str, str], log_path: Path) -> Process:
    log = open(log_path, "ab")  # noqa: SIM115 - owned by the child until it exits
    try:
        popen = subprocess.Popen(  # noqa: S603
            list(command),
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        log.close()
    return Process(name, popen, log_path)


def wait_until(
    condition: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise CampaignError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sandbox(Process):
    """The sandbox acquirer: control API and stats over HTTP."""

    def __init__(
        self,
        popen: subprocess.Popen,
        log_path: Path,
        url: str,
        api_key: str,
        extra_args: Sequence[str] = (),
        name: str = "sandbox",
    ) -> None:
        super().__init__(name, popen, log_path)
        self.url = url
        self.api_key = api_key
        self.extra_args = tuple(extra_args)
        self.http = httpx.Client(base_url=url, timeout=30, trust_env=False)

    @classmethod
    def start(
        cls,
        log_path: Path,
        api_key: str,
        extra_args: Sequence[str] = (),
        *,
        port: int = 0,
        name: str = "sandbox",
    ) -> Sandbox:
        popen, url = cls._launch(log_path, api_key, extra_args, port)
        return cls(popen, log_path, url, api_key, extra_args, name)

    @staticmethod
    def _launch(
        log_path: Path, api_key: str, extra_args: Sequence[str], port: int
    ) -> tuple[subprocess.Popen, str]:
        command = [
            PYTHON,
            "-m",
            "sandbox_acquirer",
            "--port",
            str(port),
            "--api-key",
            api_key,
            *extra_args,
        ]
        log = open(log_path, "ab")  # noqa: SIM115
        try:
            popen = subprocess.Popen(  # noqa: S603
                command,
                cwd=ROOT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        finally:
            log.close()
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert popen.stdout is not None
            for line in popen.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True, name="sandbox-stdout").start()
        try:
            line = lines.get(timeout=20)
        except queue.Empty:
            line = None
        if not line or not line.startswith(SANDBOX_READY):
            popen.kill()
            raise CampaignError(f"the sandbox did not start; see {log_path}")
        return popen, line[len(SANDBOX_READY) :].strip()

    def down(self) -> None:
        """Stop the process (SIGTERM): its port then refuses connections, a real
        ``ECONNREFUSED``, unlike the modelled ``"refused"`` outage. Keep a ``--data-dir`` in
        ``extra_args`` so :meth:`up` finds its charges again."""
        super().stop()

    def up(self) -> None:
        """Start the process again on the same port with the same arguments."""
        port = int(urlsplit(self.url).port or 0)
        self.popen, _ = self._launch(self.log_path, self.api_key, self.extra_args, port)

    def stats(self) -> dict[str, Any]:
        response = self.http.get("/_sandbox/stats")
        response.raise_for_status()
        return response.json()

    def set_condition(self, name: str, **fields: Any) -> dict[str, Any]:
        response = self.http.post(f"/_sandbox/conditions/{name}", json=fields)
        if response.status_code != 200:
            raise CampaignError(f"sandbox refused condition {name}: {response.text}")
        return response.json()[name]

    def clear_conditions(self) -> None:
        self.http.delete("/_sandbox/conditions").raise_for_status()

    def listing(self, what: str, since: datetime) -> list[dict[str, Any]]:
        """The settlement listing ``what`` (``charges``: each charge with its capture state
        now; ``refunds``: every refund record) from a minute before ``since`` (its times are
        to the second; the rows of before belong to no one else but the stack's campaigns),
        every page, oldest first."""
        rows: list[dict[str, Any]] = []
        query = {"since": (since - timedelta(minutes=1)).isoformat(), "limit": "10000"}
        while True:
            response = self.http.get(
                f"/_sandbox/{what}",
                params=query,
                headers={"Authorization": f"Bearer {self.api_key}"},
            )
            if response.status_code != 200:
                raise CampaignError(f"the sandbox's {what} listing answered {response.status_code}")
            page = response.json()
            rows.extend(page["data"])
            if not page["has_more"] or not page["data"]:
                return rows
            query["starting_after"] = page["data"][-1]["id"]

    def stop(self, timeout: float = 15.0) -> None:
        self.http.close()
        super().stop(timeout)


class Web(Process):
    """A gunicorn master (and its workers) serving the API at ``url``."""

    def __init__(self, name: str, popen: subprocess.Popen, log_path: Path, url: str) -> None:
        super().__init__(name, popen, log_path)
        self.url = url

    def up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2, trust_env=False).status_code == 200
        except httpx.HTTPError:
            return False

    def breaker_states(self) -> dict[str, str]:
        """Each circuit breaker's state as ``/metrics`` reports it: ``{group: state}``."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=10, trust_env=False).text
        return {
            sample.labels["group"]: sample.labels["state"]
            for family in text_string_to_metric_families(text)
            if family.name == "payments_acquirer_breaker_state"
            for sample in family.samples
            if sample.value == 1
        }

    def workers_booted(self) -> int:
        """How many times a worker booted (initial workers included)."""
        return self.log_text().count("Booting worker with pid")


# --- the stack ------------------------------------------------------------------------------


def default_redis_url() -> str:
    """``REDIS_URL``, or the embedded server's tools database (started if needed)."""
    return os.environ.get("REDIS_URL") or embedded_redis().url(TOOLS_DB)


@dataclass
class StackOptions:
    out_dir: Path
    database_url: str = field(default_factory=default_campaign_database_url)
    #: redis-py URL; unset ``REDIS_URL``: the project's embedded Redis (devtools/embedded_redis.py).
    redis_url: str = field(default_factory=default_redis_url)
    settings_module: str = field(
        default_factory=lambda: os.environ.get("CAMPAIGN_DJANGO_SETTINGS", DEFAULT_SETTINGS)
    )
    web_workers: int = 3
    web_threads: int = 4
    celery_concurrency: int = 2
    recreate_database: bool = True
    drop_database_at_exit: bool = False
    env: dict[str, str] = field(default_factory=dict)


class Stack:
    """The service's processes for a campaign run. Use :meth:`running` (a context manager)."""

    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.out_dir = options.out_dir
        # Letters only: the tag goes into references, and hex digits next to a counter could
        # form a 13-digit run that the API rightly refuses as card data.
        self.tag = "".join(secrets.choice(string.ascii_lowercase) for _ in range(10))
        self.acquirer_api_key = f"sk_acq_campaign_{uuid.uuid4().hex}"
        self.queue = f"campaign-{self.tag}"
        self.namespace = f"campaign:{self.tag}:gateway"
        self.sandbox: Sandbox | None = None
        #: The second acquirer, "beta" (the failover campaign's), its own key.
        self.beta: Sandbox | None = None
        self.beta_api_key = f"sk_acq_campaign_beta_{uuid.uuid4().hex}"
        #: A Stripe-compatible acquirer (localstripe, a separate process, GPL-3.0: never
        #: imported) and the Adyen-compatible fake, each behind a fault proxy (the providers
        #: campaign's outages); "stripe" and "adyen" in ACQUIRERS.
        self.stripe: LocalStripe | None = None
        self.adyen: AdyenFake | None = None
        self.stripe_proxy: FaultProxy | None = None
        self.adyen_proxy: FaultProxy | None = None
        self.web: Web | None = None
        self.processes: list[Process] = []
        self.started_at = datetime.now(UTC)
        self.merchant_keys: list[str] = []  # raw API keys: never written to a file
        self._prepared: dict[str, tuple[int, str]] = {}
        self._db = None

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    @contextmanager
    def running(cls, options: StackOptions) -> Iterator[Stack]:
        stack = cls(options)
        try:
            stack.start()
            yield stack
        finally:
            stack.stop()

    def acquirers_json(self, *names: str, adyen_takes_sandbox_tokens: bool = False) -> str:
        """The ``ACQUIRERS`` value configuring ``names`` (``alpha``: the stack's sandbox,
        priority 10; ``beta``: the second one, priority 20; ``stripe``: localstripe behind its
        fault proxy, 30; ``adyen``: the Adyen-compatible fake behind its own, 40), in that
        order. ``adyen_takes_sandbox_tokens``: the fake is declared to charge the sandbox's
        ``tok_`` tokens too (it reads ``tok_visa`` as its stored payment method ``visa``), so
        a ``tok_`` payment has two acquirers (ADR 0051)."""
        assert self.sandbox is not None and self.beta is not None
        known: dict[str, dict[str, Any]] = {
            "alpha": {
                "base_url": self.sandbox.url,
                "api_key": self.acquirer_api_key,
                "webhook_secret_env": NOTIFICATION_SECRET_ENV,
            },
            "beta": {
                "base_url": self.beta.url,
                "api_key": self.beta_api_key,
                "webhook_secret_env": NOTIFICATION_SECRET_ENV,
            },
        }
        if self.stripe_proxy is not None and self.adyen_proxy is not None:
            known["stripe"] = {
                "type": "stripe", "base_url": self.stripe_proxy.url,
                "api_key_env": STRIPE_KEY_ENV, "api_version": "2024-06-20",
                # localstripe ignores Idempotency-Key (ADR 0040).
                "policy": {"honours_idempotency_keys": False},
            }  # fmt: skip
            known["adyen"] = {
                "type": "adyen", "base_url": self.adyen_proxy.url + "/v71",
                "api_key_env": ADYEN_KEY_ENV, "merchant_account": "AcmeECOM",
                "return_url": "https://shop.example/adyen/return",
                "webhook_secret_env": ADYEN_HMAC_ENV,
            }  # fmt: skip
            if adyen_takes_sandbox_tokens:
                known["adyen"]["payment_methods"] = ["adyen_stored_payment_method", "sandbox_token"]
        priority = {"alpha": 10, "beta": 20, "stripe": 30, "adyen": 40}
        return json.dumps(
            [{"name": name, **known[name], "priority": priority[name]} for name in names]
        )

    def env(self, **overrides: str) -> dict[str, str]:
        """Every process's environment: the service settings, and ``ACQUIRERS`` with alpha
        only (the campaigns' payments go to the stack's sandbox) unless overridden."""
        assert self.sandbox is not None
        return {
            **os.environ,
            **SERVICE_ENV,
            "DJANGO_SETTINGS_MODULE": self.options.settings_module,
            "DATABASE_URL": self.options.database_url,
            "ACQUIRER_BASE_URL": self.sandbox.url,
            "ACQUIRER_API_KEY": self.acquirer_api_key,
            "ACQUIRERS": self.acquirers_json("alpha"),
            "ACQUIRER_STATE_REDIS_URL": self.options.redis_url,
            "ACQUIRER_STATE_NAMESPACE": self.namespace,
            "CELERY_BROKER_URL": celery_broker_url(self.options.redis_url),
            "CELERY_DEFAULT_QUEUE": self.queue,
            "LEDGER_AUDIT_CSV_DIR": str(self.out_dir / "audits"),
            NOTIFICATION_SECRET_ENV: NOTIFICATION_SECRET,
            **self._provider_secrets(),
            **self.options.env,
            **overrides,
        }

    def _provider_secrets(self) -> dict[str, str]:
        if self.stripe is None or self.adyen is None:
            return {}
        return {
            STRIPE_KEY_ENV: self.stripe.api_key,
            ADYEN_KEY_ENV: self.adyen.api_key,
            ADYEN_HMAC_ENV: self.adyen.hmac_key,
        }

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "logs").mkdir(exist_ok=True)
        self._check_redis()
        if self.options.recreate_database:
            recreate_database(self.options.database_url)
        faults = ("--hang-seconds", "5", "--trickle-seconds-per-byte", "1")
        # alpha keeps its records in a journal: the failover campaign stops and restarts it.
        self.sandbox = Sandbox.start(
            self.log("sandbox"),
            self.acquirer_api_key,
            (*faults, "--data-dir", str(self.out_dir / "sandbox-alpha")),
        )
        self.processes.append(self.sandbox)
        self.beta = Sandbox.start(
            self.log("sandbox-beta"), self.beta_api_key, faults, name="sandbox-beta"
        )
        self.processes.append(self.beta)
        self.stripe = LocalStripe.start()
        self.adyen = AdyenFake.start()
        self.stripe_proxy = FaultProxy("127.0.0.1", self.stripe.port)
        self.adyen_proxy = FaultProxy("127.0.0.1", self.adyen.port)
        self.manage("migrate", "--noinput", log_name="migrate")
        self.web = self.start_web("web")
        self.start_celery()

    def start_web(
        self,
        name: str,
        *,
        workers: int | None = None,
        threads: int | None = None,
        wait: bool = True,
        **env: str,
    ) -> Web:
        """Another gunicorn (e.g. one that crashes at a point), on its own port; with
        ``wait=False`` the caller waits for ``web.up()``."""
        port = free_port()
        command = [
            PYTHON,
            "-m",
            "gunicorn",
            "-c",
            "config/gunicorn.conf.py",
            "config.wsgi:application",
        ]
        process_env = self.env(
            WEB_BIND=f"127.0.0.1:{port}",
            WEB_CONCURRENCY=str(workers or self.options.web_workers),
            WEB_THREADS=str(threads or self.options.web_threads),
            **env,
        )
        log_path = self.log(name)
        base = _spawn(name, command, process_env, log_path)
        web = Web(name, base.popen, log_path, f"http://127.0.0.1:{port}")
        self.processes.append(web)
        if wait:
            wait_until(web.up, timeout=60, what=f"gunicorn {name}")
        return web

    def start_celery(self) -> None:
        worker = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(self.options.celery_concurrency),
            "--loglevel",
            "DEBUG",
            "-n",
            f"{self.queue}@%h",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ]
        beat = [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "config",
            "beat",
            "--loglevel",
            "DEBUG",
            "--schedule",
            str(self.out_dir / "beat-schedule"),
        ]
        # Reconciliation goes to each payment's acquirer: the worker knows every one.
        both = self.env(ACQUIRERS=self.acquirers_json("alpha", "beta", "stripe", "adyen"))
        worker_process = _spawn("worker", worker, both, self.log("worker"))
        self.processes.append(worker_process)
        self.processes.append(_spawn("beat", beat, both, self.log("beat")))
        wait_until(
            lambda: " ready." in worker_process.log_text() or not worker_process.alive(),
            timeout=60,
            what="the Celery worker",
        )
        if not worker_process.alive():
            raise CampaignError(f"the Celery worker died; see {worker_process.log_path}")

    def stop(self) -> None:
        # SIGTERM to every process first, then wait for each: they shut down in parallel.
        for process in reversed(self.processes):
            if process.alive():
                process.popen.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            with contextlib.suppress(Exception):  # a harness: stop everything we can
                process.stop()
        for proxy in (self.stripe_proxy, self.adyen_proxy):
            if proxy is not None:
                proxy.close()
        for provider in (self.stripe, self.adyen):
            if provider is not None:
                with contextlib.suppress(Exception):  # a harness: stop everything we can
                    provider.stop()
        if self._db is not None:
            self._db.close()
            self._db = None
        self._cleanup_redis()
        if self.options.drop_database_at_exit:
            with contextlib.suppress(Exception):  # a harness: clean up what we can
                drop_database(self.options.database_url)

    def log(self, name: str) -> Path:
        return self.out_dir / "logs" / f"{name}.log"

    def service_logs(self) -> list[Path]:
        return sorted((self.out_dir / "logs").glob("*.log"))

    def _check_redis(self) -> None:
        import redis

        try:
            redis.Redis.from_url(self.options.redis_url, socket_timeout=3).ping()
        except redis.RedisError as exc:
            raise CampaignError(
                f"Redis is not reachable at {self.options.redis_url} ({exc}); start it or set "
                "REDIS_URL"
            ) from exc

    def reset_acquirer_state(self) -> int:
        """Give the next campaign a known acquirer state: delete the stack's gateway keys in
        Redis (circuit breakers, rate gate, retry budget, AIMD limits and slots), so every
        process starts from closed breakers, an open gate and a full budget, whatever the
        campaign before left (a breaker the fuzzing opened, a gate a 429 closed). Returns the
        keys deleted. The processes keep running: the gateway client recreates each key on
        its next use."""
        import redis

        client = redis.Redis.from_url(self.options.redis_url, socket_timeout=3)
        keys = list(client.scan_iter(match=f"{self.namespace}:*", count=500))
        if keys:
            client.delete(*keys)
        return len(keys)

    def _cleanup_redis(self) -> None:
        import redis

        try:
            client = redis.Redis.from_url(self.options.redis_url, socket_timeout=3)
            keys = list(client.scan_iter(match=f"{self.namespace}*", count=500))
            keys += list(client.scan_iter(match=f"*{self.queue}*", count=500))
            if keys:
                client.delete(*keys)
        except redis.RedisError:
            pass

    # -- commands, merchants, SQL, audit ---------------------------------------------------

    def manage(
        self,
        *args: str,
        log_name: str | None = None,
        check: bool = True,
        timeout: float = 300,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """``manage.py ARGS`` with the stack's settings, every acquirer (plus ``env``). Output
        goes to a log file when ``log_name`` is given (never for commands printing secrets),
        else is returned."""
        command = [PYTHON, "manage.py", *args]
        # Every acquirer: an operator's command (the ledger audit) sees every payment's.
        every = self.acquirers_json("alpha", "beta", "stripe", "adyen")
        env = {**self.env(ACQUIRERS=every), **(env or {})}
        if log_name:
            with open(self.log(log_name), "ab") as log:
                result = subprocess.run(  # noqa: S603
                    command,
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                )
        else:
            result = subprocess.run(  # noqa: S603
                command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
            )
        if check and result.returncode != 0:
            raise CampaignError(
                f"manage.py {' '.join(args)} failed ({result.returncode}): "
                f"{(result.stderr or '')[-2000:]}"
            )
        return result

    def prepare_merchants(self, names: Sequence[str]) -> None:
        """Create these merchants now, in one ``create_merchant`` process."""
        result = self.manage("create_merchant", *(f"{name}-{self.tag}" for name in names))
        created = self._created_merchants(result.stdout)
        if len(created) != len(names):
            raise CampaignError(f"create_merchant printed {len(created)} of {len(names)} keys")
        self._prepared.update(zip(names, created, strict=True))

    def create_merchant(self, name: str) -> tuple[int, str]:
        """A merchant of its own for a campaign: (id, raw API key), kept in memory only."""
        if name in self._prepared:
            return self._prepared.pop(name)
        (created,) = self._created_merchants(
            self.manage("create_merchant", f"{name}-{self.tag}").stdout
        )
        return created

    def _created_merchants(self, output: str) -> list[tuple[int, str]]:
        """(id, key) per merchant in ``create_merchant``'s output; the keys are remembered (the
        secrets campaign looks for them)."""
        try:
            created = created_merchants(output)
        except AssertionError as exc:
            raise CampaignError(str(exc)) from None
        self.merchant_keys.extend(key for _, key in created)
        return created

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple]:
        import psycopg

        if self._db is None or self._db.closed:
            self._db = psycopg.connect(self.options.database_url, autocommit=True)
        with self._db.cursor() as cursor:
            cursor.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def audit(self, since: datetime, name: str) -> dict[str, Any]:
        """The ledger audit through the operator's command; its JSON report plus ``exit``."""
        result = self.manage(
            "audit_acquirer",
            "--since",
            since.isoformat(),
            "--json",
            "--csv",
            str(self.out_dir / "audits" / f"{name}.csv"),
            check=False,
        )
        if result.returncode not in (0, 1):
            raise CampaignError(
                f"audit_acquirer failed ({result.returncode}): {result.stderr[-2000:]}"
            )
        report = json.loads(result.stdout)
        report["exit"] = result.returncode
        return report

    def wait_resolved(
        self, since: datetime, *, timeout: float, operations_in_review: bool = False
    ) -> int:
        """Wait until nothing created since ``since`` is unresolved: no payment
        ``processing`` or ``deferred`` and no capture, void or refund ``pending`` (nor
        ``needs_review`` with ``operations_in_review``: one that a provider settles by
        notification, which may still come); returns how many still are (0 unless the
        timeout passed)."""
        deadline = time.monotonic() + timeout
        waiting = ("pending", "needs_review") if operations_in_review else ("pending",)
        while True:
            (count,) = self.sql(
                "SELECT (SELECT count(*) FROM payments_payment WHERE status IN "
                "('processing', 'deferred') "
                "AND created_at >= %s) + (SELECT count(*) FROM payments_paymentoperation "
                "WHERE status = ANY(%s) AND created_at >= %s)",
                [since, list(waiting), since],
            )[0]
            if count == 0 or time.monotonic() > deadline:
                return count
            time.sleep(0.5)

    def operations(self, since: datetime, merchant_id: int) -> list[dict[str, Any]]:
        """The merchant's captures, voids and refunds created since ``since``, each with its
        payment's status and amounts and the merchant's idempotency key."""
        columns = (
            "id",
            "kind",
            "status",
            "failure_code",
            "amount",
            "payment_id",
            "created_at",
            "updated_at",
            "key",
            "payment_status",
            "amount_captured",
            "amount_refunded",
        )
        query = (
            "SELECT o.id, o.kind, o.status, o.failure_code, o.amount, o.payment_id, "
            "o.created_at, o.updated_at, k.key, p.status, p.amount_captured, p.amount_refunded "
            "FROM payments_paymentoperation o JOIN payments_payment p ON p.id = o.payment_id "
            "LEFT JOIN idempotency_idempotencykey k ON k.id = o.idempotency_key_id "
            "WHERE o.created_at >= %s AND p.merchant_id = %s"
        )
        return [
            dict(zip(columns, row, strict=True)) for row in self.sql(query, [since, merchant_id])
        ]

    def payments(self, since: datetime, merchant_id: int | None = None) -> list[dict[str, Any]]:
        query = (
            "SELECT p.id, p.status, p.failure_code, p.decline_code, p.reference, p.amount, "
            "p.currency, p.payment_method, p.created_at, p.updated_at, p.acquirer_reference, "
            "k.key FROM payments_payment p LEFT JOIN idempotency_idempotencykey k "
            "ON k.id = p.idempotency_key_id WHERE p.created_at >= %s"
        )
        params: list[Any] = [since]
        if merchant_id is not None:
            query += " AND p.merchant_id = %s"
            params.append(merchant_id)
        columns = (
            "id",
            "status",
            "failure_code",
            "decline_code",
            "reference",
            "amount",
            "currency",
            "payment_method",
            "created_at",
            "updated_at",
            "acquirer_reference",
            "key",
        )
        return [dict(zip(columns, row, strict=True)) for row in self.sql(query, params)]

    def rss(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for process in self.processes:
            found.update(process.rss_bytes())
        return found


# --- figures shared by the campaigns --------------------------------------------------------


def audit_figures(
    result: CampaignResult, audit: dict[str, Any], *, allow_unresolved: bool = False
) -> None:
    """Put the audit's verdict in ``result`` and a violation for each discrepancy."""
    counts = {k: v for k, v in audit["counts"].items() if v}
    result.figures["audit"] = (
        f"clean ({audit['payments_checked']} payments, {audit['records_checked']} acquirer records)"
        if audit["clean"]
        else f"{audit['discrepancies_total']} discrepancies {counts}"
    )
    result.figures["duplicates (payments charged twice)"] = audit["counts"]["multiple_records"]
    result.figures["lost (records of no payment, payments the acquirer lacks)"] = (
        audit["counts"]["record_unknown_to_us"] + audit["counts"]["payment_unknown_to_acquirer"]
    )
    for row in audit["discrepancies"][:20]:
        result.violations.append(f"audit: {row['category']} {row['payment_id']}: {row['detail']}")
    if len(audit["discrepancies"]) > 20:
        result.violations.append(f"audit: {len(audit['discrepancies']) - 20} more discrepancies")
    processing = [u for u in audit["unresolved"] if u["status"] == "processing"]
    if processing and not allow_unresolved:
        result.violations.append(f"{len(processing)} payments still processing at the audit")


def sandbox_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Requests and injected faults the sandbox saw between two stats snapshots."""
    faults = {
        name: count - before["faults_injected"].get(name, 0)
        for name, count in after["faults_injected"].items()
        if count - before["faults_injected"].get(name, 0)
    }
    unanswered = sum(after["requests_unanswered"].values()) - sum(
        before["requests_unanswered"].values()
    )
    return {
        "acquirer_requests": after["requests_total"] - before["requests_total"] + unanswered,
        "acquirer_records": after["charges_total"] - before["charges_total"],
        "faults": faults,
    }


def status_counts(payments: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for payment in payments:
        label = payment["status"]
        if payment["status"] == "failed":
            label = f"failed/{payment['failure_code']}"
        counts[label] = counts.get(label, 0) + 1
    return dict(sorted(counts.items()))


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]
