"""A newcomer's first hour, as the README tells it: ``make run`` on private ports, in a
terminal (a pseudo-terminal here), then every shell block of the README, of
merchant_client/README.md and of docs/webhooks.md pasted in order into a shell next to it;
each must exit 0 and print what its document says it prints. Then the stack idles (a few log
lines a minute at most), answers ``HEAD`` without a warning, and Ctrl-C stops it with exit 0,
one summary line and nothing left in the temporary directory.

Blocks fenced ```` ```sh ```` are run; ```` ```sh no-run: <why> ```` blocks are not (``make run``
is the stack itself, ``make test`` the suite, Docker is not assumed, ``createsuperuser`` asks
for a password), and the test names them so a new one cannot hide. A block's documented
output is the ```` ```text ```` block right after it: each of its lines must appear in what
the block printed. The documents say ``127.0.0.1:8000`` (the API) and the receiver's default
port; here those become the stack's private ports, the only change made to a block.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import os
import pty
import re
import signal
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection

from merchants.services import api_key_hash
from tests.support.processes import (
    ROOT,
    database_url_for_subprocess,
    free_port,
    service_env,
    wait_until,
)
from webhooks.receiver import DEFAULT_PORT as RECEIVER_PORT

pytestmark = [pytest.mark.e2e]

DOCUMENTS = ("README.md", "merchant_client/README.md", "docs/webhooks.md")
#: The blocks that are not run, by document and first line: each is checked another way.
NOT_RUN = {
    ("README.md", "make run    # installs into .venv, migrates, prints a demo API key, then runs the API (:8000),"),  # noqa: E501 - the line as written
    ("README.md", "printf 'DJANGO_SECRET_KEY=%s\\nMETRICS_BEARER_TOKEN=%s\\n' \"$(openssl rand -hex 32)\" \"$(openssl rand -hex 16)\" > .env"),  # noqa: E501
    ("README.md", ".venv/bin/python manage.py createsuperuser"),
}  # fmt: skip
#: An idle stack at its default level: at most this many lines a minute (66 before the fix).
IDLE_LINES_PER_MINUTE = 5
_FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """One fenced shell block of a document, with the output its document shows for it."""

    document: str
    info: str
    code: str
    expected: tuple[str, ...]

    @property
    def runs(self) -> bool:
        return self.info.split()[0] in {"sh", "bash"} and "no-run" not in self.info

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0]


def shell_blocks(document: str) -> list[Block]:
    """The ``sh``/``bash`` blocks of ``document`` in order; a ``text`` block right after one
    (blank lines and no prose between) is its expected output."""
    text = (ROOT / document).read_text()
    fences = list(_FENCE.finditer(text))
    blocks = []
    for i, fence in enumerate(fences):
        info = fence.group(1).strip()
        if not info or info.split()[0] not in {"sh", "bash"}:
            continue
        expected: tuple[str, ...] = ()
        following = fences[i + 1] if i + 1 < len(fences) else None
        if (
            following is not None
            and following.group(1).strip() == "text"
            and not text[fence.end() : following.start()].strip()
        ):
            expected = tuple(line for line in following.group(2).splitlines() if line.strip())
        blocks.append(Block(document, info, fence.group(2), expected))
    return blocks


# ---- ports --------------------------------------------------------------------------------


def procfile_ports() -> set[int]:
    """The ports the Procfile's processes listen on by default (gunicorn's from WEB_BIND's
    default in config/gunicorn.conf.py)."""
    procfile = (ROOT / "Procfile").read_text()
    ports = {int(p) for p in re.findall(r"--port (?:\$\{\w+:-)?(\d+)", procfile)}
    gunicorn = (ROOT / "config/gunicorn.conf.py").read_text()
    ports.update(int(p) for p in re.findall(r'"WEB_BIND", "127\.0\.0\.1:(\d+)"', gunicorn))
    return ports


def module_default_port(module: str) -> int | None:
    """The default of a module's ``--port`` option (a literal or a module-level constant of
    the file, or an imported ``DEFAULT_PORT``), or None when it has none."""
    base = ROOT / module.replace(".", "/")
    source = base / "__main__.py" if base.is_dir() else base.with_suffix(".py")
    if not source.exists():
        return None
    tree = ast.parse(source.read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == "--port"
        ):
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if isinstance(default, ast.Constant):
                return int(default.value)
            if isinstance(default, ast.Name):
                value = constants.get(default.id)
                if value is None:  # imported: ask the module
                    imported = __import__(module, fromlist=["_"])
                    value = getattr(imported, default.id, None)
                return None if value is None else int(value)
    return None


def documented_modules() -> set[str]:
    """Every ``python -m <module>`` of this project the docs tell someone to run."""
    paths = [ROOT / "README.md", ROOT / "merchant_client/README.md", *ROOT.glob("docs/**/*.md")]
    modules = set()
    for path in paths:
        for module in re.findall(r"python -m ([A-Za-z_][\w.]*)", path.read_text()):
            if (ROOT / module.split(".")[0]).is_dir():
                modules.add(module)
    return modules


def test_no_documented_command_defaults_to_a_port_of_the_procfile():
    """A command the docs give, run next to ``make run``, never binds a port the stack holds
    (the receiver's 8091 did: ``Address already in use``). The Procfile's own processes
    (the sandbox) are the stack, not next to it."""
    taken = procfile_ports()
    assert taken >= {8000, 8090, 8091}
    procfile = (ROOT / "Procfile").read_text()
    modules = {m for m in documented_modules() if f"-m {m} " not in procfile}
    assert "webhooks.receiver" in modules
    defaults = {m: module_default_port(m) for m in sorted(modules)}
    assert defaults["webhooks.receiver"] == RECEIVER_PORT
    assert {m: p for m, p in defaults.items() if p in taken} == {}


def test_every_shell_block_is_run_or_named_as_not_run():
    """A block that is not run is one of the few named here, each checked another way: the
    make targets exist (``make -n``), Docker's command is the docs' own."""
    not_run = {(b.document, b.first_line) for d in DOCUMENTS for b in shell_blocks(d) if not b.runs}
    assert not_run == NOT_RUN
    for target in ("run", "test", "key"):
        dry = subprocess.run(
            ["make", "-n", "-o", ".venv/.local-installed", "-o", ".venv/.test-installed", target],
            cwd=ROOT, capture_output=True, text=True, timeout=30, env=_make_env(os.environ),
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
    assert all(b.expected for d in DOCUMENTS for b in shell_blocks(d) if b.runs)


# ---- the stack --------------------------------------------------------------------------


def _make_env(base: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """``base`` for a top-level make: not a sub-make of ``make test`` (which would print
    "Entering directory" lines into ``$(make key)``), and the local profile taken as installed
    (the test profile holds it: test_local_profile_is_in_the_test_profile)."""
    env = {k: v for k, v in base.items() if k not in {"MAKELEVEL", "MAKEFLAGS", "MFLAGS"}}
    env["MAKEFLAGS"] = "o .venv/.local-installed"
    return env


def test_local_profile_is_in_the_test_profile():
    """Why the stack below may skip installing make run's profile: its packages are pinned in
    the test profile too."""

    def names(profile: str) -> set[str]:
        text = (ROOT / f"requirements/{profile}.txt").read_text()
        return set(re.findall(r"^([a-z0-9_.-]+)==", text, re.MULTILINE))

    assert "honcho" in names("local")
    assert names("local") <= names("test")


@dataclass
class Terminal:
    """``make run`` in a pseudo-terminal, as a newcomer starts it; every line it prints, with
    the monotonic time it arrived (``clock``)."""

    process: subprocess.Popen[bytes]
    master: int
    clock: Callable[[], float] = time.monotonic
    lines: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._partial = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            now = self.clock()
            self.lines.extend(
                (now, line.decode(errors="replace").rstrip("\r")) for line in complete
            )

    def text(self, since: float = 0.0) -> str:
        return "\n".join(line for at, line in list(self.lines) if at >= since)

    def ctrl_c(self) -> None:
        """What the terminal does for Ctrl-C: SIGINT to its foreground process group."""
        os.write(self.master, b"\x03")


def _controlling_terminal() -> None:  # in the child, after setsid: the pty becomes its terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.fixture(scope="module")
def database() -> str:
    """A database of the module's own (``<the suite's>_first_hour``, created empty; ``make
    run`` migrates it): the stack's merchants, keys and payments never meet the suite's tests,
    whatever order they run in. Dropped and created again at the next run, kept in between to
    look at (as the suite's ``--reuse-db`` database is; a drop costs a checkpoint, 16 s on a
    busy machine). Its ``DATABASE_URL``."""
    s = connection.settings_dict
    name = f"{s['NAME']}_first_hour"
    params = {"host": s["HOST"] or None, "port": s["PORT"] or None, "user": s["USER"] or None,
              "password": s["PASSWORD"] or None}  # fmt: skip
    params = {k: v for k, v in params.items() if v is not None}

    def admin(statement: str) -> None:
        with psycopg.connect(dbname="postgres", autocommit=True, **params) as db:
            db.execute(statement)

    admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{name}"')
    url = database_url_for_subprocess()
    return url[: url.rindex(s["NAME"])] + name + url[url.rindex(s["NAME"]) + len(s["NAME"]) :]


@pytest.fixture(scope="module")
def stack(database, tmp_path_factory) -> Iterator[dict]:
    """``make run WEB_PORT=... SANDBOX_PORT=... SANDBOX_BETA_PORT=...`` on the module's database,
    in a pseudo-terminal, with a private temporary directory; stopped by the last test (or
    here, killed, if that test did not get to it)."""
    tmp = tmp_path_factory.mktemp("first-hour")
    private_tmp = tmp / "tmp"
    private_tmp.mkdir()
    ports = {
        "WEB_PORT": free_port(),
        "SANDBOX_PORT": free_port(),
        "SANDBOX_BETA_PORT": free_port(),
        "LOCALSTRIPE_PORT": free_port(),
    }
    env = _make_env(
        service_env(TMPDIR=str(private_tmp), WEB_BIND=None, ACQUIRERS=None, DATABASE_URL=database)
    )
    command = ["make", "run", *(f"{name}={port}" for name, port in ports.items())]
    master, slave = pty.openpty()
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=slave, stdout=slave, stderr=slave,
        start_new_session=True, preexec_fn=_controlling_terminal,
    )  # fmt: skip
    os.close(slave)
    terminal = Terminal(process, master)
    started = time.monotonic()
    api = f"http://127.0.0.1:{ports['WEB_PORT']}"
    try:
        wait_until(
            lambda: "=== Ready in" in terminal.text() or process.poll() is not None,
            timeout=90, what="make run's ready line", interval=0.2,
        )  # fmt: skip
        assert process.poll() is None, terminal.text()[-4000:]
        ready_after = time.monotonic() - started
        yield {
            "terminal": terminal, "api": api, "ports": ports, "env": env, "tmp": private_tmp,
            "ready_after": ready_after, "work": tmp,
        }  # fmt: skip
    finally:
        if process.poll() is None:  # the Ctrl-C test did not get to it: stop, then kill
            terminal.ctrl_c()
            try:
                process.wait(40)
            except subprocess.TimeoutExpired:
                for pid in [*_descendants(process.pid), process.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.wait(10)
        os.close(master)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (honcho's children run in sessions of their own)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def test_make_run_prints_a_test_key_twice_and_how_to_get_another(stack):
    """The key of the first banner, printed again once the stack is ready, with ``make key``;
    a ``sk_test_`` key (make run's local settings), stored as its hash and display prefix."""
    text = stack["terminal"].text()
    keys = re.findall(r"export API_KEY=(sk_\w+_[\w-]+)", text)
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0].startswith("sk_test_")
    with psycopg.connect(stack["env"]["DATABASE_URL"]) as db:
        stored = db.execute(
            "SELECT k.prefix, m.name FROM merchants_apikey k JOIN merchants_merchant m"
            " ON m.id = k.merchant_id WHERE k.key_hash = %s",
            [api_key_hash(keys[0])],
        ).fetchall()
    assert stored == [(keys[0][:12], "demo")]
    ready = text[text.index("=== Ready in") :]
    assert keys[0] in ready and "make key" in ready
    assert stack["ready_after"] < 60


def run_blocks(document: str, stack: dict, receiver_port: int) -> list[tuple[Block, str]]:
    """Paste ``document``'s blocks, in order, into one bash (``set -e``: the first command
    that fails stops it), the documents' ports replaced by the stack's; each block's output."""
    api = stack["api"].removeprefix("http://")
    blocks = [b for b in shell_blocks(document) if b.runs]
    script = ["set -e"]
    for i, block in enumerate(blocks):
        code = block.code.replace("127.0.0.1:8000", api)
        code = code.replace(f"127.0.0.1:{RECEIVER_PORT}", f"127.0.0.1:{receiver_port}")
        code = code.replace(
            "-m webhooks.receiver ",
            f"-m webhooks.receiver --port {receiver_port} --api {stack['api']} ",
        )
        script += [f"echo '@@ begin {i}'", code, f"echo '@@ end {i}'"]
    done = subprocess.run(
        ["bash", "--noprofile", "--norc"], input="\n".join(script) + "\n", cwd=ROOT,
        env=stack["env"], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    outputs = re.findall(r"@@ begin (\d+)\n(.*?)@@ end \1\n", done.stdout, re.DOTALL)
    ran = [(blocks[int(i)], out) for i, out in outputs]
    if len(ran) < len(blocks):
        failed = blocks[len(ran)]
        pytest.fail(
            f"{document}: the block starting {failed.first_line!r} exited "
            f"{done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n"
            f"{done.stderr[-3000:]}"
        )
    assert done.returncode == 0, done.stderr
    return ran


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_shell_block_works_as_written(stack, document):
    """Each block exits 0 and prints every line of the output its document shows."""
    ran = run_blocks(document, stack, free_port())
    assert ran
    for block, output in ran:
        missing = [line for line in block.expected if line not in output]
        assert missing == [], f"{block.first_line!r} printed:\n{output}"


def test_the_readme_leaves_no_webhook_endpoint_behind(stack):
    """After the README's blocks (the receiver stopped), the demo merchant has no endpoint:
    nothing is retried for days at a receiver that is gone."""
    key = subprocess.run(
        ["make", "key"], cwd=ROOT, env=stack["env"], capture_output=True, text=True, timeout=60,
        check=True,
    ).stdout.strip().removeprefix("export API_KEY=")  # fmt: skip
    listed = httpx.get(
        f"{stack['api']}/webhook_endpoints", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    assert listed.status_code == 200 and listed.json()["data"] == []


def test_head_answers_log_no_warning(stack):
    """A load balancer's ``HEAD`` probe: the length ``GET`` would have, no body, no warning."""
    terminal = stack["terminal"]
    since = time.monotonic()
    for path in ("/healthz", "/openapi.json", "/payments", "/docs/"):
        get = httpx.get(stack["api"] + path, timeout=10)
        head = httpx.head(stack["api"] + path, timeout=10)
        assert head.status_code == get.status_code and head.content == b""
        assert head.headers.get("content-length") == str(len(get.content)), path
    time.sleep(1)  # the lines of these requests reach the terminal
    logged = terminal.text(since)
    assert "request HEAD" in logged
    assert "no-body response" not in logged and "body bytes" not in logged


def test_an_idle_stack_logs_a_few_lines_a_minute(stack):
    """60 s with no request: beat ticks every 5 s and the sweeps find nothing; at INFO that is
    silence, not 66 lines."""
    terminal = stack["terminal"]
    time.sleep(2)  # the previous test's lines are out
    since = time.monotonic()
    time.sleep(60)
    idle = [line for at, line in list(terminal.lines) if at >= since]
    assert len(idle) <= IDLE_LINES_PER_MINUTE, "\n".join(idle)


def test_ctrl_c_stops_everything_with_0_and_one_line(stack):
    """Ctrl-C in the terminal: every process ends, ``make run`` exits 0 (no ``Error 130``),
    its last line says so, and the temporary directory holds nothing of the stack's."""
    terminal, process = stack["terminal"], stack["terminal"].process
    pressed = time.monotonic()
    terminal.ctrl_c()
    rc = process.wait(60)
    stopped_after = time.monotonic() - pressed
    time.sleep(0.5)  # the reader drains the last lines
    text = terminal.text(pressed)
    assert rc == 0, text[-3000:]
    assert "Error 130" not in text and "Interrupt" not in text
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert last.startswith("make run: stopped after"), text[-3000:]
    assert stopped_after < 30
    for port in stack["ports"].values():
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
    assert sorted(p.name for p in stack["tmp"].iterdir()) == []


def test_a_killed_worker_leaves_no_metrics_directory_after_the_next_start(database, tmp_path):
    """``SIGKILL`` gives a Celery worker no chance to remove its Prometheus directory; the
    next worker removes it (its process is gone) and removes its own when it stops."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = service_env(TMPDIR=str(private_tmp), PROMETHEUS_MULTIPROC_DIR=None, DATABASE_URL=database)
    worker = [sys.executable, "-m", "celery", "-A", "config", "worker", "--pool", "solo",
              "--loglevel", "INFO", "--without-heartbeat", "--without-gossip",
              "--without-mingle"]  # fmt: skip

    def metrics_dirs() -> list[str]:
        return sorted(p.name for p in private_tmp.glob("payments-metrics-*"))

    first = subprocess.Popen(worker, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_until(lambda: len(metrics_dirs()) == 1, timeout=60, what="the first worker's dir")
    finally:
        first.kill()
        first.wait(10)
    killed = metrics_dirs()
    assert len(killed) == 1 and f"-{first.pid}-" in killed[0]
    log = tmp_path / "second.log"
    with log.open("w") as out:
        second = subprocess.Popen(worker, cwd=ROOT, env=env, stdout=out, stderr=out)
    try:
        wait_until(lambda: "ready." in log.read_text(), timeout=60, what="the second worker")
        assert killed[0] not in metrics_dirs()  # swept before the second one made its own
        assert len(metrics_dirs()) == 1 and f"-{second.pid}-" in metrics_dirs()[0]
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(30)
    assert metrics_dirs() == []
