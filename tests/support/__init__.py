"""Builders and fakes shared by several test modules.

- ``vectors``: float32 unit vectors (axis-built, one-hot, seeded random or by text, flat).
- ``embedders``: fake embedders (hashed bag of words or search terms, constant, seeded
  by text).
- ``builders``: ``MemoryCandidate`` / ``MemoryRecord`` with the usual defaults.
- ``facts``: a ``Fact`` as an agent's assertion makes it.
- ``curator``: swap episodes, curated entries, a cycle writing new entries, and what the
  curator task reports of a first cycle.
- ``maintenance``: the decay and compaction tests' records and plans, a crashing
  compaction checkpoint, one compaction's summary.
- ``retraction``: a recording witness callback, the swap tool's episodes, the insight and
  heuristic a curator cycle distils from them, the steps the witness sees as they go.
- ``causal``: one agent's causal graph and how it is written.
- ``recall``: a dict-backed ``RecallSource`` and ``RecallRecord`` / query / context builders.
- ``handlers``: the ingest, recall and outcome handlers wired to an in-memory store, with
  payload and ``InputMessage`` builders for them (commands included).
- ``workers``: a ready worker process, a deployment on a prefix of its own (its block
  timer out of the way if asked), a client for it, a module fixture running workers for
  named settings fixtures, and two deployments with their workers, Redis and shared state
  as one module fixture (``TwoDeployments``).
- ``live``: what an end-to-end test of a running worker draws on, as one object (the
  ``live`` fixture of tests/integration/conftest.py).
- ``history``: an agent's inputs block by block (episode, transcript line, tool call).
- ``stacks``: the wheel cache of the tests' own local stacks, one started and stopped
  around a fixture, and the settings of a deployment on one.
- ``stored``: what integration tests read back from Redis (memory fields, applied outcomes,
  settled digests).
- ``learning``: one agent's run through the ingest and outcome handlers (``Learner``).
- ``mcp_api``: a fake HTTP API and the MCP server connected to it in process, a tool
  call's refusal with the API never called.
- ``inbound``: payloads with fields changed or dropped, and through the worker's
  normalizer, which must accept them.
- ``http_deps``: the HTTP API's dependencies with tenant keys on, the app called in
  process, a key's bearer header.
- ``cli``: a CLI connection opener replaced by one yielding a fake; a command run for its
  JSON lines, argparse's exit status, a command's --help.
- ``contract``: a contract fixture's in-memory and Redis sides, a Redis prefix of a
  test's own (``scratch_redis``, ``scratch_deployment``).
- ``rebuild``: a deployment's worker stopped, its state wiped, its journal replayed, the
  digests and witness logs compared.
- ``dead_letters``: a deployment's dead letters a test picks, read until enough are in.
- ``witness``: a chain of one agent's witness records.
- ``settings``: ``Settings`` with no .env file, on the ``unit`` topic prefix.
- ``paths``: the repository root, for tests that read the project's own files.

Import them absolutely (``from tests.support.vectors import unit``); see tests/__init__.py.
Nothing here is collected: no name starts with ``test``.
"""
