"""Fault campaigns: the service's own stack as subprocesses, driven through faults, with the
ledger audit as the oracle. ``python -m campaigns --help``; docs/benchmarks.md."""
