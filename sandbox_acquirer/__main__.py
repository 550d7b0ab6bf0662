"""Command line: ``python -m sandbox_acquirer [--host H] [--port P] [--api-key KEY] ...``.

Prints exactly one line to stdout once it accepts connections::

    sandbox acquirer listening on http://127.0.0.1:8090

(with ``--port 0`` the port is the free one the system picked), then logs one line per
request to stderr. SIGTERM or SIGINT stops it with exit status 0; a port that cannot be
bound exits with status 1.

The bind address is ``--host``, else the environment variable ``SANDBOX_ACQUIRER_HOST``, else
``127.0.0.1`` (loopback: the control endpoints are unauthenticated).

Acquirer-wide conditions can be set from the start with ``--outage``, ``--flapping``,
``--rate-limit``, ``--capacity`` and ``--latency``, each taking the control API's JSON object
or ``key=value,...`` (``--outage failure=503,duration_seconds=30,retry_after=5``). They are
re-applied, timers restarted, by every ``POST /_sandbox/reset``.

With ``--data-dir DIR`` (else the environment variable ``SANDBOX_ACQUIRER_DATA_DIR``) its
charges, refunds and idempotency keys are kept in ``DIR/journal.jsonl`` and survive a restart
(``sandbox_acquirer/journal.py``).

The API key comes from ``--api-key`` (repeat it to accept several keys, one account each),
else from the environment variable ``SANDBOX_ACQUIRER_API_KEY``, else it is
``sandbox_sk_dev``: a development default, public by design, for a process that only ever
holds fake data.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from sandbox_acquirer.conditions import ConditionError, parse_cli_value, parse_condition
from sandbox_acquirer.models import InvalidRequest
from sandbox_acquirer.notifications import NotificationTarget
from sandbox_acquirer.scenarios import DEFAULT_HANG_SECONDS, DEFAULT_TRICKLE_SECONDS_PER_BYTE
from sandbox_acquirer.server import DEFAULT_HOST, DEFAULT_PORT, SandboxConfig, build_server
from sandbox_acquirer.store import DEFAULT_MAX_ARRIVAL_BUCKETS, DEFAULT_MAX_TRACKED_KEYS

#: Environment variable read when no ``--api-key`` is given.
API_KEY_ENV = "SANDBOX_ACQUIRER_API_KEY"
#: Environment variable read when no ``--host`` is given (a container sets ``0.0.0.0``).
HOST_ENV = "SANDBOX_ACQUIRER_HOST"
#: Environment variable read when no ``--data-dir`` is given (``make run`` sets ``.sandbox``).
DATA_DIR_ENV = "SANDBOX_ACQUIRER_DATA_DIR"
#: The development default API key (not a secret: the sandbox holds only fake data).
DEV_API_KEY = "sandbox_sk_dev"

logger = logging.getLogger("sandbox_acquirer")


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("port must be 0..65535 (0 picks a free port)")
    return port


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects NaN
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be a number > 0")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a whole number >= 1")
    return value


#: CLI flag -> condition name (the control API's /_sandbox/conditions/<name>).
_CONDITION_FLAGS = {
    "outage": "outage",
    "flapping": "flapping",
    "rate_limit": "rate-limit",
    "capacity": "capacity",
    "latency": "latency",
}


def parse_args(argv: Sequence[str] | None = None) -> SandboxConfig:
    """Parse the command line (``sys.argv[1:]`` by default) into a ``SandboxConfig``."""
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_acquirer",
        description="A fake card acquirer over HTTP, for tests, demos and benchmarks.",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get(HOST_ENV) or DEFAULT_HOST,
        help=f"address to bind (default: ${HOST_ENV}, else {DEFAULT_HOST}; the control "
        "endpoints are unauthenticated, so think twice before binding anything wider)",
    )
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port to bind, 0 for a free one (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        metavar="KEY",
        help=f"accepted bearer key; repeat for several accounts (default: ${API_KEY_ENV}, "
        f"else the development key {DEV_API_KEY})",
    )
    parser.add_argument(
        "--notification-url",
        metavar="URL",
        default=os.environ.get("SANDBOX_NOTIFICATION_URL") or None,
        help="send signed notifications there (default: $SANDBOX_NOTIFICATION_URL; the "
        "secrets, whsec_..., space-separated, from $SANDBOX_NOTIFICATION_SECRET; see "
        "docs/sandbox.md, 'Notifications')",
    )
    parser.add_argument(
        "--hang-seconds",
        type=_non_negative,
        metavar="SECONDS",
        default=DEFAULT_HANG_SECONDS,
        help="how long tok_timeout_after_commit waits before replying "
        f"(default {DEFAULT_HANG_SECONDS:g})",
    )
    parser.add_argument(
        "--trickle-seconds-per-byte",
        type=_non_negative,
        metavar="SECONDS",
        default=DEFAULT_TRICKLE_SECONDS_PER_BYTE,
        help="pace of tok_trickle: seconds between two bytes of the body "
        f"(default {DEFAULT_TRICKLE_SECONDS_PER_BYTE:g})",
    )
    parser.add_argument(
        "--max-tracked-keys",
        type=_count,
        metavar="N",
        default=DEFAULT_MAX_TRACKED_KEYS,
        help="entries kept per table: idempotency keys, charges and refunds for lookup and "
        "listing, per-key and per-reference counters; the oldest go first "
        f"(default {DEFAULT_MAX_TRACKED_KEYS})",
    )
    parser.add_argument(
        "--max-arrival-buckets",
        type=_count,
        metavar="N",
        default=DEFAULT_MAX_ARRIVAL_BUCKETS,
        help=f"100 ms arrival buckets kept in the stats (default {DEFAULT_MAX_ARRIVAL_BUCKETS}, "
        "one hour)",
    )
    for name, flag in _CONDITION_FLAGS.items():
        parser.add_argument(
            f"--{flag}",
            dest=name,
            metavar="SPEC",
            help=f"start with the {name} condition: a JSON object or key=value,... as for "
            f"POST /_sandbox/conditions/{name} (see docs/sandbox.md)",
        )
    parser.add_argument(
        "--idempotency-retention-hours",
        type=_positive,
        metavar="HOURS",
        default=24.0,
        help="how long an idempotency key is remembered after its first request (default 24)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        default=os.environ.get(DATA_DIR_ENV) or None,
        help="keep charges, refunds and idempotency keys in DIR/journal.jsonl across restarts, "
        f"as a real acquirer does (default: ${DATA_DIR_ENV}, else in memory only)",
    )
    args = parser.parse_args(argv)

    api_keys = args.api_keys or [os.environ.get(API_KEY_ENV) or DEV_API_KEY]
    if any(not key.strip() for key in api_keys):
        parser.error("--api-key must not be empty")
    conditions: dict[str, dict[str, Any]] = {}
    for name, flag in _CONDITION_FLAGS.items():
        text = getattr(args, name)
        if text is None:
            continue
        try:
            data = parse_cli_value(text)
            parse_condition(name, data, 0.0)
        except ConditionError as exc:
            parser.error(f"--{flag}: {exc.detail}")
        conditions[name] = data
    notification = None
    if args.notification_url:
        try:
            notification = NotificationTarget.from_json(
                {
                    "url": args.notification_url,
                    "secrets": os.environ.get("SANDBOX_NOTIFICATION_SECRET", "").split(),
                }
            )
        except InvalidRequest as exc:
            parser.error(f"--notification-url: {exc.detail} ($SANDBOX_NOTIFICATION_SECRET)")
    return SandboxConfig(
        notification=notification,
        api_keys=tuple(key.strip() for key in api_keys),
        host=args.host,
        port=args.port,
        hang_seconds=args.hang_seconds,
        trickle_seconds_per_byte=args.trickle_seconds_per_byte,
        idempotency_retention=timedelta(hours=args.idempotency_retention_hours),
        conditions=conditions,
        max_tracked_keys=args.max_tracked_keys,
        max_arrival_buckets=args.max_arrival_buckets,
        data_dir=None if args.data_dir is None else Path(args.data_dir),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sandbox acquirer until SIGTERM or SIGINT; returns the exit status."""
    config = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(message)s"
    )
    try:
        server = build_server(config)
    except OSError as exc:
        logger.error("cannot listen on %s:%s: %s", config.host, config.port, exc)  # noqa: TRY400 - one line for the operator, no traceback
        return 1

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    serving = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},  # how quickly a stop is noticed
        name="sandbox-acquirer",
        daemon=True,
    )
    serving.start()
    print(f"sandbox acquirer listening on {server.url}", flush=True)

    while not stop.wait(timeout=1.0):
        pass
    logger.info("stopping")
    server.stop()  # also wakes requests that are deliberately hanging
    serving.join(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
