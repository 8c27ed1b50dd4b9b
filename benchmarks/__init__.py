"""Benchmarks of the loop patterns (not part of the installed `loops` package)."""
