"""Builders and fakes shared by several test modules.

- ``vectors``: float32 unit vectors (axis-built, seeded random, flat).
- ``embedders``: fake embedders (hashed bag of words, constant).
- ``builders``: ``MemoryCandidate`` / ``MemoryRecord`` with the usual defaults.
- ``recall``: a dict-backed ``RecallSource`` and ``RecallRecord`` / query / context builders.
- ``handlers``: the ingest, recall and outcome handlers wired to an in-memory store, with
  payload and ``InputMessage`` builders for them.
- ``workers``: a ready worker process, a deployment on a prefix of its own, a client for it.
- ``stored``: what integration tests read back from Redis (memory fields, applied outcomes,
  settled digests).
- ``learning``: one agent's run through the ingest and outcome handlers (``Learner``).
- ``mcp_api``: a fake HTTP API and the MCP server connected to it in process.
- ``inbound``: payloads through the worker's normalizer, which must accept them.
- ``settings``: ``Settings`` with no .env file, on the ``unit`` topic prefix.
- ``paths``: the repository root, for tests that read the project's own files.

Import them absolutely (``from tests.support.vectors import unit``); see tests/__init__.py.
Nothing here is collected: no name starts with ``test``.
"""
