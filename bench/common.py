"""What the benchmarks share: the database, the stack as a user starts it, wrk and pgbench.

Every benchmark starts the project's own processes the way the Procfile does (gunicorn with
``config/gunicorn.conf.py``, ``python -m sandbox_acquirer``), on free loopback ports, against a
database of its own (``payments_bench`` by default, or ``$BENCH_DATABASE``, on the PostgreSQL
server that ``DATABASE_URL`` names, or the embedded one): never the development or the test
database. Every figure the benchmarks report is a ratio of two things measured in the same run.
"""

# ruff: noqa: S603 - benchmarks run their own commands (wrk, pgbench, gunicorn, py-spy)

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from glob import glob
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
IMG = ROOT / "docs" / "img"
LUA = ROOT / "bench" / "lua"
#: The API key the benchmarks' sandbox accepts (fake; the sandbox only holds fake data).
SANDBOX_API_KEY = "sandbox_sk_bench"
#: The body of every benchmark payment (a fresh key makes it a new payment).
PAYMENT_BODY = {"amount": 1999, "currency": "EUR", "payment_method": "tok_visa"}
DEFAULT_DATABASE = os.environ.get("BENCH_DATABASE", "payments_bench")


# -- small pure helpers --------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """The nearest-rank percentile (``pct`` in 0-100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, NaN when the denominator is 0."""
    return numerator / denominator if denominator else math.nan


def median(values: Iterable[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def timestamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def write_results(name: str, data: dict[str, Any]) -> Path:
    """Write ``data`` to ``bench/results/<name>-<timestamp>.json`` (not committed)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}-{timestamp()}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return path


def machine_context() -> dict[str, Any]:
    """What the run ran on: cores, memory, load, versions (context for the ratios)."""
    context: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    try:
        context["loadavg_1m"] = os.getloadavg()[0]
        meminfo = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()
        context["mem_gib"] = round(int(meminfo[1]) / 1024 / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    return context


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a Markdown table (so it can be pasted into docs/benchmarks.md)."""
    rows = [[_cell(c) for c in row] for row in rows]
    print("| " + " | ".join(headers) + " |")
    print("| " + " | ".join("---" for _ in headers) + " |")
    for row in rows:
        print("| " + " | ".join(row) + " |")


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)


# -- the database --------------------------------------------------------------------------


@dataclass(frozen=True)
class Database:
    """Where the benchmark database lives (TCP host, or a Unix socket directory)."""

    host: str
    port: int | None
    user: str
    password: str
    name: str

    def url(self) -> str:
        auth = quote(self.user) + (f":{quote(self.password)}" if self.password else "")
        if self.host.startswith("/"):
            return f"postgresql://{auth}@/{self.name}?host={quote(self.host)}"
        return f"postgresql://{auth}@{self.host}:{self.port or 5432}/{self.name}"

    def conninfo(self, name: str | None = None) -> str:
        parts = {"host": self.host, "user": self.user, "dbname": name or self.name}
        if self.port:
            parts["port"] = str(self.port)
        if self.password:
            parts["password"] = self.password
        return " ".join(f"{k}={_conninfo_quote(v)}" for k, v in parts.items())

    def pg_env(self) -> dict[str, str]:
        """libpq variables for pgbench and psql."""
        env = {"PGHOST": self.host, "PGUSER": self.user, "PGDATABASE": self.name}
        if self.port:
            env["PGPORT"] = str(self.port)
        if self.password:
            env["PGPASSWORD"] = self.password
        return env


def _conninfo_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def database_from_env(name: str = DEFAULT_DATABASE) -> Database:
    """The server of ``DATABASE_URL`` (or the embedded one, as ``make run`` does), database
    ``name``."""
    url = os.environ.get("DATABASE_URL", "")
    if url:
        parts = urlsplit(url)
        if parts.scheme not in ("postgres", "postgresql", "pgsql", "postgis"):
            raise SystemExit("DATABASE_URL must point to PostgreSQL.")
        host = parts.hostname or ""
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        host = host or unquote(query.get("host", "")) or "/var/run/postgresql"
        return Database(
            host=host,
            port=parts.port,
            user=unquote(parts.username or "postgres"),
            password=unquote(parts.password or ""),
            name=name,
        )
    from devtools.embedded_db import embedded_database_config

    config = embedded_database_config()
    return Database(config["HOST"], None, config["USER"], config["PASSWORD"], name)


def prepare_database(db: Database, *, truncate: bool = True) -> None:
    """Create the benchmark database if missing, migrate it, and empty the payment tables."""
    import psycopg

    with psycopg.connect(db.conninfo("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db.name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{db.name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "--verbosity", "0"],
        cwd=ROOT,
        env=django_env(db),
        check=True,
    )
    if truncate:
        truncate_payments(db)


def truncate_payments(db: Database) -> None:
    """Empty the payment, event, operation and idempotency-key tables of the benchmark database."""
    import psycopg

    with psycopg.connect(db.conninfo(), autocommit=True) as conn:
        conn.execute(
            "TRUNCATE payments_paymentevent, payments_paymentoperation, payments_dispute, "
            "payments_acquirernotification, payments_payment, "
            "idempotency_idempotencykey"
        )
        conn.execute("VACUUM ANALYZE payments_payment")


def issue_api_key(db: Database, merchant: str = "bench") -> str:
    """A new API key for ``merchant`` (created if missing), via the project's own command."""
    out = subprocess.run(
        [sys.executable, "manage.py", "create_merchant", merchant, "--if-exists=new-key"],
        cwd=ROOT,
        env=django_env(db),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.strip().splitlines()[-1].strip()


def merchant_id(db: Database, merchant: str = "bench") -> int:
    import psycopg

    with psycopg.connect(db.conninfo()) as conn:
        row = conn.execute(
            "SELECT id FROM merchants_merchant WHERE name = %s", [merchant]
        ).fetchone()
    return int(row[0])


def django_env(db: Database, **overrides: str | None) -> dict[str, str]:
    """The environment of a service process pointed at the benchmark database; an override of
    None removes the variable (the setting's default applies)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.local",
        "DJANGO_DEBUG": "false",
        "DATABASE_URL": db.url(),
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO"),
        # One merchant sends every benchmark's load: no per-merchant limits unless a benchmark
        # sets them (noisy_neighbour.py does).
        "MERCHANT_RATE_LIMIT_REQUESTS": "0",
        "MERCHANT_CONCURRENT_PAYMENTS": "0",
    }
    env.update(overrides)
    return {name: value for name, value in env.items() if value is not None}


def count_rows(db: Database, sql: str, params: Sequence[Any] = ()) -> int:
    import psycopg

    with psycopg.connect(db.conninfo()) as conn:
        return int(conn.execute(sql, list(params)).fetchone()[0])


# -- the processes, as the Procfile starts them ----------------------------------------------


def procfile_command(name: str) -> list[str]:
    """The Procfile's command for process ``name``, run with this interpreter's environment
    (``gunicorn ...`` becomes ``python -m gunicorn ...``; a leading ``env NAME=value ...``
    stays in front)."""
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith(f"{name}:"):
            argv = shlex.split(line.split(":", 1)[1])
            prefix: list[str] = []
            if argv[0] == "env":
                command = next(i for i, word in enumerate(argv[1:], 1) if "=" not in word)
                prefix, argv = argv[:command], argv[command:]
            if argv[0] == "python":
                return [*prefix, sys.executable, *argv[1:]]
            return [*prefix, sys.executable, "-m", argv[0], *argv[1:]]
    raise KeyError(f"no '{name}' process in the Procfile")


def start_sandbox(extra_args: Sequence[str] = ()):
    """``python -m sandbox_acquirer`` on a free port (tests.support.sandbox.SandboxProcess)."""
    from tests.support.sandbox import SandboxProcess

    return SandboxProcess.start(api_key=SANDBOX_API_KEY, extra_args=tuple(extra_args))


@dataclass
class Gunicorn:
    """The web process as the Procfile runs it (``config/gunicorn.conf.py``: 2 workers x 64
    threads and a pool of 8 connections each by default), on a free port, its access log and
    app logs in a file."""

    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Gunicorn:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            procfile_command("web"),
            cwd=ROOT,
            env={**self.env, "WEB_BIND": f"127.0.0.1:{self.port}"},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited; see {self.log_path}")
            try:
                answer = httpx.get(f"{self.url}/healthz", timeout=1.0)
                # Both workers must be up: poll until /healthz answered a few times.
                workers = int(self.env.get("WEB_CONCURRENCY", "2"))
                if answer.status_code == 200 and len(self.worker_pids()) >= workers:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"gunicorn did not answer within {timeout:g} s; see {self.log_path}")

    def worker_pids(self) -> list[int]:
        assert self.process is not None
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except OSError:
            return []

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Gunicorn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def service_stack(
    db: Database,
    name: str,
    *,
    settings_module: str = "config.settings.local",
    sandbox_args: Sequence[str] = (),
    **env_overrides: str | None,
) -> Iterator[tuple[Any, Gunicorn]]:
    """The sandbox and gunicorn (Procfile command) pointed at it and at ``db``; yields both,
    stops both. Logs go to ``bench/results/<name>-gunicorn-<timestamp>.log``."""
    sandbox = start_sandbox(sandbox_args)
    try:
        env = django_env(
            db,
            DJANGO_SETTINGS_MODULE=settings_module,
            ACQUIRER_BASE_URL=sandbox.url,
            ACQUIRER_API_KEY=SANDBOX_API_KEY,
            **env_overrides,
        )
        with Gunicorn(env, RESULTS / f"{name}-gunicorn-{timestamp()}.log") as server:
            yield sandbox, server
    finally:
        sandbox.stop()


# -- wrk -----------------------------------------------------------------------------------


@dataclass
class WrkResult:
    """One wrk run through ``bench/lua/payments.lua``."""

    requests: int
    seconds: float
    statuses: dict[str, int]
    errors: dict[str, int]
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    cpu: dict[str, float] | None = None

    def count(self, *statuses: int) -> int:
        return sum(self.statuses.get(str(s), 0) for s in statuses)

    def rate(self, *statuses: int) -> float:
        """Answers per second with one of ``statuses`` (all answers when none given)."""
        n = self.count(*statuses) if statuses else self.requests
        return ratio(n, self.seconds)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


WRK_MARKER = "BENCH_JSON "


def wrk_command(
    url: str,
    *,
    api_key: str,
    mode: str = "fresh",
    prefix: str = "k",
    pool: int = 0,
    duration: float = 10,
    connections: int = 16,
    threads: int = 2,
    timeout: float = 10,
    body_token: str = "tok_visa",  # noqa: S107 - a test card token, not a secret
) -> list[str]:
    """The wrk command line (``mode``: ``fresh`` keys, or ``replay`` of
    ``<prefix>-<0..pool-1>``)."""
    return [
        wrk_binary(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        f"{max(1, round(timeout))}s",
        "-s",
        str(LUA / "payments.lua"),
        url,
        "--",
        api_key,
        mode,
        prefix,
        str(pool),
        body_token,
    ]


def wrk_binary() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit(
            "wrk is not installed: apt-get install -y wrk (Debian/Ubuntu), brew install wrk."
        )
    return path


def parse_wrk_output(stdout: str) -> WrkResult:
    """Read the JSON line that ``payments.lua``'s ``done()`` prints."""
    for line in stdout.splitlines():
        if line.startswith(WRK_MARKER):
            data = json.loads(line[len(WRK_MARKER) :])
            return WrkResult(
                requests=int(data["requests"]),
                seconds=data["duration_us"] / 1e6,
                statuses={str(k): int(v) for k, v in data["statuses"].items()},
                errors={k: int(v) for k, v in data["errors"].items()},
                p50_ms=data["p50_us"] / 1000,
                p90_ms=data["p90_us"] / 1000,
                p99_ms=data["p99_us"] / 1000,
                max_ms=data["max_us"] / 1000,
                mean_ms=data["mean_us"] / 1000,
            )
    raise ValueError("no BENCH_JSON line in wrk's output:\n" + stdout[-2000:])


def run_wrk(url: str, *, watch: CpuWatch | None = None, **kwargs: Any) -> WrkResult:
    """Run wrk (see :func:`wrk_command`); with ``watch``, ``result.cpu`` holds the CPU seconds
    per process group over the middle of the run (:func:`run_measured`)."""
    command = wrk_command(url, **kwargs)
    done, cpu = run_measured(command, kwargs.get("duration", 10), watch)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
    result = parse_wrk_output(done.stdout)
    result.cpu = cpu
    return result


# -- pgbench -------------------------------------------------------------------------------


def pgbench_binary() -> str:
    """``$PGBENCH``, pgbench on PATH, the Debian server's, or the embedded server's."""
    candidates = [os.environ.get("PGBENCH", ""), shutil.which("pgbench") or ""]
    candidates += sorted(glob("/usr/lib/postgresql/*/bin/pgbench"), reverse=True)
    try:
        import pgserver

        candidates += glob(str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"))
    except ImportError:
        pass
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("pgbench not found: install postgresql-client/contrib, or set PGBENCH.")


@dataclass
class PgbenchResult:
    transactions: int
    tps: float
    latency_ms: float
    failed: int
    cpu: dict[str, float] | None = None


def parse_pgbench_output(stdout: str) -> PgbenchResult:
    """Read pgbench's summary (PostgreSQL 13 and later)."""
    transactions, tps, latency, failed = 0, math.nan, math.nan, 0
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("number of transactions actually processed:"):
            transactions = int(line.split(":")[1].split("/")[0])
        elif line.startswith("number of failed transactions:"):
            failed = int(line.split(":")[1].split()[0])
        elif line.startswith("latency average"):
            latency = float(line.split("=")[1].split()[0])
        elif line.startswith("tps =") and ("without initial connection" in line or math.isnan(tps)):
            tps = float(line.split("=")[1].split()[0])
    return PgbenchResult(transactions, tps, latency, failed)


def run_pgbench(
    db: Database,
    script: Path,
    *,
    clients: int,
    threads: int,
    duration: float,
    watch: CpuWatch | None = None,
) -> PgbenchResult:
    command = [
        pgbench_binary(), "-n", "-M", "simple", "-f", str(script),
        "-c", str(clients), "-j", str(threads), "-T", str(max(1, round(duration))),
    ]  # fmt: skip
    done, cpu = run_measured(command, duration, watch, env={**os.environ, **db.pg_env()})
    if done.returncode not in (0, 2) or "tps =" not in done.stdout:
        raise RuntimeError(f"pgbench failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result = parse_pgbench_output(done.stdout)
    result.cpu = cpu
    return result


# -- CPU accounting ------------------------------------------------------------------------

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_SHARED_POSTGRES = (
    "checkpointer", "background writer", "walwriter", "autovacuum", "logical replication",
    "stats", "archiver", "wal ",
)  # fmt: skip


def process_group(cmdline: str, database: str | None = None) -> str:
    """Which part of the run a process that is not one of ours belongs to: a backend of the
    benchmark's ``database``, PostgreSQL's shared processes (WAL writer, checkpointer, ...),
    or ``other`` (on a shared machine: someone else's work, other databases' backends)."""
    if cmdline.startswith("postgres:"):
        words = cmdline.split()
        if database and database in words:
            return "postgres"
        if any(name in cmdline for name in _SHARED_POSTGRES):
            return "postgres (shared processes)"
        return "other"
    if cmdline.split(" ", 1)[0].endswith("/postgres"):  # the postmaster
        return "postgres (shared processes)"
    return "other"


def cpu_snapshot(own: dict[int, str] | None = None, database: str | None = None) -> dict[str, Any]:
    """CPU ticks used so far (utime + stime) per process, grouped: ``own`` maps our pids
    (gunicorn master and workers, the sandbox, the load generator) to their group; the others
    by :func:`process_group`. Also the machine's busy and total ticks."""
    own = own or {}
    procs: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            stat = (entry / "stat").read_text()
            cmdline = own.get(pid) or (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace"
            )
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        group = own.get(pid) or process_group(cmdline, database)
        procs[pid] = (group, int(fields[11]) + int(fields[12]))
    cpu = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    values = [int(x) for x in cpu]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    busy, total = sum(values) - idle, sum(values)
    return {"procs": procs, "busy": busy, "total": total, "at": time.monotonic()}


def cpu_seconds_by_group(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per group between two snapshots; ``machine_busy_cores`` is the average
    number of busy cores over the interval, ``seconds`` its length."""
    groups: dict[str, float] = {}
    for pid, (group, ticks) in after["procs"].items():
        start = before["procs"].get(pid)
        used = ticks - (start[1] if start and start[0] == group else 0)
        groups[group] = groups.get(group, 0.0) + max(0, used) / _TICKS
    elapsed = after["at"] - before["at"]
    busy_share = ratio(after["busy"] - before["busy"], after["total"] - before["total"])
    groups["machine_busy_cores"] = busy_share * (os.cpu_count() or 1)
    groups["seconds"] = elapsed
    return groups


@dataclass
class CpuWatch:
    """Whose CPU to account during a measurement: our processes and the benchmark database."""

    own: dict[int, str]
    database: str


def run_measured(
    command: Sequence[str], duration: float, watch: CpuWatch | None, env: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict[str, float] | None]:
    """Run a load generator for about ``duration`` seconds; with ``watch``, read every
    process's CPU time once the load is established and again shortly before it ends (so
    short-lived PostgreSQL backends, e.g. pgbench's, are alive at both readings)."""
    process = subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    cpu = None
    if watch is not None:
        own = {**watch.own, process.pid: "load generator"}
        margin = min(1.0, duration / 4)
        time.sleep(margin)
        first = cpu_snapshot(own, watch.database)
        time.sleep(max(0.2, duration - 2 * margin))
        cpu = cpu_seconds_by_group(first, cpu_snapshot(own, watch.database))
    out, err = process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, out, err), cpu


# -- HTTP helpers --------------------------------------------------------------------------


def post_payment(
    client: httpx.Client, url: str, api_key: str, key: str, body: dict | None = None
) -> httpx.Response:
    return client.post(
        url,
        content=json.dumps(body or PAYMENT_BODY),
        headers={
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Idempotency-Key": key,
        },
    )
