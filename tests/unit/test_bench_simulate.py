"""The retry-storm simulator: docs/reference/backoff-study.md's shape checks, small, the storm."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.simulate import (
    main,
    run_aws,
    run_aws_once,
    run_storm,
    storm_strategies,
)

STORM = {strategy.name: strategy for strategy in storm_strategies()}


@pytest.fixture(scope="module")
def aws_100() -> dict[str, object]:
    """100 clients, 10 runs (the benchmark runs 100), exponential, full and decorrelated."""
    results = run_aws(
        [100], runs=10, seed=7, strategies=("exponential", "full jitter", "decorrelated")
    )
    return {result.strategy: result for result in results}


def test_full_jitter_uses_at_most_half_the_calls_of_no_jitter(aws_100) -> None:
    """Full-jitter calls <= 0.5 x exponential-without-jitter calls."""
    assert aws_100["full jitter"].calls <= 0.5 * aws_100["exponential"].calls


def test_no_jitter_takes_at_least_eight_times_longer(aws_100) -> None:
    """Exponential without jitter completes >= 8 x later than full jitter."""
    assert aws_100["exponential"].time >= 8 * aws_100["full jitter"].time


def test_decorrelated_uses_more_calls_than_full_jitter(aws_100) -> None:
    """Decorrelated jitter makes more calls than full jitter."""
    assert aws_100["decorrelated"].calls > aws_100["full jitter"].calls


def test_no_backoff_one_client_succeeds_per_round() -> None:
    """Without backoff, N clients make about N^2/4 writes or more (one winner per round)."""
    import random

    calls, _ = run_aws_once("no backoff", 20, random.Random(3))
    assert calls >= 20 * 20 / 4


def test_aws_simulation_is_deterministic_per_seed() -> None:
    """The same seed gives the same numbers; another seed gives others."""
    first = run_aws([20], runs=3, seed=5, strategies=("full jitter",))
    again = run_aws([20], runs=3, seed=5, strategies=("full jitter",))
    other = run_aws([20], runs=3, seed=6, strategies=("full jitter",))
    assert first == again
    assert first != other


def test_fixed_interval_storm_keeps_the_service_down() -> None:
    """Fixed 2 s retries come as waves of 1000 (over 3 x capacity): nobody gets through."""
    result = run_storm(STORM["fixed 2 s"], clients=1000, capacity=300)
    assert result.peak_retry_load == 1000
    assert result.succeeded == 0


def test_exponential_without_jitter_keeps_the_waves_synchronised() -> None:
    """Exponential backoff without jitter retries in lockstep: still waves of 1000."""
    result = run_storm(STORM["exponential"], clients=1000, capacity=300)
    assert result.peak_retry_load == 1000
    assert result.succeeded == 0


def test_full_jitter_storm_recovers() -> None:
    """Full jitter spreads the same retries: every client succeeds, the service recovers fast."""
    jitter = run_storm(STORM["full jitter"], clients=1000, capacity=300)
    fixed = run_storm(STORM["fixed 2 s"], clients=1000, capacity=300)
    assert jitter.succeeded == 1000
    assert jitter.recovered_at < fixed.recovered_at
    assert jitter.load[-1] <= 300


def test_budget_keeps_the_storm_under_capacity() -> None:
    """With the retry budget, retries stay <= 10 % of first attempts + reserve, under capacity."""
    result = run_storm(STORM["full jitter + budget"], clients=1000, capacity=300)
    assert result.peak_retry_load <= 300
    assert result.requests <= 1000 * 1.1 + 100
    assert result.budget_refused == 800
    assert result.succeeded + result.gave_up == 1000


def test_client_defaults_give_up_within_the_deadline() -> None:
    """The client's defaults (3 attempts, 8 s, budget) finish every client within 8 s."""
    result = run_storm(STORM["client defaults + budget"], clients=1000, capacity=300)
    assert result.succeeded + result.gave_up == 1000
    assert len(result.load) <= 8


def test_storm_is_deterministic_per_seed() -> None:
    """The same seed gives the same storm."""
    first = run_storm(STORM["full jitter"], seed=3)
    assert first == run_storm(STORM["full jitter"], seed=3)


def test_command_prints_both_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """The command prints the AWS tables and the storm table and exits 0."""
    assert main(["--clients", "10,20", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "AWS OCC simulation: calls" in out
    assert "completion time" in out
    assert "full jitter + budget" in out


def test_plots_without_matplotlib_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plots without matplotlib says how to install it and exits 2 (after the tables)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["--only", "storm", "--plots", str(tmp_path)]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err


def test_plots_are_written_as_png(tmp_path: Path) -> None:
    """With matplotlib installed, --plots writes the three PNG files."""
    pytest.importorskip("matplotlib")
    assert main(["--clients", "10,20", "--runs", "1", "--plots", str(tmp_path)]) == 0
    for name in ("aws_calls.png", "aws_time.png", "storm_load.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
