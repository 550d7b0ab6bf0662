"""Benchmark: a live retry storm against the sandbox acquirer in capacity mode.

One command (docs/benchmarks.md, "Live retry storm")::

    .venv/bin/python bench/retry_storm.py                     # 200 clients, 60 requests/s
    .venv/bin/python bench/retry_storm.py --clients 50 --capacity 20 --strategies fixed

The sandbox admits at most ``--capacity`` charges per wall-clock second and refuses the rest
with 503 after ``--overload-delay-ms`` (a saturated acquirer is slow even to refuse; no
Retry-After). Two scenarios by default (``--max-concurrent 0 10``): the rate limit alone, and
the rate limit plus at most 10 requests in flight, slow refusals included, so that refusals
themselves take capacity (an overload that feeds on itself). ``--clients`` clients, each a
thread with its own kept-alive connection, send one payment each at the same instant and retry
a refused one, up to ``--max-attempts`` attempts, with one strategy per run (the sandbox is
reset in between):

* ``fixed``: every ``--fixed-interval`` seconds;
* ``no-jitter``: capped exponential, ``min(cap, base * 2^n)`` (``resilience.backoff``'s
  ``ExponentialBackoff``);
* ``full-jitter``: ``uniform(0, min(cap, base * 2^n))`` (``resilience.backoff.full_jitter``);
* ``full-jitter+budget``: the same, and every retry must first take a token from one shared
  ``resilience.budget.RetryBudget`` (its defaults: 10 % of first attempts plus 10 retries/s
  in reserve, over 10 s), as every process of the service shares one through Redis; an empty
  budget gives up at once.

The sandbox's ``arrivals_per_100ms`` is the load curve, plotted per strategy into
``docs/img/bench_retry_storm_rate.png`` and ``docs/img/bench_retry_storm_concurrency.png``
(the first of ``--repeat`` runs). Reported (medians of the runs), as ratios to the capacity:
the peak (the busiest 1 s window, and the busiest after the first second, i.e. the retries)
and the time to recovery (until no 1 s window exceeds the capacity any more) over the ideal
drain time ``clients / capacity``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import (
    IMG,
    SANDBOX_API_KEY,
    machine_context,
    median,
    print_table,
    ratio,
    start_sandbox,
    timestamp,
    write_results,
)
from resilience.backoff import ExponentialBackoff, FixedInterval, full_jitter
from resilience.budget import RetryBudget
from resilience.store import MemoryStore

STRATEGIES = ("fixed", "no-jitter", "full-jitter", "full-jitter+budget")


def delay_function(strategy: str, args: argparse.Namespace, rng: random.Random):
    """The sleep before retry n (0-based) for ``strategy``."""
    if strategy == "fixed":
        return FixedInterval(args.fixed_interval).delay
    if strategy == "no-jitter":
        return ExponentialBackoff(args.backoff_base, args.backoff_cap).delay
    return lambda n: full_jitter(n, args.backoff_base, args.backoff_cap, rng.random)


def run_strategy(
    sandbox, strategy: str, args: argparse.Namespace, stamp: str, max_concurrent: int
) -> dict:
    sandbox.reset()
    sandbox.clear_conditions()
    capacity = {"max_per_second": args.capacity, "overload_delay_ms": args.overload_delay_ms}
    if max_concurrent:
        capacity["max_concurrent"] = max_concurrent
    sandbox.set_condition("capacity", **capacity)
    budget = RetryBudget(MemoryStore(), "sandbox") if strategy.endswith("+budget") else None
    clients = [httpx.Client(base_url=sandbox.url, timeout=10,
                            headers={"Authorization": f"Bearer {SANDBOX_API_KEY}"})
               for _ in range(args.clients)]  # fmt: skip
    for client in clients:  # open every connection before the storm
        client.get("/healthz")
    outcomes: Counter = Counter()
    attempts: Counter = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(args.clients + 1)

    def one(index: int) -> None:
        rng = random.Random(f"{stamp}-{strategy}-{index}")
        delay = delay_function(strategy, args, rng)
        key = f"storm-{stamp}-{max_concurrent}-{strategy}-{index}"
        body = json.dumps({"amount": 1999, "currency": "EUR", "payment_method": "tok_visa",
                           "reference": key})  # fmt: skip
        outcome, n = "gave up (attempts)", 0
        barrier.wait()
        for n in range(args.max_attempts):
            if n == 0:
                if budget is not None:
                    budget.record_request()
            else:
                if budget is not None and not budget.try_withdraw()[0]:
                    outcome = "gave up (budget)"
                    break
                time.sleep(delay(n - 1))
            try:
                status = clients[index].post(
                    "/charges", content=body,
                    headers={"Content-Type": "application/json", "Idempotency-Key": key},
                ).status_code  # fmt: skip
            except httpx.HTTPError:
                status = 0
            if status == 201:
                outcome = "succeeded"
                break
        with lock:
            outcomes[outcome] += 1
            attempts[n + 1] += 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.time()
    for thread in threads:
        thread.join(timeout=max(1.0, args.time_limit - (time.time() - started)))
    finished = time.time() - started
    for client in clients:
        client.close()
    stats = sandbox.stats()
    series = arrivals_series(stats["arrivals_per_100ms"], started)
    return {
        "strategy": strategy,
        "outcomes": dict(outcomes),
        "requests": sum(series),
        "seconds_until_all_done": finished,
        "series_per_100ms": series,
        **storm_metrics(series, args.capacity, args.clients),
    }


def arrivals_series(buckets: dict[str, int], started: float) -> list[int]:
    """Arrivals per 100 ms from the bucket holding ``started`` (epoch s) on, gaps as 0."""
    if not buckets:
        return []
    first = int(started * 10) * 100
    items = {int(k): v for k, v in buckets.items() if int(k) >= first}
    if not items:
        return []
    last = max(items)
    return [items.get(first + 100 * i, 0) for i in range((last - first) // 100 + 1)]


def storm_metrics(series: list[int], capacity: float, clients: int) -> dict[str, float]:
    """Peak 1 s load and time to recovery, as ratios to the capacity (see the module doc)."""
    windows = [sum(series[i : i + 10]) for i in range(max(1, len(series) - 9))]
    peak = max(windows, default=0)
    retry_peak = max(windows[10:], default=0)
    over = [i for i, w in enumerate(windows) if w > capacity]
    recovery = (over[-1] + 10) / 10 if over else 0.0  # the end of the last overloaded window
    ideal = clients / capacity
    return {
        "peak_per_second": peak,
        "peak_ratio": ratio(peak, capacity),
        "retry_peak_per_second": retry_peak,
        "retry_peak_ratio": ratio(retry_peak, capacity),
        "recovery_seconds": recovery,
        "ideal_drain_seconds": ideal,
        "recovery_ratio": ratio(recovery, ideal),
    }


def combine(runs: list[dict]) -> dict:
    """The medians of repeated runs of one strategy (the runs themselves kept under ``runs``)."""
    summary: dict = {"strategy": runs[0]["strategy"], "runs": runs}
    for name in ("requests", "peak_ratio", "retry_peak_ratio", "recovery_seconds",
                 "recovery_ratio", "seconds_until_all_done"):  # fmt: skip
        summary[name] = median(r[name] for r in runs)
    summary["succeeded"] = median(r["outcomes"].get("succeeded", 0) for r in runs)
    summary["gave_up"] = median(
        sum(v for k, v in r["outcomes"].items() if k != "succeeded") for r in runs
    )
    return summary


def plot(results: list[dict], capacity: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.1 * len(results)), sharex=True,
                             sharey=True)  # fmt: skip
    axes = [axes] if len(results) == 1 else list(axes)
    for ax, result in zip(axes, results, strict=True):
        series = result["series_per_100ms"]
        ax.bar([i / 10 for i in range(len(series))], series, width=0.1, align="edge",
               color="#4c72b0")  # fmt: skip
        ax.axhline(capacity / 10, color="#c44e52", linestyle="--", linewidth=1)
        ok = result["outcomes"].get("succeeded", 0)
        ax.set_title(
            f"{result['strategy']}: {result['requests']} requests, {ok} succeeded, "
            f"recovered at {result['recovery_seconds']:.1f} s", fontsize=9, loc="left",
        )  # fmt: skip
        ax.set_ylabel("per 100 ms")
    axes[-1].set_xlabel(
        f"seconds after the storm began (dashed: capacity, {capacity:g}/s = "
        f"{capacity / 10:g} per 100 ms)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=60, help="admitted charges per second")
    parser.add_argument("--overload-delay-ms", type=int, default=200)
    parser.add_argument(
        "--max-concurrent", type=int, nargs="+", default=[0, 10],
        help="one scenario per value: requests in flight, slow refusals included (0: no limit)",
    )  # fmt: skip
    parser.add_argument("--max-attempts", type=int, default=8)
    parser.add_argument("--fixed-interval", type=float, default=1.0)
    parser.add_argument("--backoff-base", type=float, default=0.2)
    parser.add_argument("--backoff-cap", type=float, default=2.0)
    parser.add_argument("--time-limit", type=float, default=60, help="seconds per strategy")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per strategy (medians; the first is plotted)"
    )
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument(
        "--plot-dir", type=Path, default=IMG,
        help="bench_retry_storm_rate.png (no concurrency limit), bench_retry_storm_concurrency.png",
    )  # fmt: skip
    return parser.parse_args(argv)


def plot_name(max_concurrent: int) -> str:
    return "bench_retry_storm_concurrency.png" if max_concurrent else "bench_retry_storm_rate.png"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stamp = timestamp()
    scenarios = []
    with start_sandbox() as sandbox:
        for max_concurrent in args.max_concurrent:
            limit = f"{args.capacity}/s"
            if max_concurrent:
                limit += f", {max_concurrent} in flight"
            print(f"== acquirer capacity {limit}, refusals after {args.overload_delay_ms} ms")
            results = []
            for strategy in args.strategies:
                runs = [
                    run_strategy(sandbox, strategy, args, f"{stamp}-{n}", max_concurrent)
                    for n in range(args.repeat)
                ]
                result = combine(runs)
                results.append(result)
                print(
                    f"{strategy:20s} {result['requests']:5.0f} requests  "
                    f"{result['succeeded']:.0f} succeeded  "
                    f"peak {result['peak_ratio']:.2f}x, retries' peak "
                    f"{result['retry_peak_ratio']:.2f}x capacity, recovered at "
                    f"{result['recovery_seconds']:.1f} s ({result['recovery_ratio']:.2f}x ideal)"
                )
            plot_path = args.plot_dir / plot_name(max_concurrent)
            plot([r["runs"][0] for r in results], args.capacity, plot_path)
            scenarios.append({"max_concurrent": max_concurrent, "plot": str(plot_path),
                              "results": results})  # fmt: skip
    for scenario in scenarios:
        limit = scenario["max_concurrent"]
        print(f"\ncapacity {args.capacity}/s" + (f", {limit} in flight" if limit else ""))
        print_table(
            ["strategy", "requests", "succeeded", "gave up", "peak / capacity",
             "retries' peak / capacity", "recovery s", "recovery / ideal drain"],
            [
                (r["strategy"], r["requests"], r["succeeded"], r["gave_up"],
                 r["peak_ratio"], r["retry_peak_ratio"], r["recovery_seconds"],
                 r["recovery_ratio"])
                for r in scenario["results"]
            ],
        )  # fmt: skip
    path = write_results(
        "retry_storm",
        {"machine": machine_context(), "settings": vars(args), "scenarios": scenarios},
    )
    print("\nplots: " + ", ".join(s["plot"] for s in scenarios) + f"\nresults: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
