"""Benchmarks and evaluation: outside the installed package, run from the repository root
as ``python -m bench <kind>`` (the make targets ``bench-*``). Imports product code as
``grimoire.…``; no product module imports this package."""
