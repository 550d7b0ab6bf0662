"""Regenerate the lock files in ``requirements/`` from ``pyproject.toml`` (``make lock``).

One lock file per install profile, each pinning every package (transitive ones included) to one
version with the SHA-256 of every file PyPI has for it, so ``pip install --require-hashes``
installs exactly what was reviewed (docs/adr/0017-production-defaults-and-locked-dependencies.md):

* ``bench.txt``: every extra; resolved first, and the others are constrained to it, so two
  profiles installed into one virtualenv never disagree on a version.
* ``runtime.txt`` (the production image), ``local.txt`` (``make run``), ``test.txt``
  (``make test``), ``lint.txt`` (``make lint``): the runtime plus :data:`PROFILES`' extras.
* ``build.txt``: the build backend (``[build-system] requires``), for the editable install.

Resolved for Python 3.11 and up on every platform (``uv pip compile --universal``). An existing
pin is kept unless it no longer fits; ``python scripts/lock.py --upgrade`` (``make lock
UPGRADE=1``) moves every package to its newest allowed version. Needs ``uv``; ``make lock``
installs the pinned one into ``.venv``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = ROOT / "requirements"
#: The profile every other one is constrained to (it has every extra).
FULL_PROFILE = "bench"
#: Install profile -> the extras of pyproject.toml it adds to the runtime dependencies.
PROFILES: dict[str, tuple[str, ...]] = {
    "runtime": (),
    "local": ("local",),
    "test": ("local", "test"),
    "lint": ("lint",),
    FULL_PROFILE: ("local", "test", "lint", "bench"),
}
BUILD_PROFILE = "build"
PYTHON_VERSION = "3.11"  # the oldest Python pyproject.toml allows; --universal covers the rest


def _compile(args: list[str], output: str, *, upgrade: bool, stdin: str | None = None) -> None:
    command = [
        sys.executable, "-m", "uv", "pip", "compile", *args,
        "--generate-hashes", "--universal", "--python-version", PYTHON_VERSION,
        "--custom-compile-command", "make lock", "--quiet", "-o", f"requirements/{output}.txt",
        *(["--upgrade"] if upgrade else []),
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, input=stdin, text=True, check=True)  # noqa: S603


def lock(*, upgrade: bool = False) -> None:
    """Write every ``requirements/<profile>.txt``; raises ``CalledProcessError`` when uv fails
    (a requirement no release satisfies, no network)."""
    LOCK_DIR.mkdir(exist_ok=True)
    full = PROFILES[FULL_PROFILE]
    _compile(["pyproject.toml", *(f"--extra={e}" for e in full)], FULL_PROFILE, upgrade=upgrade)
    for profile, extras in PROFILES.items():
        if profile != FULL_PROFILE:
            args = ["pyproject.toml", *(f"--extra={e}" for e in extras)]
            _compile([*args, "-c", f"requirements/{FULL_PROFILE}.txt"], profile, upgrade=False)
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    _compile(["-"], BUILD_PROFILE, upgrade=upgrade, stdin="\n".join(build) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upgrade", action="store_true", help="newest allowed versions")
    lock(upgrade=parser.parse_args(argv).upgrade)
    print(f"wrote {', '.join(sorted([*PROFILES, BUILD_PROFILE]))} in requirements/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
