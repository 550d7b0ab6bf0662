"""Run the concurrency and end-to-end tests, and a short throughput run, through PgBouncer in
transaction pooling mode (``make test-pgbouncer``; docs/scaling.md, "Behind PgBouncer").

Needs Debian's ``pgbouncer`` (``apt-get install pgbouncer``; a binary on PATH or in
``/usr/sbin``, or ``$PGBOUNCER``) and the PostgreSQL server of ``DATABASE_URL`` over TCP: it is
not part of ``make test``. It starts a private PgBouncer on a free loopback port
(``pool_mode = transaction``, a pool of ``--pool-size`` server connections per database, the
server-side timeouts of ADR 0020 in ``connect_query``, since transaction pooling does not pass
the ``options`` startup parameter), then:

1. creates the test database directly on PostgreSQL (``test_<name>``) and runs pytest on
   ``tests/integration/test_concurrency.py`` and ``tests/e2e/`` (or the paths given) with
   ``DATABASE_URL`` pointing at PgBouncer and ``DATABASE_POOLER=pgbouncer``, ``--reuse-db`` so
   that pytest-django migrates that database through PgBouncer and the subprocesses the tests
   start (gunicorn, Celery) connect through it too;
2. runs ``--throughput-seconds`` of ``POST /payments`` with new keys (wrk, 16 connections,
   gunicorn as the Procfile starts it, the sandbox acquirer) directly and then through
   PgBouncer, and prints both rates and their ratio (one run, never a timed assertion);
3. opens one transaction on every server connection of the pool at once and asks each
   backend what a session could have left behind: named prepared statements
   (``pg_prepared_statements``), open cursors (``pg_cursors``), ``LISTEN`` channels, temporary
   tables; and the server for advisory locks. Any of them fails the run.

Exit status: pytest's, else 1 when a check fails, else 0. ``--keep-db`` keeps the test
database (it is dropped at the end by default).
"""

# ruff: noqa: S603 - the script runs pgbouncer, pytest and wrk, its own commands

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import Database, database_from_env, free_port  # noqa: E402

DEFAULT_TESTS = ("tests/integration/test_concurrency.py", "tests/e2e/")


def pgbouncer_binary() -> str:
    """``$PGBOUNCER``, pgbouncer on PATH, or Debian's ``/usr/sbin/pgbouncer``; exits with a
    hint when none is installed."""
    for candidate in (os.environ.get("PGBOUNCER", ""), shutil.which("pgbouncer") or "",
                      "/usr/sbin/pgbouncer"):  # fmt: skip
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("pgbouncer is not installed: apt-get install -y pgbouncer (Debian/Ubuntu).")


def connect_query(env: Any) -> str:
    """The ``SET`` statements PgBouncer runs on each new server connection: the timeouts of
    ``config.database.connection_options`` for this environment (the suite's: no statement
    or idle-in-transaction timeout, as config/settings/test.py; lock_timeout as configured)."""
    from config.database import connection_options
    from config.pooler import server_timeout_sql

    return "; ".join(server_timeout_sql(connection_options(env, {})))


class _SuiteEnv:
    """The environment as django-environ reads integers, with the suite's timeouts
    (config/settings/test.py turns the statement and idle-in-transaction timeouts off)."""

    SUITE = {"DATABASE_STATEMENT_TIMEOUT_MS": 0, "DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS": 0}

    def int(self, name: str, default: int) -> int:
        return self.SUITE.get(name, int(os.environ.get(name, default)))


class PgBouncer:
    """A private pgbouncer process in front of ``server`` (a :class:`Database`), in transaction
    pooling mode, on ``127.0.0.1:<free port>``; its files in a temporary directory."""

    def __init__(self, server: Database, *, pool_size: int, connect_sql: str) -> None:
        if server.host.startswith("/"):
            raise SystemExit("DATABASE_URL must reach PostgreSQL over TCP for this script.")
        self.server = server
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        self.log_path = self.directory / "pgbouncer.log"
        target = f"host={server.host} port={server.port or 5432}"
        if server.password:
            target += f" password={server.password}"
        if connect_sql:
            target += f" connect_query='{connect_sql}'"
        (self.directory / "userlist.txt").write_text(f'"{server.user}" "{server.password}"\n')
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = {target}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.directory / 'userlist.txt'}\n"
            f"admin_users = {server.user}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "max_client_conn = 1000\n"
            "server_idle_timeout = 30\n"
            f"logfile = {self.log_path}\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PgBouncer:
        command = [pgbouncer_binary(), str(self.directory / "pgbouncer.ini")]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # pgbouncer refuses to run as root
            shutil.chown(self.directory, "postgres")
            for path in self.directory.iterdir():
                shutil.chown(path, "postgres")
            command[1:1] = ["-u", "postgres"]
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
        self.process = subprocess.Popen(command, stderr=subprocess.STDOUT, **quiet)
        import psycopg

        deadline = time.monotonic() + 15
        while True:
            try:
                with psycopg.connect(self.database("postgres").conninfo(), connect_timeout=2) as c:
                    c.execute("SELECT 1")
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"pgbouncer did not start; see {self.log_path}") from None
                time.sleep(0.2)
            else:
                return self

    def database(self, name: str) -> Database:
        """Database ``name`` of the server, reached through this PgBouncer."""
        return Database("127.0.0.1", self.port, self.server.user, self.server.password, name)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # a safe shutdown
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def recreate_database(server: Database, name: str, *, drop_only: bool = False) -> None:
    """Drop database ``name`` on ``server`` (directly, never through PgBouncer) and create it
    again, empty, unless ``drop_only``."""
    import psycopg

    with psycopg.connect(server.conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def session_leftovers(bouncer: PgBouncer, name: str, pool_size: int) -> dict[str, int]:
    """Open ``pool_size`` transactions at once through ``bouncer`` (so each holds its own server
    connection of database ``name``'s pool) and count, over those backends, what a session
    left behind; plus the advisory locks held on the server. Returns counts by kind."""
    import psycopg

    probe = (
        "SELECT pg_backend_pid(), (SELECT count(*) FROM pg_prepared_statements),"
        " (SELECT count(*) FROM pg_cursors), (SELECT count(*) FROM pg_listening_channels()),"
        " (SELECT count(*) FROM pg_class WHERE relpersistence = 't'),"
        " current_setting('statement_timeout') || ' ' || current_setting('lock_timeout')"
    )
    barrier = threading.Barrier(pool_size, timeout=30)
    rows: list[tuple[int, ...]] = []
    lock = threading.Lock()

    def one() -> None:
        with psycopg.connect(bouncer.database(name).conninfo()) as conn:  # in a transaction
            row = conn.execute(probe).fetchone()
            with lock:
                rows.append(tuple(row))
            barrier.wait()  # every transaction is open: each has a server connection of its own

    threads = [threading.Thread(target=one) for _ in range(pool_size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(bouncer.server.conninfo("postgres")) as conn:
        advisory = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        advisory_locks = int(advisory.fetchone()[0])
    return {
        "backends probed": len({row[0] for row in rows}),
        "prepared statements": sum(row[1] for row in rows),
        "open cursors": sum(row[2] for row in rows),
        "LISTEN channels": sum(row[3] for row in rows),
        "temporary tables": sum(row[4] for row in rows),
        "advisory locks (server-wide)": advisory_locks,
        "timeouts (statement, lock) seen": sorted({row[5] for row in rows}),
    }


def throughput(db: Database, seconds: float, pooler: str) -> tuple[float, int, int]:
    """``seconds`` of wrk against gunicorn on ``db`` with ``DATABASE_POOLER=pooler`` (the
    migration and the merchant too): (201s per second, requests, non-201s)."""
    from bench.common import issue_api_key, prepare_database, run_wrk, service_stack, timestamp

    previous = os.environ.get("DATABASE_POOLER")
    os.environ["DATABASE_POOLER"] = pooler  # bench.common.django_env copies the environment
    try:
        prepare_database(db)
        api_key = issue_api_key(db)
        with service_stack(db, "pgbouncer") as (_sandbox, server):
            url = f"{server.url}/payments"
            run_wrk(url, api_key=api_key, prefix=f"warm-{timestamp()}", duration=2)
            result = run_wrk(url, api_key=api_key, prefix=f"run-{timestamp()}",
                             duration=seconds)  # fmt: skip
    finally:
        if previous is None:
            os.environ.pop("DATABASE_POOLER")
        else:
            os.environ["DATABASE_POOLER"] = previous
    return result.rate(201), result.requests, result.requests - result.count(201)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tests", nargs="*", default=list(DEFAULT_TESTS))
    parser.add_argument("--pool-size", type=int, default=10, help="server connections per pool")
    parser.add_argument("--throughput-seconds", type=float, default=10.0, help="0: no run")
    parser.add_argument("--keep-db", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("DATABASE_URL"):
        raise SystemExit("DATABASE_URL must name the PostgreSQL server (over TCP).")
    server = database_from_env(os.environ["DATABASE_URL"].rsplit("/", 1)[1].split("?")[0])
    test_name = f"test_{server.name}"
    connect_sql = connect_query(_SuiteEnv())
    bouncer = PgBouncer(server, pool_size=args.pool_size, connect_sql=connect_sql).start()
    print(f"pgbouncer {bouncer.port}: pool_mode=transaction, connect_query: {connect_sql}")
    failed = False
    try:
        recreate_database(server, test_name)
        env = {
            **os.environ,
            "DATABASE_URL": bouncer.database(server.name).url(),
            "DATABASE_POOLER": "pgbouncer",
            "PYTEST_ADDOPTS": "--reuse-db",
        }
        # Importing config/ set the production default (config/celery_app.py); pytest's own
        # settings are pyproject.toml's.
        env.pop("DJANGO_SETTINGS_MODULE", None)
        pytest = subprocess.run([sys.executable, "-m", "pytest", "-q", *args.tests], cwd=ROOT,
                                env=env, check=False)  # fmt: skip
        print(f"pytest through pgbouncer: exit status {pytest.returncode}")
        leftovers = session_leftovers(bouncer, test_name, args.pool_size)
        for kind, count in leftovers.items():
            print(f"  {kind}: {count}")
        failed = any(count for kind, count in leftovers.items() if isinstance(count, int)
                     and kind != "backends probed")  # fmt: skip
        if args.throughput_seconds > 0:
            bench_name = os.environ.get("BENCH_DATABASE", "payments_bench")
            direct = throughput(database_from_env(bench_name), args.throughput_seconds, "none")
            pooled = throughput(bouncer.database(bench_name), args.throughput_seconds, "pgbouncer")
            for label, (rate, requests, other) in (("direct", direct), ("pgbouncer", pooled)):
                print(f"throughput {label}: {rate:.1f} payments/s ({requests} requests, "
                      f"{other} not 201)")  # fmt: skip
            print(f"throughput ratio pgbouncer/direct: {pooled[0] / direct[0]:.3f}")
            failed = failed or pooled[2] > 0
            leftovers = session_leftovers(bouncer, bench_name, args.pool_size)
            print(f"  after the throughput run: {leftovers}")
            failed = failed or any(c for k, c in leftovers.items() if isinstance(c, int)
                                   and k != "backends probed")  # fmt: skip
    finally:
        bouncer.stop()
        if not args.keep_db:
            recreate_database(server, test_name, drop_only=True)
    if pytest.returncode:
        return pytest.returncode
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
