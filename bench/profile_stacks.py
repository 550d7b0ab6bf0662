"""Where a gunicorn worker's time goes: py-spy samples, summed by layer.

``bench/throughput.py`` records one worker with ``py-spy record --format raw`` (collapsed
stacks, one ``frame;frame;... count`` line per distinct stack) while wrk drives the API, and
this module attributes every sample to one layer: a call to another process (PostgreSQL, the
acquirer, Redis) or a log line counts as such wherever it is made, so a psycopg call made by the
ORM made by DRF counts as PostgreSQL; any other sample counts for the innermost frame's layer
(the service's own code, the ORM, DRF, Django, JSON). Samples outside a request (the gthread
worker's poller and idle pool threads) are counted apart.

Run on a saved profile::

    .venv/bin/python bench/profile_stacks.py bench/results/throughput-wall-<ts>.txt
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

#: (layer, substrings of a frame) in priority order: the first layer with a matching frame wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("PostgreSQL round trips (psycopg: send, wait, read)", ("psycopg/", "psycopg_binary")),
    ("acquirer call (httpx/httpcore: send, wait, read)", ("httpx/", "httpcore/")),
    ("Redis (shared rate gate and retry budget)", ("redis/",)),
    ("logging (access log, service and gateway log lines)", ("logging/", "glogging.py")),
    ("Django ORM (building SQL, model instances)", ("django/db/",)),
    ("DRF (request parsing, serializers, renderers)", ("rest_framework/",)),
    ("JSON and hashing (fingerprint, body)", ("json/", "hashlib")),
    ("Django (handler, middleware, request, response)", ("django/",)),
    (
        "service code (payments, idempotency, merchants)",
        ("payments/", "idempotency/", "merchants/"),
    ),
    ("gateway_client (classification, retries, budget)", ("gateway_client/",)),
    ("gunicorn (HTTP parsing, writing the answer)", ("gunicorn/",)),
]
OTHER = "other"
#: A sample is inside a request when one of its frames is gthread's request handler.
IN_REQUEST = ("handle (gunicorn/workers/gthread.py", "handle_request (gunicorn/")
OUTSIDE = "outside a request (poller, idle pool threads)"


def parse_collapsed(lines: Iterable[str]) -> Counter[tuple[str, ...]]:
    """``frame;frame;... count`` lines (py-spy ``--format raw``) -> stack -> samples."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        try:
            stacks[tuple(stack.split(";"))] += int(count)
        except ValueError:
            continue
    return stacks


#: The layers that stand for a whole call to another process: a sample anywhere under one of
#: them counts for it, whoever called it (a psycopg call made by the ORM counts as PostgreSQL).
CALL_LAYERS = 4


def layer_of(stack: tuple[str, ...]) -> str:
    """The layer a sample counts for, or :data:`OUTSIDE`: the first of the call layers (the
    first :data:`CALL_LAYERS` of :data:`LAYERS`, in their order) with a frame in the stack;
    else the layer of the innermost frame that belongs to one, so the code running is named,
    not the framework that called it (DRF's dispatch is under every request)."""
    if not any(marker in frame for frame in stack for marker in IN_REQUEST):
        return OUTSIDE
    for layer, markers in LAYERS[:CALL_LAYERS]:
        if any(marker in frame for frame in stack for marker in markers):
            return layer
    for frame in reversed(stack):
        for layer, markers in LAYERS[CALL_LAYERS:]:
            if any(marker in frame for marker in markers):
                return layer
    return OTHER


def summarize(stacks: Counter[tuple[str, ...]]) -> dict[str, object]:
    """Samples per layer, as shares of the samples taken inside requests."""
    layers: Counter[str] = Counter()
    for stack, count in stacks.items():
        layers[layer_of(stack)] += count
    outside = layers.pop(OUTSIDE, 0)
    inside = sum(layers.values())
    return {
        "samples_in_requests": inside,
        "samples_outside_requests": outside,
        "layers": [
            {"layer": name, "samples": n, "share": n / inside if inside else 0.0}
            for name, n in layers.most_common()
        ],
        "top_functions": top_functions(stacks),
    }


def top_functions(stacks: Counter[tuple[str, ...]], n: int = 12) -> list[dict[str, object]]:
    """The functions of the project and of Django/DRF with the most inclusive samples."""
    inside = {s: c for s, c in stacks.items() if layer_of(s) != OUTSIDE}
    total = sum(inside.values())
    inclusive: Counter[str] = Counter()
    for stack, count in inside.items():
        for frame in set(stack):
            if frame.split(" (", 1)[-1].startswith(
                ("payments/", "idempotency/", "merchants/", "gateway_client/")
            ):
                inclusive[frame] += count
    return [
        {"function": frame, "share": c / total if total else 0.0}
        for frame, c in inclusive.most_common(n)
    ]


def format_summary(title: str, summary: dict[str, object]) -> str:
    lines = [f"{title}: {summary['samples_in_requests']} samples inside requests"]
    for row in summary["layers"]:  # type: ignore[union-attr]
        lines.append(f"  {row['share']:6.1%}  {row['layer']}")
    lines.append("  inclusive, project functions:")
    for row in summary["top_functions"]:  # type: ignore[union-attr]
        lines.append(f"  {row['share']:6.1%}  {row['function']}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Summarize a py-spy raw profile by layer.")
    parser.add_argument("profile", type=Path, help="py-spy record --format raw output")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stacks = parse_collapsed(args.profile.read_text().splitlines())
    print(format_summary(str(args.profile), summarize(stacks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
