"""Run the sandbox acquirer as a real subprocess, for tests.

``SandboxProcess.start()`` launches ``python -m sandbox_acquirer --port 0 ...`` with the
interpreter running the tests, waits for its ``sandbox acquirer listening on <url>`` line and
returns a handle; ``stop()`` (or leaving the ``with`` block) terminates it::

    from tests.support.sandbox import SandboxProcess

    with SandboxProcess.start(extra_args=("--hang-seconds", "2")) as sandbox:
        response = httpx.post(
            f"{sandbox.url}/charges",
            json={"amount": 1000, "currency": "EUR", "payment_method": "tok_visa",
                  "reference": "order-1"},
            headers={**sandbox.auth_headers(), "Idempotency-Key": "key-1"},
        )
        assert sandbox.stats()["charges_total"] == 1
        assert sandbox.charges("order-1")[0]["status"] == "approved"

The process's stderr (one log line per request) goes to a temporary file, never to a pipe
nobody reads (a full pipe would block the server); ``stderr_text()`` returns it, and a
failed start includes it in the error.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

__all__ = ["DEFAULT_API_KEY", "READY_PREFIX", "SandboxProcess", "SandboxStartError"]

#: The API key a test sandbox accepts unless told otherwise.
DEFAULT_API_KEY = "sandbox_sk_test"
#: The line the sandbox prints on stdout once it accepts connections, before its URL.
READY_PREFIX = "sandbox acquirer listening on "

_REPO_ROOT = Path(__file__).resolve().parents[2]


class SandboxStartError(RuntimeError):
    """The sandbox did not report that it was listening (it died, or took too long)."""


class SandboxProcess:
    """A running ``python -m sandbox_acquirer`` subprocess.

    Make one with ``SandboxProcess.start(...)``. Attributes: ``url`` (``http://127.0.0.1:PORT``,
    no trailing slash), ``api_key`` (the first accepted key) and ``process`` (the
    ``subprocess.Popen``). The helpers ``stats()``, ``reset()``, ``charges()``, ``refunds()``,
    ``charge_listing()`` and ``refund_listing()`` call the sandbox over HTTP. Usable as a
    context manager; ``stop()`` is idempotent.
    """

    def __init__(
        self, process: subprocess.Popen[str], url: str, api_key: str, stderr_path: Path
    ) -> None:
        """Wrap an already running process; use ``start()`` rather than calling this."""
        self.process = process
        self.url = url
        self.api_key = api_key
        self._stderr_path = stderr_path
        self._stderr_final: str | None = None
        self._http = httpx.Client(base_url=url, timeout=10.0, trust_env=False)

    @classmethod
    def start(
        cls,
        port: int = 0,
        api_key: str = DEFAULT_API_KEY,
        extra_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        startup_timeout: float = 15.0,
    ) -> Self:
        """Launch a sandbox and wait until it accepts connections.

        ``port`` 0 lets the system pick a free port (read back from ``url``). ``extra_args``
        are appended to the command line, e.g. ``("--hang-seconds", "2")`` or
        ``("--api-key", "another")`` for a second account, or a condition such as
        ``("--outage", "failure=503,duration_seconds=60")``. Raises ``SandboxStartError``,
        with the process's stderr, if no ready line arrives within ``startup_timeout``
        seconds.
        """
        command = [
            sys.executable, "-m", "sandbox_acquirer",
            "--host", host, "--port", str(port), "--api-key", api_key, *extra_args,
        ]  # fmt: skip
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with tempfile.NamedTemporaryFile(
            prefix="sandbox-acquirer-", suffix=".log", delete=False
        ) as stderr_file:
            stderr_path = Path(stderr_file.name)
            process = subprocess.Popen(
                command,
                cwd=_REPO_ROOT,  # `-m` then finds this checkout's sandbox_acquirer
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr_file,
                text=True,
            )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(
            target=_pump_lines, args=(process, lines), name="sandbox-stdout", daemon=True
        ).start()
        try:
            line = lines.get(timeout=startup_timeout)
        except queue.Empty:
            line = None
            reason = f"no ready line within {startup_timeout:g} s"
        else:
            reason = "the process exited before it was ready"
        if line is None or not line.startswith(READY_PREFIX):
            _terminate(process)
            stderr = _read_text(stderr_path)
            stderr_path.unlink(missing_ok=True)
            if line is not None:
                reason = f"unexpected first line {line.strip()!r}"
            raise SandboxStartError(
                f"sandbox acquirer did not start ({reason}; exit status {process.returncode})."
                f"\ncommand: {' '.join(command)}\nstderr:\n{stderr}"
            )
        return cls(process, line[len(READY_PREFIX) :].strip(), api_key, stderr_path)

    # -- HTTP helpers ---------------------------------------------------------------------

    def auth_headers(self) -> dict[str, str]:
        """``{"Authorization": "Bearer <api_key>"}`` for requests to ``/charges``."""
        return {"Authorization": f"Bearer {self.api_key}"}

    def stats(self) -> dict[str, Any]:
        """``GET /_sandbox/stats``: ``charges_total``, ``charges_by_reference``,
        ``requests_total`` and ``requests_by_status`` (status as a string) since the last
        reset, plus per-endpoint, per-idempotency-key and arrival counters (docs/sandbox.md)."""
        response = self._http.get("/_sandbox/stats")
        response.raise_for_status()
        return response.json()

    def reset(self) -> None:
        """``POST /_sandbox/reset``: forget every charge, idempotency key, attempt count,
        counter and condition set through the control API (command-line ones are re-applied)."""
        self._http.post("/_sandbox/reset").raise_for_status()

    def set_condition(self, name: str, **fields: Any) -> dict[str, Any]:
        """``POST /_sandbox/conditions/<name>`` with ``fields`` as the JSON object, e.g.
        ``set_condition("outage", duration_seconds=30, failure=503)``; returns the stored
        condition. Raises ``httpx.HTTPStatusError`` (400 with the reason) if it is invalid."""
        response = self._http.post(f"/_sandbox/conditions/{name}", json=fields)
        response.raise_for_status()
        return response.json()[name]

    def clear_conditions(self) -> None:
        """``DELETE /_sandbox/conditions``: no outage, rate limit, capacity limit or latency."""
        self._http.delete("/_sandbox/conditions").raise_for_status()

    def stats_csv(self) -> str:
        """``GET /_sandbox/stats?format=csv``: the stats as ``metric,key,value`` rows."""
        response = self._http.get("/_sandbox/stats", params={"format": "csv"})
        response.raise_for_status()
        return response.text

    def charges(self, reference: str) -> list[dict[str, Any]]:
        """This API key's charges with merchant ``reference``, oldest first."""
        response = self._http.get(
            "/charges", params={"reference": reference}, headers=self.auth_headers()
        )
        response.raise_for_status()
        return response.json()["data"]

    def refunds(self, reference: str) -> list[dict[str, Any]]:
        """This API key's refunds with the caller's refund ``reference``
        (``GET /refunds?reference=``), oldest first."""
        response = self._http.get(
            "/refunds", params={"reference": reference}, headers=self.auth_headers()
        )
        response.raise_for_status()
        return response.json()["data"]

    def charge_listing(self) -> list[dict[str, Any]]:
        """Every charge of this API key with its capture state (``GET /_sandbox/charges``,
        first page of up to 10000), oldest first."""
        return self._listing("/_sandbox/charges")

    def refund_listing(self) -> list[dict[str, Any]]:
        """Every refund of this API key (``GET /_sandbox/refunds``, first page of up to
        10000), oldest first, each with its ``idempotency_key``."""
        return self._listing("/_sandbox/refunds")

    def _listing(self, path: str) -> list[dict[str, Any]]:
        response = self._http.get(path, params={"limit": "10000"}, headers=self.auth_headers())
        response.raise_for_status()
        return response.json()["data"]

    # -- lifecycle ------------------------------------------------------------------------

    def stderr_text(self) -> str:
        """What the process wrote to stderr so far (its request log)."""
        if self._stderr_final is not None:
            return self._stderr_final
        return _read_text(self._stderr_path)

    def stop(self, timeout: float = 5.0) -> int | None:
        """Terminate (SIGTERM), wait up to ``timeout`` s, then kill; returns the exit status."""
        if self._stderr_final is None:
            self._http.close()
            _terminate(self.process, timeout)
            self._stderr_final = _read_text(self._stderr_path)
            self._stderr_path.unlink(missing_ok=True)
        return self.process.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<SandboxProcess pid={self.process.pid} url={self.url}>"


def _pump_lines(process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    """Forward stdout lines to ``lines`` (``None`` at end of file), so nothing blocks."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put(None)


def _terminate(process: subprocess.Popen[str], timeout: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
