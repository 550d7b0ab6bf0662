"""The payments app: one sub-package ("room") per subsystem, on floors (top first): api and
admin; operations; authorization; reconciliation; monitoring; acquirer; core (with models.py).
A room imports its own modules or a lower floor's, never upward; each room's ``__init__`` says
what it holds and may import (docs/architecture.md, docs/adr/0037-rooms-inside-payments.md,
checked by tests/unit/test_layout.py).
"""
