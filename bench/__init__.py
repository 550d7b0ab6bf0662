"""Benchmarks (docs/benchmarks.md). A package so that gunicorn can import ``bench.peers``."""
