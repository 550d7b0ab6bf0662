"""
The Lua programs are package files: found by importlib.resources, carried by a wheel, each
loaded by one AtomicScript and each checked against its Python twin by a test on Redis.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from resilience import ADMIT_SCRIPT, RATE_SCRIPT, SETTLE_SCRIPT, SLOTS_SCRIPT, _twins, limits
from resilience.aimd import AIMD_SCRIPT
from resilience.breaker import BREAKER_SCRIPT
from resilience.budget import BUDGET_SCRIPT
from resilience.gate import GATE_CLOSE, GATE_READ
from resilience.store import STORE_NOW, AtomicScript, part_function

ROOT = Path(__file__).resolve().parents[2]
PACKAGED: tuple[AtomicScript, ...] = (
    GATE_READ,
    GATE_CLOSE,
    BUDGET_SCRIPT,
    AIMD_SCRIPT,
    BREAKER_SCRIPT,
    ADMIT_SCRIPT,
    SETTLE_SCRIPT,
    RATE_SCRIPT,
    SLOTS_SCRIPT,
)
PRELUDE = "prelude.lua"

#: Each script's test running Lua and twin on random operation sequences (module, function).
TWIN_TESTS = {
    "breaker.lua": (
        "tests.integration.test_gateway_breaker_redis",
        "test_lua_and_python_breaker_give_the_same_answers",
    ),
    "aimd.lua": (
        "tests.integration.test_gateway_breaker_redis",
        "test_lua_and_python_limiter_give_the_same_answers",
    ),
    "budget.lua": (
        "tests.integration.test_gateway_lua_twins",
        "test_lua_and_python_budget_give_the_same_answers",
    ),
    "gate_read.lua": (
        "tests.integration.test_gateway_lua_twins",
        "test_lua_and_python_gate_give_the_same_answers",
    ),
    "gate_close.lua": (
        "tests.integration.test_gateway_lua_twins",
        "test_lua_and_python_gate_give_the_same_answers",
    ),
    "admit.lua": (
        "tests.integration.test_gateway_attempt_state",
        "test_lua_and_python_attempt_scripts_give_the_same_answers",
    ),
    "settle.lua": (
        "tests.integration.test_gateway_attempt_state",
        "test_lua_and_python_attempt_scripts_give_the_same_answers",
    ),
    "merchant_rate.lua": (
        "tests.integration.test_merchant_limits_redis",
        "test_lua_and_python_rate_give_the_same_answers",
    ),
    "merchant_slots.lua": (
        "tests.integration.test_merchant_limits_redis",
        "test_lua_and_python_slots_give_the_same_answers",
    ),
}


def lua_files() -> set[str]:
    folder = resources.files("resilience") / "lua"
    return {item.name for item in folder.iterdir() if item.name.endswith(".lua")}


def test_importlib_resources_finds_every_script_and_the_prelude() -> None:
    """lua/ holds the prelude and one file per packaged script, none empty."""
    assert lua_files() == {PRELUDE} | {script.source for script in PACKAGED}
    folder = resources.files("resilience") / "lua"
    assert all((folder / name).read_text(encoding="utf-8").strip() for name in lua_files())


@pytest.mark.parametrize("script", PACKAGED, ids=lambda script: script.name)
def test_every_packaged_script_is_its_file_after_the_prelude(script: AtomicScript) -> None:
    """The Lua run on Redis is exactly lua/prelude.lua, the parts it calls (each another
    packaged file, as a function), then lua/<source>."""
    assert script.source is not None
    body = (resources.files("resilience") / "lua" / script.source).read_text(encoding="utf-8")
    parts = "".join(part_function(part) for part in script.parts)
    assert script.lua == STORE_NOW + parts + body
    assert set(script.parts) <= {other.source for other in PACKAGED if not other.parts}
    assert script.python.__module__ in {_twins.__name__, limits.__name__}


def test_a_part_is_its_file_as_a_function_of_its_own_keys_and_arguments() -> None:
    """lua/gate_read.lua as a part: a local function of (KEYS, ARGV, now) around the file."""
    body = (resources.files("resilience") / "lua" / "gate_read.lua").read_text("utf-8")
    assert part_function("gate_read.lua") == (
        f"local function gate_read(KEYS, ARGV, now)\n{body}\nend\n"
    )


@pytest.mark.parametrize("filename", sorted(TWIN_TESTS))
def test_every_script_has_a_twin_test(filename: str) -> None:
    """Every packaged script is run against its Python twin on random sequences by a test."""
    module, name = TWIN_TESTS[filename]
    assert callable(getattr(importlib.import_module(module), name))


def test_the_twin_table_names_every_file() -> None:
    """A new lua/*.lua needs a twin test (add it to TWIN_TESTS)."""
    assert set(TWIN_TESTS) == lua_files() - {PRELUDE}


def test_a_built_wheel_carries_the_lua_files_and_py_typed(tmp_path: Path) -> None:
    """`pip wheel .` (a non-editable build) packs every lua/*.lua and py.typed."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"resilience/lua/{name}" for name in lua_files()} | {
        "resilience/py.typed",
        "gateway_client/py.typed",
    }
    assert expected <= names
