"""Soak: a steady, modest stream of payments for a long time (10 minutes; 60 s short) ->
0 errors, 0 duplicates, and the memory of every process bounded.

Open loop at ``rate`` requests per second (a request is sent on schedule whether or not the
previous ones have been answered): 90 % new payments (``tok_visa``), 7 % declines, 3 %
replays of an earlier key with the same body (which must answer the stored 201 byte for
byte). The RSS of every process of the stack (gunicorn master and workers, Celery worker and
its pool, beat, sandbox) is sampled every few seconds; start is after a warm-up (a tenth of
the run, at least 10 s, when lazy imports and connection pools have settled). A service
process whose RSS grows by more than ``max(32 MiB, 25 %)`` from start to end is a violation;
the sandbox keeps every record by design (bounded by ``--max-tracked-keys``) and is only
reported.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime

from campaigns.client import Answer, ApiClient
from campaigns.harness import CampaignResult, Stack, audit_figures, percentile

MIB = 1024 * 1024
GROWTH_FLOOR = 32 * MIB
GROWTH_FRACTION = 0.25


async def _load(
    stack: Stack, api_key: str, seconds: float, rate: float, rss_every: float, warmup: float
) -> tuple[list, dict[str, int], dict[str, int], dict[str, int], float]:
    assert stack.web is not None
    api = ApiClient(stack.web.url, api_key, max_connections=128, timeout=30)
    rng = random.Random(5)
    done: list[tuple[str, str, dict, Answer]] = []  # (kind, key, body, answer)
    completed: list[tuple[str, dict, bytes]] = []
    tasks: set[asyncio.Task] = set()
    start_rss: dict[str, int] = {}
    max_rss: dict[str, int] = {}
    started = time.monotonic()
    next_sample = started + warmup
    sent = 0

    async def one(kind: str, key: str, body: dict) -> None:
        answer = await api.create(key, body)
        done.append((kind, key, body, answer))
        if kind != "replay" and answer.status == 201:
            completed.append((key, body, answer.body))

    try:
        while (now := time.monotonic()) - started < seconds:
            due = started + sent / rate
            if due > now:
                await asyncio.sleep(due - now)
            roll = rng.random()
            if roll < 0.03 and completed:
                key, body, _ = rng.choice(completed)
                kind = "replay"
            else:
                kind = "decline" if roll < 0.10 else "new"
                key = f"soak-{stack.tag}-{sent}"
                body = {
                    "amount": 100 + sent % 1000,
                    "currency": "EUR",
                    "reference": key,
                    "payment_method": "tok_decline" if kind == "decline" else "tok_visa",
                }
            task = asyncio.create_task(one(kind, key, body))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            sent += 1
            if time.monotonic() >= next_sample:
                sample = await asyncio.to_thread(stack.rss)
                if not start_rss:
                    start_rss = dict(sample)
                for name, value in sample.items():
                    max_rss[name] = max(max_rss.get(name, 0), value)
                next_sample += rss_every
        lag = time.monotonic() - started - seconds
        await asyncio.gather(*tasks)
    finally:
        await api.close()
    end_rss = await asyncio.to_thread(stack.rss)
    for name, value in end_rss.items():
        max_rss[name] = max(max_rss.get(name, 0), value)
    originals = {key: body for key, _, body in completed}
    return (
        [(k, key, b, a, originals.get(key)) for k, key, b, a in done],
        start_rss,
        end_rss,
        max_rss,
        lag,
    )


def run(
    stack: Stack, *, seconds: float = 600, rate: float = 20, rss_every: float = 5.0
) -> CampaignResult:
    result = CampaignResult("soak")
    since = datetime.now(UTC)
    merchant_id, api_key = stack.create_merchant("soak")
    warmup = max(10.0, seconds / 10)
    done, start_rss, end_rss, max_rss, _ = asyncio.run(
        _load(stack, api_key, seconds, rate, rss_every, warmup)
    )
    errors: dict[str, int] = {}
    bad_replays = 0
    latencies = []
    for kind, _key, _body, answer, original in done:
        latencies.append(answer.seconds)
        if answer.status != 201:
            label = f"{kind} {answer.status or answer.error}"
            errors[label] = errors.get(label, 0) + 1
        elif kind == "replay" and (not answer.replayed or answer.body != original):
            bad_replays += 1
    stack.wait_resolved(since, timeout=60)
    (duplicates,) = stack.sql(
        "SELECT count(*) FROM (SELECT reference FROM payments_payment WHERE merchant_id = %s "
        "GROUP BY reference HAVING count(*) > 1) d",
        [merchant_id],
    )[0]
    (payments,) = stack.sql(
        "SELECT count(*) FROM payments_payment WHERE merchant_id = %s", [merchant_id]
    )[0]
    audit = stack.audit(since, "soak")
    elapsed_rate = len(done) / seconds if seconds else 0

    memory = {}
    grew = []
    for name in sorted(set(start_rss) | set(end_rss)):
        start, end = start_rss.get(name), end_rss.get(name)
        if start is None or end is None:
            memory[name] = (
                f"{'-' if start is None else start // MIB} -> "
                f"{'-' if end is None else end // MIB} MiB (process replaced)"
            )
            continue
        memory[name] = f"{start / MIB:.0f} -> {end / MIB:.0f} MiB (max {max_rss[name] / MIB:.0f})"
        bound = max(GROWTH_FLOOR, GROWTH_FRACTION * start)
        if not name.startswith("sandbox") and end - start > bound:
            grew.append(
                f"{name}: {start / MIB:.0f} -> {end / MIB:.0f} MiB (bound +{bound / MIB:.0f} MiB)"
            )
    result.figures.update(
        {
            "duration, rate": f"{seconds:g} s at {rate:g} requests/s "
            f"(achieved {elapsed_rate:.1f}/s)",
            "requests": len(done),
            "of which replays": sum(1 for d in done if d[0] == "replay"),
            "payments": payments,
            "errors (answers other than 201)": errors or 0,
            "replays not byte-identical": bad_replays,
            "keys with more than one payment": duplicates,
            "latency p50 / p99, ms": f"{percentile(latencies, 0.5) * 1000:.0f} / "
            f"{percentile(latencies, 0.99) * 1000:.0f}",
            "warm-up before the first RSS sample, s": round(warmup),
        }
    )
    for name, text in memory.items():
        result.figures[f"RSS {name}"] = text
    audit_figures(result, audit)
    result.check(not errors, f"errors: {errors}")
    result.check(bad_replays == 0, f"{bad_replays} replays were not the stored answer")
    result.check(duplicates == 0, f"{duplicates} keys with several payments")
    result.violations.extend(f"memory grew: {g}" for g in grew)
    return result
