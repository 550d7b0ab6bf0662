"""``make audit`` (pip-audit over the lock files) exists and is well-formed; it needs pypi.org,
so it runs outside make test, and this checks its recipe offline (Makefile, docs/security.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = (ROOT / "Makefile").read_text()


def variable(name: str) -> str:
    match = re.search(rf"^{name} := (.+)$", MAKEFILE, re.MULTILINE)
    assert match, name
    return match[1].strip()


def recipe(target: str) -> str:
    """The commands of ``target`` (continuation lines joined)."""
    match = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)+)", MAKEFILE, re.MULTILINE)
    assert match, f"no target {target}"
    return re.sub(r"\\\n\s*", " ", match[1])


def test_make_audit_checks_every_lock_file_exactly_as_pinned():
    assert re.search(r"^\.PHONY: audit$", MAKEFILE, re.MULTILINE)
    assert re.fullmatch(r"\d+\.\d+\.\d+", variable("PIP_AUDIT_VERSION"))
    command = recipe("audit")
    assert "pip-audit --strict --require-hashes --disable-pip" in command
    audited = variable("AUDITED").split()
    assert "$(foreach file,$(AUDITED),--requirement $(file))" in command
    # The production image's lock and the full resolution (every other profile is inside it).
    assert audited == ["requirements/runtime.txt", "requirements/bench.txt"]
    assert all((ROOT / path).is_file() for path in audited)
    install = recipe(r"\$\(AUDIT_VENV\)/\.pip-audit-\$\(PIP_AUDIT_VERSION\)")
    assert "pip install --quiet pip-audit==$(PIP_AUDIT_VERSION)" in install
    assert "$(AUDIT_VENV)/bin/python" in install  # never the project's virtualenv


def test_make_test_does_not_run_the_audit_and_the_docs_say_how():
    assert "audit" not in re.search(r"^test: (.*)$", MAKEFILE, re.MULTILINE)[1]
    assert "make audit" in (ROOT / "docs/security.md").read_text()
