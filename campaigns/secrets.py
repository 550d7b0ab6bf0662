"""Secrets: with every process at DEBUG, send card-like numbers and API keys in every input a
merchant controls, then grep every log, a dump of the campaign database and the admin pages:
0 occurrences of the card numbers, of the merchants' raw API keys and of the acquirer's key.

Run after the other campaigns (``all`` does), so the grep covers everything they logged too.
Inputs: card numbers in each body field, as an integer amount, as an unknown field's name and
value, nested, in invalid JSON and in a form-encoded body (each refused); in the query string
(plain, with ``+``, ``%20`` and ``%2D`` between the groups), the URL path, the
``Idempotency-Key``, ``X-Request-Id`` and ``Authorization`` headers; in a request that crashes
(``GET /campaign/crash``, routed by the campaign settings only: its traceback holds a card
number and the merchant's key); in the name and argument of a beat entry (the stack's
``CAMPAIGN_BEAT_CARD``), so beat's and the Celery worker's own lines carry one. API keys: the
merchant's own key in ``Authorization`` on every request, and in the wrong places (another
scheme, an ``X-Api-Key`` header, the query string, ``access_token=``, ``client_secret=``); a
revoked-looking key. The acquirer's key is only in the service's environment and the
sandbox's command line.

Searched: every file in the run's ``logs/`` (gunicorn, Celery worker and beat, sandbox,
manage.py; every line of the service's processes must be the project's JSON, so no process
kept a handler that bypasses the redacting formatter), the audit CSVs, ``pg_dump
--data-only`` of the campaign database, and every admin page reachable from the admin index
(changelists and up to 20 change pages each), fetched as a superuser.
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets as random_secrets
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, urljoin

import httpx

from campaigns.client import Answer, ApiClient
from campaigns.harness import NOTIFICATION_SECRET, CampaignError, CampaignResult, Stack

#: Card-like numbers (test PANs that pass the Luhn check), as sent.
CARDS = (
    "4242424242424242",
    "4000056655665556",
    "5555555555554444",
    "378282246310005",
    "6011111111111117",
    "3056930009020004",
    "4111111111111111",
)
FORMATTED = ("4000 0566 5566 5556", "5555-5555-5555-4444")
#: The probe whose request crashes on purpose (a 500 with a traceback, not a violation).
CRASH = "card and API key in a crashing request's traceback"
#: The log lines Celery writes with its own handler ("[2026-12-01 12:00:00,000: INFO/...]"),
#: and the plain format of logging's last-resort handler: a process whose lines look like
#: this kept a handler the redacting formatter does not cover.
FOREIGN_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d |^(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:")


def secret_probes(api_key: str) -> list[tuple[str, dict]]:
    """(name, request kwargs) of every input that carries a secret: ``json`` or ``content``
    (bytes), ``method`` (default POST), ``path`` (default ``/payments``), ``params`` (the query
    string), ``headers``, ``idempotency_key``, ``auth`` (False: no merchant key sent). Also
    sent by tests/integration/test_tracing.py, which looks for the same secrets in spans."""
    body = {"amount": 1000, "currency": "EUR", "payment_method": "tok_visa"}
    bad_key = "sk_live_" + random_secrets.token_urlsafe(32)
    json_headers = {"Content-Type": "application/json"}
    return [
        ("card in reference", {"json": {**body, "reference": CARDS[0]}}),
        ("spaced card in description", {"json": {**body, "description": f"pan {FORMATTED[0]}"}}),
        ("card in the token", {"json": {**body, "payment_method": f"tok_{CARDS[2]}"}}),
        ("dashed card as payment_method", {"json": {**body, "payment_method": FORMATTED[1]}}),
        ("card as the amount", {"json": {**body, "amount": int(CARDS[6])}}),
        ("card in an unknown field", {"json": {**body, "card_number": CARDS[3]}}),
        ("card as a field name", {"json": {**body, CARDS[4]: "x"}}),
        ("card nested", {"json": {**body, "metadata": {"pan": CARDS[5]}}}),
        (
            "card in invalid JSON",
            {"content": f'{{"amount": {CARDS[0]}, "currency": '.encode(), "headers": json_headers},
        ),
        (
            "card in a form body",
            {
                "content": f"card={CARDS[1]}&cvc=123".encode(),
                "headers": {"Content-Type": "application/x-www-form-urlencoded"},
            },
        ),
        (
            "card in the Idempotency-Key",
            {"json": {**body, "reference": "idem-card"}, "idempotency_key": CARDS[0]},
        ),
        (
            "card in the query string",
            {"method": "GET", "path": "/payments", "params": {"reference": CARDS[2]}},
        ),
        (
            "spaced card in the query string, '+'",
            {"method": "GET", "path": "/payments", "params": {"reference": FORMATTED[0]}},
        ),
        (
            "spaced card in the query string, %20",
            {"method": "GET", "path": f"/payments?reference={quote(FORMATTED[0])}"},
        ),
        (
            "dashed card in the query string, %2D",
            {"method": "GET", "path": "/payments?reference=" + FORMATTED[1].replace("-", "%2D")},
        ),
        (
            "card as the X-Request-Id",
            {"method": "GET", "path": "/payments", "headers": {"X-Request-Id": CARDS[6]}},
        ),
        (
            "API key as access_token and client_secret",
            {
                "method": "GET",
                "path": "/payments",
                "auth": False,
                "params": {"access_token": api_key, "client_secret": api_key},
            },
        ),
        (
            CRASH,
            {
                "method": "GET",
                "path": "/campaign/crash",
                "params": {"card": FORMATTED[0], "token": api_key},
            },
        ),
        ("card in the URL path", {"method": "GET", "path": f"/payments/{CARDS[3]}"}),
        (
            "card as the bearer token",
            {
                "method": "GET",
                "path": "/payments",
                "headers": {"Authorization": f"Bearer {CARDS[4]}"},
            },
        ),
        (
            "API key with another scheme",
            {
                "method": "GET",
                "path": "/payments",
                "headers": {"Authorization": f"Token {api_key}"},
            },
        ),
        (
            "API key twice in Authorization",
            {
                "method": "GET",
                "path": "/payments",
                "headers": {"Authorization": f"Bearer {api_key} {api_key}"},
            },
        ),
        (
            "API key in X-Api-Key",
            {
                "method": "GET",
                "path": "/payments",
                "auth": False,
                "headers": {"X-Api-Key": api_key},
            },
        ),
        (
            "API key in the query string",
            {"method": "GET", "path": "/payments", "auth": False, "params": {"api_key": api_key}},
        ),
        (
            "unknown API key",
            {
                "method": "GET",
                "path": "/payments",
                "headers": {"Authorization": f"Bearer {bad_key}"},
            },
        ),
        ("valid payment (DEBUG log of a success)", {"json": {**body, "reference": "secrets-ok"}}),
        ("list payments", {"method": "GET", "path": "/payments"}),
    ]


async def _send(stack: Stack, api_key: str) -> list[tuple[str, Answer]]:
    assert stack.web is not None
    api = ApiClient(stack.web.url, api_key, max_connections=4)
    answers = []
    try:
        for index, (name, spec) in enumerate(secret_probes(api_key)):
            spec = dict(spec)
            method = spec.pop("method", "POST")
            path = spec.pop("path", "/payments")
            headers = dict(spec.pop("headers", {}))
            key = spec.pop("idempotency_key", f"secrets-{stack.tag}-{index}")
            if method == "POST":
                headers.setdefault("Idempotency-Key", key)
            answers.append((name, await api.request(method, path, headers=headers, **spec)))
    finally:
        await api.close()
    return answers


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


def _admin_pages(stack: Stack, out: Path, per_model: int = 20, limit: int = 400) -> list[Path]:
    """Log in as a new superuser and save every admin page reachable from the index."""
    assert stack.web is not None
    password = random_secrets.token_urlsafe(24)
    username = f"campaign-{stack.tag}"
    stack.manage(
        "createsuperuser",
        "--noinput",
        "--username",
        username,
        "--email",
        "campaign@example.invalid",
        env={"DJANGO_SUPERUSER_PASSWORD": password},
    )
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with httpx.Client(
        base_url=stack.web.url, timeout=30, trust_env=False, follow_redirects=True
    ) as http:
        login = http.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
        if not token:
            raise CampaignError("no CSRF token on the admin login page")
        answer = http.post(
            "/admin/login/?next=/admin/",
            data={
                "username": username,
                "password": password,
                "csrfmiddlewaretoken": token.group(1),
                "next": "/admin/",
            },
            headers={"Referer": f"{stack.web.url}/admin/login/"},
        )
        if "/admin/login/" in str(answer.url):
            raise CampaignError("could not log in to the admin")
        queue, seen, per_changelist = ["/admin/"], set(), {}
        while queue and len(saved) < limit:
            url = queue.pop(0)
            if url in seen:
                continue
            seen.add(url)
            page = http.get(url)
            if page.status_code != 200 or "text/html" not in page.headers.get("content-type", ""):
                continue
            path = out / (re.sub(r"[^A-Za-z0-9]+", "_", url).strip("_") + ".html")
            path.write_text(page.text, encoding="utf-8")
            saved.append(path)
            parser = _Links()
            parser.feed(page.text)
            for href in parser.links:
                target = urljoin(url, href).split("#")[0]
                if not target.startswith("/admin/") or "logout" in target or "/delete/" in target:
                    continue
                if target.startswith(("/admin/password_change", "/admin/jsi18n", "/admin/r/")):
                    continue
                change = re.match(r"^/admin/(\w+)/(\w+)/[^/]+/change/$", target)
                changelist = re.match(r"^/admin/(\w+)/(\w+)/$", target)
                if change:
                    model = change.group(1, 2)
                    if per_changelist.get(model, 0) >= per_model:
                        continue
                    per_changelist[model] = per_changelist.get(model, 0) + 1
                    queue.append(target)
                elif changelist or target == "/admin/":
                    queue.append(target)
    return saved


def _pg_dump(stack: Stack, path: Path) -> None:
    binary = shutil.which("pg_dump")
    host = re.search(r"[?&]host=([^&]+)", stack.options.database_url)
    if host:  # the embedded server: its own binaries match its version
        try:
            import pgserver

            binary = str(Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_dump")
        except ImportError:
            pass
    if not binary:
        raise CampaignError("pg_dump is not installed")
    result = subprocess.run(  # noqa: S603
        [
            binary,
            "--data-only",
            "--no-owner",
            "--file",
            str(path),
            "--dbname",
            stack.options.database_url,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode != 0:
        raise CampaignError(f"pg_dump failed: {result.stderr[-1000:]}")


def _needles(stack: Stack) -> dict[str, str]:
    """What must never appear, by a label that is safe to print."""
    needles = {f"card {card[:4]}..{card[-4:]}": card for card in CARDS}
    needles |= {f"card '{text[:4]}..{text[-4:]}' as sent": text for text in FORMATTED}
    needles |= {
        f"merchant API key #{index + 1} ({key[:8]}...)": key
        for index, key in enumerate(stack.merchant_keys)
    }
    needles["acquirer API key"] = stack.acquirer_api_key
    needles["second acquirer's API key"] = stack.beta_api_key
    needles["acquirer notification secret"] = NOTIFICATION_SECRET
    return needles


def _grep(files: list[Path], needles: dict[str, str]) -> dict[str, dict[str, int]]:
    """{label: {file: occurrences}} for every needle found."""
    found: dict[str, dict[str, int]] = {}
    for path in files:
        text = path.read_bytes().decode("utf-8", "replace")
        for label, needle in needles.items():
            count = text.count(needle)
            if count:
                found.setdefault(label, {})[path.name] = count
    return found


def _log_text(stack: Stack, name: str) -> str:
    return stack.log(name).read_text(encoding="utf-8", errors="replace")


def _structured(stack: Stack) -> tuple[dict[str, int], list[str]]:
    """JSON lines per service process, and the lines in a format of Celery's or logging's
    own (file: line)."""
    counts: dict[str, int] = {}
    foreign: list[str] = []
    for name in ("worker", "beat", "web"):
        counts[name] = 0
        for line in _log_text(stack, name).splitlines():
            if line.startswith("{"):
                json.loads(line)  # a broken JSON line fails the campaign loudly
                counts[name] += 1
            elif FOREIGN_LINE.match(line):
                foreign.append(f"{name}: {line[:120]}")
    return counts, foreign


def run(stack: Stack) -> CampaignResult:
    result = CampaignResult("secrets")
    _, api_key = stack.create_merchant("secrets")
    answers = asyncio.run(_send(stack, api_key))
    refused_card = [n for n, a in answers if a.status == 400 and b"card_data" in a.body]
    echoed = [
        n
        for n, a in answers
        if any(c.encode() in a.body for c in CARDS + FORMATTED) or api_key.encode() in a.body
    ]
    server_errors = [
        f"{n}: {a.status}" for n, a in answers if a.status and a.status >= 500 and n != CRASH
    ]
    crashed = [a.status for n, a in answers if n == CRASH]
    stack.wait_resolved(stack.started_at, timeout=30)
    out = stack.out_dir
    dump = out / "campaign-dump.sql"
    _pg_dump(stack, dump)
    pages = _admin_pages(stack, out / "admin")
    logs = stack.service_logs()
    csvs = sorted((out / "audits").glob("*.csv"))
    needles = _needles(stack)
    found = {
        "logs": _grep(logs, needles),
        "database dump": _grep([dump], needles),
        "admin pages": _grep(pages, needles),
        "audit CSVs": _grep(csvs, needles),
    }
    result.figures.update(
        {
            "inputs sent": len(answers),
            "answers": ", ".join(f"{n}: {a.status}" for n, a in answers),
            "refused as card data": len(refused_card),
            "searched": f"{len(logs)} logs "
            f"({sum(p.stat().st_size for p in logs) // 1024} KiB), database dump "
            f"({dump.stat().st_size // 1024} KiB), {len(pages)} admin pages, {len(csvs)} CSVs",
            "secrets searched for": f"{len(CARDS) + len(FORMATTED)} card numbers, "
            f"{len(stack.merchant_keys)} merchant API keys, the acquirer API key",
        }
    )
    for where, hits in found.items():
        result.figures[f"occurrences in {where}"] = (
            sum(n for per_file in hits.values() for n in per_file.values()) or 0
        )
        for label, per_file in hits.items():
            result.violations.append(f"{label} in {where}: {per_file}")
    json_lines, foreign = _structured(stack)
    result.figures["JSON log lines (worker, beat, web)"] = json_lines
    traces = _log_text(stack, "web")
    result.check(crashed == [500], f"the crashing request answered {crashed}, not 500")
    result.check(
        "Traceback" in traces and "campaign crash on card [card number redacted]" in traces,
        "the crashing request's traceback is not in the web log, redacted",
    )
    for process in ("worker", "beat"):
        result.check(
            "campaign card [card number redacted]" in _log_text(stack, process)
            or "pay_[card number redacted]" in _log_text(stack, process),
            f"the {process} log has no redacted line of the beat entry named after a card",
        )
    result.check(not foreign, f"log lines not written by the project's formatter: {foreign[:5]}")
    result.check(not echoed, f"answers echoing a secret: {echoed}")
    result.check(not server_errors, f"server errors: {server_errors}")
    return result
