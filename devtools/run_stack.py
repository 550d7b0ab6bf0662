"""``make run``'s last step: the demo key, the Procfile's processes under honcho, a clean stop.

``python -m devtools.run_stack [--procfile Procfile] [--api URL]``:

1. runs ``manage.py demo_setup`` and prints what it prints (the demo key, the copy-paste
   commands), keeping the key in memory only;
2. starts ``honcho start -f Procfile`` in a process group of its own and, on a terminal, makes
   that group the terminal's foreground: Ctrl-C reaches honcho and its processes, not ``make``
   (GNU make re-raises a SIGINT it receives, so ``make run`` could never end with 0);
3. once the API answers ``/readyz``, prints one line with the time it took, the demo key again
   and ``make key`` (a new key on request): the first banner has scrolled away by then;
4. when honcho ends, gives the terminal back and prints a one-line summary. A stop asked for
   (Ctrl-C, ``SIGTERM``) exits 0; a process that died on its own exits with honcho's code.

Standard library only: it runs before any Django code of the stack.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["STOPPED_CODES", "kept_data", "main", "summary_line"]

ROOT = Path(__file__).resolve().parents[1]
#: honcho's exit codes after a stop somebody asked for (SIGINT, SIGTERM, as 128 + n or -n).
STOPPED_CODES = frozenset({0, 130, 143, -signal.SIGINT, -signal.SIGTERM})
_KEY_LINE = re.compile(r"export API_KEY=(\S+)")


def kept_data(environ: Mapping[str, str]) -> str:
    """Where ``make run``'s data stays after it stops, as ``environ`` configured it."""
    places = ["the sandbox's charges in .sandbox/"]
    embedded = []
    if not environ.get("DATABASE_URL"):
        places.insert(0, "the database in .pgdata/")
        embedded.append("PostgreSQL")
    if not environ.get("CELERY_BROKER_URL") or not environ.get("ACQUIRER_STATE_REDIS_URL"):
        embedded.append("Redis")
    stop = f" (make db-stop stops the embedded {' and '.join(embedded)})" if embedded else ""
    return ", ".join(places) + stop


def summary_line(rc: int, seconds: float, *, asked: bool, kept: str = "") -> str:
    """The line ``make run`` ends on: how it stopped, after how long, what stays on disk
    (``kept``, :func:`kept_data`)."""
    ran = f"{int(seconds // 60)} min {int(seconds % 60)} s"
    if asked or rc in STOPPED_CODES:
        return f"make run: stopped after {ran}, every process ended" + (
            f"; kept: {kept}." if kept else "."
        )
    return (
        f"*** make run: a process exited (rc={rc}) after {ran}, so honcho stopped all the "
        "others (its 'stopped (rc=...)' line is above). Nothing restarts it here; see "
        "docs/operations.md, 'Supervision and heartbeats'. ***"
    )


def _say(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _demo_setup(python: str, api: str) -> str | None:
    """Run ``manage.py demo_setup``, print its output, return the key it issued."""
    command = [python, "manage.py", "demo_setup", "--api", api]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)  # noqa: S603
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.stdout.flush()
    if done.returncode != 0:
        raise SystemExit(done.returncode)
    match = _KEY_LINE.search(done.stdout)
    return match.group(1) if match else None


def _ready(api: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api}/readyz", timeout=2) as answer:  # noqa: S310 - our URL
            return bool(answer.status == 200)
    except OSError:
        return False


def _announce_when_ready(
    api: str,
    key: str | None,
    started: float,
    stop: threading.Event,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Print the ready line once ``api`` answers (checked every half second until ``stop``)."""
    while not stop.wait(0.5):
        if _ready(api):
            again = f"  export API_KEY={key}\n" if key else ""
            _say(
                f"\n=== Ready in {clock() - started:.0f} s (after the migrations): {api} . "
                f"The demo key again:\n{again}"
                "    (make key prints a new one; the earlier keys keep working for 24 h)\n"
            )
            return


def _terminal() -> int | None:
    """The controlling terminal's descriptor when this process is in its foreground, or None."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the stack until it stops; 0 when a stop was asked for."""
    parser = argparse.ArgumentParser(prog="python -m devtools.run_stack", description=__doc__)
    parser.add_argument("-f", "--procfile", default="Procfile")
    parser.add_argument("--api", default=f"http://127.0.0.1:{os.environ.get('WEB_PORT', '8000')}")
    args = parser.parse_args(argv)
    started = time.monotonic()
    key = _demo_setup(sys.executable, args.api)
    honcho = str(Path(sys.executable).with_name("honcho"))
    # The app root is here, wherever the Procfile is (make run writes it into .celery/).
    command = [honcho, "start", "-d", str(Path.cwd()), "-f", args.procfile]
    child = subprocess.Popen(command, cwd=ROOT, process_group=0)  # noqa: S603
    tty = _terminal()
    asked = threading.Event()
    if tty is not None:
        signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        previous = os.tcgetpgrp(tty)
        os.tcsetpgrp(tty, child.pid)  # Ctrl-C now goes to honcho's group only

    def forward(signum: int, frame: object) -> None:
        asked.set()
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    stop = threading.Event()
    threading.Thread(
        target=_announce_when_ready, args=(args.api, key, started, stop), daemon=True
    ).start()
    try:
        rc = child.wait()
    finally:
        stop.set()
        if tty is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(tty, previous)
            os.close(tty)
    # On a terminal, Ctrl-C reached honcho alone: its 130 says a stop was asked for.
    seconds = time.monotonic() - started
    _say(summary_line(rc, seconds, asked=asked.is_set(), kept=kept_data(os.environ)) + "\n")
    return 0 if asked.is_set() or rc in STOPPED_CODES else rc


if __name__ == "__main__":
    sys.exit(main())
