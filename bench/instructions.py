"""Benchmark: the instructions one ``POST /payments`` costs in the web process, counted by
callgrind, for this tree and, in the same run, for another revision.

One command (docs/benchmarks.md, "Instructions per payment")::

    .venv/bin/python bench/instructions.py                      # this tree
    .venv/bin/python bench/instructions.py --against f98b9db    # and that revision, A/B

On a shared machine, CPU time per payment moves between runs by more than a change worth a few
percent: the throughput benchmark's rounds differ by 10-20 % from one minute to the next.
Valgrind's callgrind counts the instructions a process executes instead, which hardly depends
on what else the machine does (seven runs of one tree here: within 3 %). This benchmark runs
the hot path in one process, as ``bench/hot_path_ab.py`` does: Django's whole request handling,
middleware included, new keys, the sandbox answering at once in its own process (not counted),
the acquirer state in memory. It runs that process under callgrind twice: with ``--warmup``
payments only, and with ``--warmup`` + ``--payments``. The difference of the two totals,
divided by ``--payments``, is one payment's instructions without the start-up. With
``--against REV``, the revision is checked out in a temporary ``git worktree`` and measured
the same way with this tree's virtualenv (so a revision whose locked dependencies differ is
measured with today's), and the ratio is printed.

The measured trees share this tree's Celery broker: a worktree's own embedded Redis made the
same code count 11 % fewer instructions. The cyclic garbage collector is off while the payments
run (as in ``timeit``), so that a collection cannot fall into or out of the counted payments,
and both trees are byte-compiled first. What it does not count: the kernel (system calls run
outside the process's instructions), the PostgreSQL backend (``bench/hot_path_ab.py`` reads its
CPU time), gunicorn (the test client stands in for it) and time spent waiting. Instructions are
not time either: a cache miss costs more than an instruction. So it answers "does this change
run less code", the question a change to the Python hot path asks, and the throughput benchmark
answers the rest. It needs Valgrind (Debian's ``valgrind``) and takes about a minute per tree
(the code runs about 20 times slower under callgrind)."""

# ruff: noqa: S603, S607 - benchmarks run their own commands (valgrind, git, this interpreter)

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    PAYMENT_BODY,
    SANDBOX_API_KEY,
    database_from_env,
    django_env,
    issue_api_key,
    machine_context,
    prepare_database,
    print_table,
    ratio,
    start_sandbox,
    write_results,
)

ROOT = Path(__file__).resolve().parent.parent
#: callgrind's summary line: "==pid== Collected : 4889061269".
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payments", type=int, default=100, help="payments counted per tree")
    parser.add_argument("--warmup", type=int, default=20, help="payments before them")
    parser.add_argument("--against", default=None, help="a git revision to measure beside")
    parser.add_argument("--database", default=None, help="benchmark database name")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def child(payments: int, root: Path) -> int:
    """Inside callgrind: set up Django from the tree ``root`` against the database and sandbox
    of the environment (``BENCH_CHILD_*``), then send ``payments`` new-key payments through the
    test client."""
    service = {
        key.removeprefix("BENCH_CHILD_"): value
        for key, value in os.environ.items()
        if key.startswith("BENCH_CHILD_")
    }
    if not service:
        raise SystemExit("--child is run by bench/instructions.py, not by hand")
    os.environ.update(service)
    sys.path.insert(0, str(root))  # the measured tree's packages before this one's
    os.chdir(root)
    import logging
    import warnings

    import django

    warnings.filterwarnings("ignore")
    django.setup()
    from django.conf import settings
    from django.test import Client

    # The service's log lines are rendered as in production (JSON, redacted), then discarded.
    stream = open(os.devnull, "w")  # noqa: SIM115 - for the process's life
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    settings.ALLOWED_HOSTS = ["*"]
    client = Client(HTTP_AUTHORIZATION=f"Bearer {os.environ['BENCH_API_KEY']}")
    # No cyclic collection during the payments (timeit's choice too), so that a collection
    # cannot fall into or out of the counted payments.
    gc.collect()
    gc.disable()
    for _ in range(payments):
        response = client.post(
            "/payments", PAYMENT_BODY, "application/json", HTTP_IDEMPOTENCY_KEY=uuid.uuid4().hex
        )
        assert response.status_code == 201, response.content
    return 0


def collected(tree: Path, payments: int, env: dict[str, str]) -> int:
    """The instructions callgrind counted for a child in ``tree`` sending ``payments``."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={scratch}/callgrind.out",
            sys.executable, __file__, "--child", str(payments), "--root", str(tree),
        ]  # fmt: skip
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    match = COLLECTED.search(done.stderr)
    if done.returncode != 0 or match is None:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"the child in {tree} failed ({done.returncode})")
    return int(match.group(1))


def per_payment(tree: Path, args: argparse.Namespace, env: dict[str, str]) -> float:
    """One payment's instructions in ``tree``: the difference of two runs, per payment. The
    tree is byte-compiled first: else the first run would compile its modules and the second
    not, and the difference would leave the compilation out of one run only."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"/\.venv/", str(tree)],
                   check=True, capture_output=True)  # fmt: skip
    short = collected(tree, args.warmup, env)
    long = collected(tree, args.warmup + args.payments, env)
    return (long - short) / args.payments


def broker_url() -> str:
    """``CELERY_BROKER_URL``, else this tree's embedded Redis (started if need be): one broker
    for every measured tree. A tree of its own would start its own embedded server, and its
    children would publish each payment's task to another server than this tree's do."""
    if os.environ.get("CELERY_BROKER_URL"):
        return os.environ["CELERY_BROKER_URL"]
    from devtools.embedded_redis import local_redis_urls

    return local_redis_urls({"ACQUIRER_STATE_REDIS_URL": ""})[0]


@contextlib.contextmanager
def worktree(revision: str) -> Iterator[Path]:
    """``revision`` checked out in a temporary ``git worktree``, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="instructions-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", "--quiet", str(path), revision],
        cwd=ROOT, check=True,
    )  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False)
        shutil.rmtree(path, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child(args.child, args.root)
    if shutil.which("valgrind") is None:
        print("valgrind is needed: apt-get install valgrind (Debian/Ubuntu)")
        return 1
    db = database_from_env(args.database) if args.database else database_from_env()
    prepare_database(db)
    api_key = issue_api_key(db)
    sandbox = start_sandbox()
    try:
        service = django_env(
            db, ACQUIRER_BASE_URL=sandbox.url, ACQUIRER_API_KEY=SANDBOX_API_KEY,
            ACQUIRER_STATE_REDIS_URL="", LOG_FORMAT="json", CELERY_BROKER_URL=broker_url(),
        )  # fmt: skip
        # The child takes the service's variables from BENCH_CHILD_*, so that valgrind itself
        # and this process keep their own environment.
        env = {**os.environ, "BENCH_API_KEY": api_key, "PYTHONHASHSEED": "0"}
        env |= {f"BENCH_CHILD_{key}": value for key, value in service.items()
                if os.environ.get(key) != value}  # fmt: skip
        results: dict[str, float] = {"this tree": per_payment(ROOT, args, env)}
        if args.against:
            with worktree(args.against) as tree:
                results[args.against] = per_payment(tree, args, env)
    finally:
        sandbox.stop()
    rows = [(name, f"{count / 1e6:.2f}") for name, count in results.items()]
    if args.against:
        rows.append(
            (
                f"this tree / {args.against}",
                f"{ratio(results['this tree'], results[args.against]):.3f}",
            )
        )
    print_table(["tree", "million instructions per payment (web process)"], rows)
    path = write_results(
        "instructions",
        {"machine": machine_context(), "payments": args.payments, "warmup": args.warmup,
         "per_payment": results},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
