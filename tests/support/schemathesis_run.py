"""One Schemathesis run of the API against its own OpenAPI document over HTTP, in the test's
process (the engine Schemathesis' CLI runs): every check (Schemathesis' own and
``campaigns.schemathesis_hooks``'), the fuzzing phase and the stateful phase that follows the
document's links. tests/integration/test_openapi_schemathesis.py runs a short one; the
``schemathesis`` campaign (campaigns/fuzz.py, ``make campaign-openapi``) runs the CLI against
gunicorn with the same checks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

import campaigns.schemathesis_hooks  # noqa: F401  (registers the project's checks)

#: The 5xx the API is designed to give (the acquirer refused, or none can take the request).
DESIGNED_5XX = ["502", "503"]
#: The 4xx a valid request may get for the state it finds (404 no such object, 409 its state,
#: 422 the key used before); 400 is allowed by the built-in check because the project's
#: ``valid_requests_are_accepted`` allows only the refusals the document lists beyond the schema.
VALID_REQUEST_ANSWERS = ["2xx", "400", "404", "409", "422", *DESIGNED_5XX]


def config(
    api_key: str, *, seed: int, max_examples: int, max_steps: int, coverage: bool, fuzzing: bool
):
    """Schemathesis' configuration: every check, the project's expected statuses."""
    return SchemathesisConfig.from_dict(
        {
            "seed": seed,
            "headers": {"Authorization": f"Bearer {api_key}"},
            "suppress-health-check": ["all"],
            "generation": {"max-examples": max_examples, "database": "none"},
            "checks": {
                "not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", *DESIGNED_5XX]},
                "positive_data_acceptance": {"expected-statuses": VALID_REQUEST_ANSWERS},
            },
            "phases": {
                "examples": {"enabled": coverage},
                "coverage": {"enabled": coverage},
                "fuzzing": {"enabled": fuzzing},
                "stateful": {"max-steps": max_steps},
            },
        }
    )


@dataclass
class Run:
    """What a run did: answers by (operation, status), the calls made through a link by
    (operation, status), the checks run by name, and the failures (one line each)."""

    answers: Counter = field(default_factory=Counter)
    through_links: Counter = field(default_factory=Counter)
    checks: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    phases: set[str] = field(default_factory=set)

    def linked_calls(self, operation_id: str) -> int:
        """Calls of ``operation_id`` whose parameters came through a link, whatever the answer."""
        return sum(n for (op, _), n in self.through_links.items() if op == operation_id)

    def linked_successes(self, operation_id: str) -> int:
        """2xx answers of ``operation_id`` to calls whose parameters came through a link."""
        return sum(n for (op, status), n in self.through_links.items()
                   if op == operation_id and 200 <= status < 300)  # fmt: skip


def run(base_url: str, api_key: str, **options: Any) -> Run:
    """Run Schemathesis against the API at ``base_url`` (serving /openapi.json)."""
    schema = schemathesis.openapi.from_url(
        f"{base_url}/openapi.json",
        config=config(api_key, **options),
        headers={"Authorization": f"Bearer {api_key}"},
    )
    ids = {
        (result.ok().method.upper(), result.ok().path): result.ok().definition.raw["operationId"]
        for result in schema.get_all_operations()
    }
    found = Run()
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError | events.NonFatalError):
            found.failures.append(f"error: {getattr(event, 'value', None) or event.exception}")
        if not isinstance(event, events.ScenarioFinished):
            continue
        found.phases.add(str(event.phase))
        recorder = event.recorder
        for case_id, node in recorder.cases.items():
            interaction = recorder.interactions.get(case_id)
            if interaction is None or interaction.response is None:
                continue
            case = node.value
            operation = ids.get((case.method.upper(), case.operation.path), case.method)
            status = interaction.response.status_code
            found.answers[(operation, status)] += 1
            if node.transition is not None:
                found.through_links[(operation, status)] += 1
        for case_id, checks in recorder.checks.items():
            for check in checks:
                found.checks[check.name] += 1
                if check.failure_info is not None:
                    failure = check.failure_info.failure
                    response = recorder.interactions[case_id].response
                    found.failures.append(
                        f"{check.name}: {failure.title} | {failure.message} | "
                        f"{response.status_code if response else '-'}"[:500]
                    )
    return found
