"""merchant_client is a merchant's library: framework-free, and its error tree mirrors every
problem code the API documents and sends."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import merchant_client
from merchant_client import errors

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"django", "rest_framework", "celery", "kombu", "payments", "idempotency",
             "merchants", "config", "sandbox_acquirer", "ledger", "console"}  # fmt: skip


def test_import_loads_no_framework_or_service_module() -> None:
    """`import merchant_client` in a fresh interpreter loads gateway_client's pieces only."""
    script = "import json, sys\nimport merchant_client\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=30,
        cwd=ROOT,
    )  # fmt: skip
    loaded = json.loads(result.stdout)
    assert "merchant_client.client" in loaded and "resilience.backoff" in loaded
    assert sorted(name for name in loaded if name.split(".")[0] in FORBIDDEN) == []


def readme_error_codes() -> set[str]:
    """The `code`s of the error table of docs/api.md (moved there from the README)."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    codes: set[str] = set()
    for line in section.splitlines():
        if re.match(r"\| [45]\d\d \|", line):
            codes.update(re.findall(r"`([a-z_]+)`", line.split("|")[2]))
    return codes


#: `code="x"`, `default_code = "x"`, `("x", "Title")`, `= "x", "Title"` and `"x_y": "Title"`.
CODE_PATTERN = re.compile(
    r'code="([a-z_]+)"|code = "([a-z_]+)"|[(=] ?"([a-z_]+)", "[A-Z]|"([a-z]+_[a-z_]+)": "[A-Z]'
)


def problem_codes_in_service() -> set[str]:
    """Every `code="..."` and `default_code = "..."` of the service's problem sources."""
    sources = ["payments/api/problems.py", "payments/api/views.py", "idempotency/errors.py",
               "payments/api/card_data.py", "payments/core/answers.py", "payments/api/parsers.py",
               "payments/api/responses.py", "payments/core/problem_format.py"]  # fmt: skip
    codes: set[str] = set()
    for source in sources:
        text = (ROOT / source).read_text()
        for match in CODE_PATTERN.findall(text):
            codes.update(name for name in match if name)
    return codes


def test_every_documented_code_has_its_class() -> None:
    documented = readme_error_codes()
    assert "idempotency_key_in_use" in documented and len(documented) >= 19
    assert sorted(documented - set(errors.ERROR_CLASSES)) == []


def test_every_code_the_service_sends_has_its_class() -> None:
    sent = problem_codes_in_service() - {"invalid", "invalid_request", "method_not_allowed",
                                         "not_acceptable", "unknown_parameter", "blank",
                                         "repeated"}  # fmt: skip
    assert "authentication_failed" in sent
    assert sorted(sent - set(errors.ERROR_CLASSES)) == []


def test_each_class_sits_in_the_branch_of_its_status() -> None:
    """A code's class is under its status's class (a 409 code is a Conflict, ...)."""
    for code, cls in errors.ERROR_CLASSES.items():
        status = next((s for s, c in errors.STATUS_CLASSES.items() if issubclass(cls, c)), None)
        if status is None:
            assert issubclass(cls, errors.ServerError) or cls is errors.ProblemError, code
            continue
        assert errors.error_class(status, code) is cls, code


def test_the_public_surface_holds_the_whole_error_tree() -> None:
    exported = {getattr(merchant_client, name) for name in merchant_client.__all__}
    tree = {cls for name in errors.__all__ if isinstance(cls := getattr(errors, name), type)}
    assert tree <= exported
