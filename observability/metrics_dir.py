"""Prometheus multiprocess mode for the processes that fork (gunicorn's workers, Celery's pool).

prometheus_client keeps each process's counters in memory unless ``PROMETHEUS_MULTIPROC_DIR``
names a directory when it is imported: then every process writes its values to files there
and ``/metrics`` (``payments.monitoring.views``) adds them up, so one scrape shows the whole
gunicorn fleet, not the one worker that answered it.

:func:`metrics_dir_prepare` runs in the parent before it forks (gunicorn's ``on_starting``,
Celery's ``celeryd_init``): it keeps a configured ``PROMETHEUS_MULTIPROC_DIR`` or makes a
directory of its own under the system's temporary directory, empties it of a previous run's
files (``*.db`` only: counters of processes that are gone would be added forever), and
exports it to the children. :func:`metrics_dir_remove` removes a directory it made. A process
killed with ``SIGKILL`` cannot remove its own, so :func:`metrics_dir_prepare` first removes the
directories of earlier processes that are gone (:func:`metrics_dirs_sweep`): the system's
temporary directory keeps no directory of a dead process after the next start.
Standard library only: gunicorn's master imports it before any Django code.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["ENV", "metrics_dir_prepare", "metrics_dir_remove", "metrics_dirs_sweep"]

#: The variable prometheus_client reads when it is imported.
ENV = "PROMETHEUS_MULTIPROC_DIR"

_MADE: list[Path] = []
#: ``payments-metrics-<role>-<pid>-<random>``: the pid of the process that made it.
_PREFIX = "payments-metrics-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, not ours to judge
        return True
    return True


def metrics_dirs_sweep(
    base: Path | None = None, *, alive: Callable[[int], bool] = _alive
) -> list[Path]:
    """Remove the metrics directories under ``base`` (default: the system's temporary
    directory) whose process is gone; return them.

    A directory is recognised by its name (``payments-metrics-<role>-<pid>-*``, as
    :func:`metrics_dir_prepare` makes it) and left alone while ``alive(pid)`` says its process
    runs.
    """
    base = Path(tempfile.gettempdir()) if base is None else base
    removed: list[Path] = []
    for path in base.glob(f"{_PREFIX}*-*-*"):
        parts = path.name[len(_PREFIX) :].split("-")
        if len(parts) < 3 or not parts[1].isdigit() or not path.is_dir():
            continue
        if not alive(int(parts[1])):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def metrics_dir_prepare(role: str) -> Path:
    """Make this process and its future children share one metrics directory, emptied.

    ``role`` (``web``, ``worker``) names the directory made when ``PROMETHEUS_MULTIPROC_DIR``
    is unset (``<tmp>/payments-metrics-<role>-<pid>-*``). Returns the directory. Give each
    process tree its own directory: emptying it at start would erase another tree's files.
    Raises ``OSError`` when a configured directory cannot be created or written.
    """
    configured = os.environ.get(ENV)
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink(missing_ok=True)
    else:
        metrics_dirs_sweep()
        path = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{role}-{os.getpid()}-"))
        _MADE.append(path)
    os.environ[ENV] = str(path)
    return path


def metrics_dir_remove() -> None:
    """Remove the directories :func:`metrics_dir_prepare` made (a configured one stays)."""
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)
