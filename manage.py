#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.core.management import execute_from_command_line

    from observability.tracing import tracing_setup

    # A command's spans (reconciliation, redelivery): off unless an exporter is configured
    # (ADR 0044); set up before Django loads, so its instrumentation is in place.
    tracing_setup("payments-manage")

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
