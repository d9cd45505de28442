"""`python -m grimoire.infra.cli`: how `make run`, the local stack and the tests
start the command without the console script."""

from __future__ import annotations

from grimoire.infra.cli.dispatch import main

__all__: list[str] = []

if __name__ == "__main__":
    raise SystemExit(main())
