"""A client's suspicious request (Django's ``django.security.*`` records) is logged as a
WARNING without a traceback, through the handler filter of observability/log_config.py."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import pytest

from observability.log_config import logging_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def django_log() -> io.StringIO:
    """The ``django`` logger written to a stream by a handler built as observability/log_config.py
    builds its console handler (its filter and JSON formatter)."""
    config = logging_config(log_format="json", level="INFO")
    configurator = logging.config.DictConfigurator(config)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(configurator.configure_formatter(config["formatters"]["structured"]))
    for name in config["handlers"]["console"]["filters"]:
        handler.addFilter(configurator.configure_filter(config["filters"][name]))
    logger = logging.getLogger("django")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize(
    "host", ["evil.example", "4111111111111111.example", "bad host", "a" * 300]
)
def test_a_bad_host_is_a_warning_without_traceback(client, django_log, host):
    """Django answers a bad ``Host`` with the 400 problem and logs one WARNING line naming the
    cause (redacted), with no traceback."""
    answer = client.get("/healthz", headers={"host": host})
    assert answer.status_code == 400
    assert answer["Content-Type"] == "application/problem+json"
    (line,) = [
        json.loads(text) for text in django_log.getvalue().splitlines() if "DisallowedHost" in text
    ]
    assert line["level"] == "warning"
    assert "exception" not in line and "Traceback" not in django_log.getvalue()
    assert "4111111111111111" not in django_log.getvalue()


def test_other_errors_keep_their_level(django_log):
    """The filter touches only ``django.security.*``: a server error stays an ERROR."""
    logging.getLogger("django.request").error("boom", exc_info=ValueError("x"))
    (line,) = [json.loads(text) for text in django_log.getvalue().splitlines()]
    assert line["level"] == "error"
    assert "ValueError" in line["exception"]
