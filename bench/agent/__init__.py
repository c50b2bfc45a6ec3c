"""Benchmarks of the node agent: ``python -m bench.agent`` (see run.py)."""
