"""
Retry-storm simulator: the project's own backoff and budget code in simulated time, no sockets.

    python -m bench.simulate [--seed 1] [--runs 100] [--clients 10:190:10]
                                      [--plots DIR] [--only aws|storm]

Two experiments, deterministic for a given seed:

1. The AWS backoff simulation (aws-samples/aws-arch-backoff-simulator, "Exponential Backoff
   And Jitter", docs/reference/backoff-study.md), ported event by event: N clients each update one
   row once with optimistic concurrency (read the version, write conditionally, back off and
   start over on a conflict); every message takes abs(normal(10 ms, sd 2 ms)); base 5 ms, cap
   2000 ms; 100 runs per N. "calls" counts writes attempted, "time" is when the last client
   succeeded (averages per run). As in the original, the sleep after the k-th conflict uses
   exponent n = k (1 for the first retry), so its first bound is 2 x base; the client's own
   loop starts at n = 0. The strategies are the classes of backoff.py.

2. The storm: 1000 clients fail at the same instant (t = 0) against a service of capacity
   300 requests/s, and retry. From t = 0 the service is up and only retries load it. It is
   modelled per one-second slot: with L requests arriving in a slot it completes
   min(L, max(0, 2C - L)) of them, the earliest first (goodput falls linearly above capacity
   and is zero at twice capacity: queues and thread pools exhausted, everything times out);
   the others fail at the end of the slot. A client retries up to `--storm-attempts`
   attempts in all (10), its sleep coming from the strategy. Reported per strategy: the peak
   load of retries (requests/s; the 1000 initial requests are not counted), when the service
   recovered (the end of the last overloaded slot), how many clients succeeded or gave up
   (attempts or budget exhausted), and the requests sent (the initial 1000 included).
   Strategies: fixed interval (2 s), exponential without jitter (base 1 s, cap 30 s), full
   jitter (same), full jitter with the retry budget (budget.py defaults, on a MemoryStore with
   a ManualClock), and the client's defaults (RetryPolicy: base 0.2 s, cap 2 s, 3 attempts,
   8 s deadline, with the budget).

Prints both tables. With `--plots DIR`, writes `aws_calls.png`, `aws_time.png` and
`storm_load.png` to DIR with matplotlib, which is optional (the `bench` extra) and imported
only then.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gateway_client.policy import RetryPolicy
from resilience.backoff import (
    Backoff,
    DecorrelatedJitter,
    EqualJitter,
    ExponentialBackoff,
    FixedInterval,
    FullJitter,
    NoBackoff,
)
from resilience.budget import RetryBudget
from resilience.clock import ManualClock
from resilience.store import MemoryStore

__all__ = [
    "AWS_STRATEGIES",
    "AwsResult",
    "StormResult",
    "main",
    "run_aws",
    "run_aws_once",
    "run_storm",
]

# -- 1. the AWS simulation -------------------------------------------------------------------

#: Name -> factory(base, cap, random) of a per-client backoff (decorrelated keeps state).
AWS_STRATEGIES: dict[str, Callable[[float, float, Callable[[], float]], Backoff]] = {
    "no backoff": lambda base, cap, rnd: NoBackoff(),
    "exponential": lambda base, cap, rnd: ExponentialBackoff(base, cap),
    "equal jitter": lambda base, cap, rnd: EqualJitter(base, cap, rnd),
    "full jitter": lambda base, cap, rnd: FullJitter(base, cap, rnd),
    "decorrelated": lambda base, cap, rnd: DecorrelatedJitter(base, cap, rnd),
}

_READ, _READ_REPLY, _WRITE, _WRITE_REPLY = range(4)


@dataclass(frozen=True, slots=True)
class AwsResult:
    """Averages over the runs: `calls` (writes attempted) and `time` (milliseconds)."""

    strategy: str
    clients: int
    calls: float
    time: float


def run_aws_once(
    strategy: str,
    clients: int,
    rnd: random.Random,
    *,
    base: float = 5.0,
    cap: float = 2000.0,
    mean: float = 10.0,
    sd: float = 2.0,
) -> tuple[int, float]:
    """One run of the OCC simulation: returns (writes attempted, completion time in ms)."""
    make = AWS_STRATEGIES[strategy]
    backoffs = [make(base, cap, rnd.random) for _ in range(clients)]
    failures = [0] * clients
    version = 0
    calls = 0

    def delay() -> float:
        return abs(rnd.normalvariate(mean, sd))

    queue: list[tuple[float, int, int, int, int]] = []
    sequence = 0
    for client in range(clients):
        heapq.heappush(queue, (delay(), sequence, _READ, client, 0))
        sequence += 1
    now = 0.0
    while queue:
        now, _, kind, client, payload = heapq.heappop(queue)
        if kind == _READ:
            event = (now + delay(), _READ_REPLY, client, version)
        elif kind == _READ_REPLY:
            event = (now + delay(), _WRITE, client, payload)
        elif kind == _WRITE:
            calls += 1
            success = payload == version
            if success:
                version += 1
            event = (now + delay(), _WRITE_REPLY, client, int(success))
        else:  # _WRITE_REPLY
            if payload:
                continue
            failures[client] += 1
            sleep = backoffs[client].delay(failures[client])
            event = (now + delay() + sleep, _READ, client, 0)
        heapq.heappush(queue, (event[0], sequence, event[1], event[2], event[3]))
        sequence += 1
    return calls, now


def run_aws(
    clients: Sequence[int], *, runs: int = 100, seed: int = 1, strategies: Sequence[str] = ()
) -> list[AwsResult]:
    """Average calls and completion time (ms) per strategy and client count."""
    results: list[AwsResult] = []
    for strategy in strategies or AWS_STRATEGIES:
        for count in clients:
            rnd = random.Random(f"{seed}:{strategy}:{count}")
            total_calls, total_time = 0, 0.0
            for _ in range(runs):
                calls, finished = run_aws_once(strategy, count, rnd)
                total_calls += calls
                total_time += finished
            results.append(AwsResult(strategy, count, total_calls / runs, total_time / runs))
    return results


# -- 2. the storm ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StormStrategy:
    """How storm clients retry: a backoff factory, attempts in all, a budget or not."""

    name: str
    backoff: Callable[[Callable[[], float]], Backoff]
    max_attempts: int
    budget: bool = False
    deadline: float = math.inf


@dataclass(slots=True)
class StormResult:
    """Outcome of one storm: loads per second and the counts."""

    strategy: str
    peak_retry_load: int
    recovered_at: float
    succeeded: int
    gave_up: int
    budget_refused: int
    requests: int
    load: list[int] = field(default_factory=list)


def storm_strategies(max_attempts: int = 10) -> list[StormStrategy]:
    """The strategies compared in the storm (module docstring)."""
    policy = RetryPolicy()
    return [
        StormStrategy("fixed 2 s", lambda rnd: FixedInterval(2.0), max_attempts),
        StormStrategy("exponential", lambda rnd: ExponentialBackoff(1.0, 30.0), max_attempts),
        StormStrategy("full jitter", lambda rnd: FullJitter(1.0, 30.0, rnd), max_attempts),
        StormStrategy(
            "full jitter + budget",
            lambda rnd: FullJitter(1.0, 30.0, rnd),
            max_attempts,
            budget=True,
        ),
        StormStrategy(
            "client defaults + budget",
            lambda rnd: FullJitter(policy.backoff_base, policy.backoff_cap, rnd),
            policy.max_attempts,
            budget=True,
            deadline=policy.deadline,
        ),
    ]


def run_storm(
    strategy: StormStrategy,
    *,
    clients: int = 1000,
    capacity: int = 300,
    seed: int = 1,
    horizon: float = 600.0,
) -> StormResult:
    """Simulate one storm (module docstring); deterministic for a given seed."""
    rnd = random.Random(f"{seed}:{strategy.name}")
    clock = ManualClock(start=0.0)
    budget = RetryBudget(MemoryStore(clock.monotonic), "storm") if strategy.budget else None
    backoffs = [strategy.backoff(rnd.random) for _ in range(clients)]
    attempts = [1] * clients
    slots: dict[int, list[tuple[float, int]]] = {}
    load: list[int] = []
    succeeded = gave_up = refused = requests = 0
    last_overloaded = -1
    if budget is not None:
        for _ in range(clients):
            budget.record_request()
    requests += clients
    # The initial failure: every first attempt at t = 0 fails (the outage), known at t = 0.
    pending: list[tuple[float, int]] = [(0.0, client) for client in range(clients)]
    slot = 0
    while slot < horizon:
        for failed_at, client in pending:
            if attempts[client] >= strategy.max_attempts:
                gave_up += 1
                continue
            sleep = backoffs[client].delay(attempts[client] - 1)
            if failed_at + sleep >= strategy.deadline:
                gave_up += 1
                continue
            if budget is not None:
                clock.advance(max(0.0, failed_at - clock.monotonic()))
                if not budget.try_withdraw()[0]:
                    refused += 1
                    gave_up += 1
                    continue
            attempts[client] += 1
            at = failed_at + sleep
            slots.setdefault(int(at), []).append((at, client))
        pending = []
        arrivals = sorted(slots.pop(slot, []))
        # The initial requests failed in the outage at t = 0; from then on the service is up
        # with its capacity, and only retries load it.
        count = len(arrivals)
        load.append(count)
        requests += count
        served = min(count, max(0, 2 * capacity - count))
        for index, (_, client) in enumerate(arrivals):
            if index < served:
                succeeded += 1
            else:
                pending.append((float(slot + 1), client))
        if count > capacity:
            last_overloaded = slot
        slot += 1
        if not pending and not slots:
            break
    return StormResult(
        strategy.name,
        max(load, default=0),
        float(last_overloaded + 1),
        succeeded,
        gave_up,
        refused,
        requests,
        load,
    )


# -- output ----------------------------------------------------------------------------------


def format_aws(results: Sequence[AwsResult]) -> str:
    """Two tables (calls, completion time in s) with one row per client count."""
    strategies = list(dict.fromkeys(r.strategy for r in results))
    counts = sorted({r.clients for r in results})
    index = {(r.strategy, r.clients): r for r in results}
    width = max(14, *(len(s) + 2 for s in strategies))
    lines: list[str] = []
    for title, value in (
        ("calls (writes attempted, mean per run)", lambda r: f"{r.calls:.0f}"),
        ("completion time (s, mean per run)", lambda r: f"{r.time / 1000:.2f}"),
    ):
        lines.append(f"AWS OCC simulation: {title}")
        lines.append("clients".rjust(8) + "".join(s.rjust(width) for s in strategies))
        for count in counts:
            cells = "".join(value(index[(s, count)]).rjust(width) for s in strategies)
            lines.append(str(count).rjust(8) + cells)
        lines.append("")
    return "\n".join(lines)


def format_storm(results: Sequence[StormResult], clients: int, capacity: int) -> str:
    """One row per strategy."""
    header = (
        f"Storm: {clients} clients fail at t=0, capacity {capacity} req/s "
        "(goodput min(L, 2C - L) per second)"
    )
    columns = ("strategy", "peak retry req/s", "recovered at", "succeeded", "gave up", "requests")
    lines = [header, f"{columns[0]:<26}" + "".join(f"{c:>18}" for c in columns[1:])]
    for r in results:
        lines.append(
            f"{r.strategy:<26}{r.peak_retry_load:>18}{_recovered(r):>18}"
            f"{r.succeeded:>18}{r.gave_up:>18}{r.requests:>18}"
        )
    return "\n".join(lines) + "\n"


def _recovered(result: StormResult) -> str:
    return "never down" if result.recovered_at <= 0 else f"{result.recovered_at:.0f} s"


def write_plots(
    directory: Path, aws: Sequence[AwsResult], storm: Sequence[StormResult], capacity: int
) -> list[Path]:
    """Write the PNG plots to `directory` (created if needed); needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if aws:
        strategies = list(dict.fromkeys(r.strategy for r in aws))
        for name, attribute, label, scale in (
            ("aws_calls.png", "calls", "writes attempted", 1.0),
            ("aws_time.png", "time", "completion time (s)", 1000.0),
        ):
            figure, axes = plt.subplots(figsize=(8, 5))
            for strategy in strategies:
                rows = sorted((r for r in aws if r.strategy == strategy), key=lambda r: r.clients)
                axes.plot(
                    [r.clients for r in rows],
                    [getattr(r, attribute) / scale for r in rows],
                    marker="o",
                    label=strategy,
                )
            axes.set_xlabel("clients")
            axes.set_ylabel(label)
            axes.set_title(f"AWS OCC simulation: {label}")
            axes.legend()
            axes.grid(True, alpha=0.3)
            figure.tight_layout()
            path = directory / name
            figure.savefig(path, dpi=100)
            plt.close(figure)
            written.append(path)
    if storm:
        horizon = min(40, max(len(r.load) for r in storm))
        figure, rows = plt.subplots(
            len(storm), 1, figsize=(9, 2 * len(storm)), sharex=True, squeeze=False
        )
        for axes, result in zip(rows[:, 0], storm, strict=True):
            seconds = list(range(len(result.load) + 1))
            axes.step(seconds, [*result.load, 0], where="post", color="tab:blue")
            axes.axhline(capacity, color="black", linestyle="--", linewidth=1)
            axes.set_ylim(0, max(1100, capacity * 1.2))
            axes.set_ylabel("req/s")
            axes.set_title(
                f"{result.strategy}: {result.succeeded} succeeded, {result.gave_up} gave up",
                fontsize=9,
            )
            axes.grid(True, alpha=0.3)
        rows[-1, 0].set_xlim(0, horizon)
        rows[-1, 0].set_xlabel(
            f"seconds after 1000 clients failed at t = 0 (first {horizon} s; dashed: capacity)"
        )
        figure.tight_layout()
        path = directory / "storm_load.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        written.append(path)
    return written


def _client_range(text: str) -> list[int]:
    if ":" in text:
        start, stop, step = (int(part) for part in text.split(":"))
        return list(range(start, stop + 1, step))
    return [int(part) for part in text.split(",")]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.simulate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100, help="runs per client count (100)")
    parser.add_argument(
        "--clients", type=_client_range, default=list(range(10, 200, 10)), help="10:190:10"
    )
    parser.add_argument("--storm-clients", type=int, default=1000)
    parser.add_argument("--capacity", type=int, default=300, help="requests/s (300)")
    parser.add_argument("--storm-attempts", type=int, default=10)
    parser.add_argument("--plots", type=Path, default=None, help="directory for PNG plots")
    parser.add_argument("--only", choices=("aws", "storm"), default=None)
    args = parser.parse_args(argv)

    aws: list[AwsResult] = []
    storm: list[StormResult] = []
    if args.only in (None, "aws"):
        aws = run_aws(args.clients, runs=args.runs, seed=args.seed)
        print(format_aws(aws))
    if args.only in (None, "storm"):
        storm = [
            run_storm(s, clients=args.storm_clients, capacity=args.capacity, seed=args.seed)
            for s in storm_strategies(args.storm_attempts)
        ]
        print(format_storm(storm, args.storm_clients, args.capacity))
    if args.plots is not None:
        try:
            written = write_plots(args.plots, aws, storm, args.capacity)
        except ImportError:
            print(
                "matplotlib is needed for --plots: pip install matplotlib "
                "(the project's optional 'bench' extra)",
                file=sys.stderr,
            )
            return 2
        for path in written:
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
