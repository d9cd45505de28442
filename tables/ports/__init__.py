"""The storage layer's ports: every `typing.Protocol` that `grimoire.tables` declares.

Each store is used through a Protocol, so the handlers in `grimoire.agents` depend
on what a store does, not on Redis: the Redis implementations (next to their
codecs and keys) and the in-memory ones in `grimoire.tables.testing` both satisfy
the same port and run the same contract suites. Declaring every port here, one
module per concern, shows the whole storage surface in one place. This package
imports nothing at import time; import the concern's module itself
(`grimoire.tables.ports.memory`, `.journal`, `.trust`, ...).
"""

__all__: list[str] = []
