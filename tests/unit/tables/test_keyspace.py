"""grimoire.tables.keyspace: the one place Redis key names are built.

The key layout is part of a deployment's data: a renamed key strands what an older
worker wrote. So the names are pinned here, and a scan of the product's sources
fails when a module other than the keyspace builds a key itself.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from grimoire.tables.keyspace import STORE_FORMAT, Keyspace, glob_escape
from grimoire.tables.routing import agent_slot
from grimoire.tables.trust.agent_keys import (
    FIXED_FAMILIES,
    MEMBER_FAMILIES,
    MEMORY_FAMILIES,
    SCANNED_FAMILIES,
    scan_head,
)
from tests.support.paths import ROOT

PRODUCT = ("streams", "tables", "agents", "topics", "infra")
KEYSPACE = ROOT / "tables" / "keyspace.py"

# Every concern's segment in a key name: a string literal holding `:<segment>` or
# `<segment>:` next to an interpolation is a key being built.
SEGMENTS = (
    "mem", "use", "tomb", "decayed", "vector-space", "watermarks", "field", "watermark",
    "contrarian-windows", "contrarian-window", "metrics", "agents", "store-format",
    "outbox-agents", "decided", "stats", "outcomes", "nexus", "hyper",
    "nodes", "terms", "actors", "decay", "decay-seeded", "compact", "curator", "playbook", "maint",
    "keystore", "witness", "deriv", "config", "outbox",
)  # fmt: skip


def test_names_are_pinned() -> None:
    keys = Keyspace("gm")
    assert keys.index_name == "gm-memory"
    assert keys.cluster_index_name("s3") == "gm-memory{s3}"
    assert keys.memory_prefix == "gm:mem"
    assert keys.memory("a", "m1") == "gm:mem:{a}:m1"
    assert keys.memory_id_of("gm:mem:{a}:m1") == "m1"
    assert keys.memory_id_of(b"gm:mem:{a}:m1") == "m1"
    assert keys.memory_pattern == "gm:mem:*"
    assert keys.agent_memory_pattern("a") == "gm:mem:{a}:*"
    assert keys.deployment_pattern == "gm:*"
    assert keys.usage("a", "m1") == "gm:use:{a}:m1"
    assert keys.tombstone("a", "m1") == "gm:tomb:{a}:m1"
    assert keys.decayed("a", "m1") == "gm:decayed:{a}:m1"
    assert keys.vector_space == "gm:vector-space"
    assert keys.store_format == "gm:store-format"
    assert keys.legacy_markers == ("gm:watermarks", "gm:field")
    assert keys.agents == "gm:agents"
    assert keys.watermark("a") == "gm:watermark:{a}"
    assert keys.field_state("a") == "gm:field:{a}"
    assert keys.contrarian_window("a") == "gm:contrarian-window:{a}"
    assert keys.metrics == "gm:metrics"
    assert keys.applied_sources == "gm:applied-sources"
    assert keys.outbox("a") == "gm:outbox:{a}"
    assert keys.outbox_agents(3) == "gm:outbox-agents:3"
    assert keys.pending_outcomes("a") == "gm:pending-outcomes:{a}"
    assert keys.agent_config("a") == "gm:config:{a}"
    assert keys.default_config == "gm:keystore:default-config"
    assert keys.decided("a") == "gm:decided:{a}"
    assert keys.stats("a") == "gm:stats:{a}"
    assert keys.applied_outcomes("a") == "gm:outcomes:{a}"
    assert keys.nexus("a", "tool:rpc") == "gm:nexus:{a}:tool:rpc"
    assert keys.hyperedge("a", "turn:t1") == "gm:hyper:{a}:turn:t1"
    assert keys.nodes("a") == "gm:nodes:{a}"
    assert keys.terms("a") == "gm:terms:{a}"
    assert keys.actors("a") == "gm:actors:{a}"
    assert keys.decay_schedule("a") == "gm:decay:{a}"
    assert keys.decay_seeded("a") == "gm:decay-seeded:{a}"
    assert keys.compaction_plan("a", "p") == "gm:compact:plan:{a}:p"
    assert keys.compaction_cursor("a") == "gm:compact:cursor:{a}"
    assert keys.compaction_pending("a") == "gm:compact:pending:{a}"
    assert keys.compaction_outbox("a", "p") == "gm:compact:outbox:{a}:p"
    assert keys.curator("a") == "gm:curator:{a}"
    assert keys.curator_entries("a") == "gm:curator:{a}:entries"
    assert keys.curator_due("a") == "gm:curator:{a}:due"
    assert keys.curator_signatures("a") == "gm:curator:{a}:signatures"
    assert keys.curator_playbook("a") == "gm:curator:{a}:playbook"
    assert keys.playbook("a") == "gm:playbook:{a}"
    assert keys.maintenance_ledger("a") == "gm:maint:{a}"
    assert keys.maintenance_lease("a") == "gm:maint:lease:{a}"
    assert keys.maintenance_log("a") == "gm:maint:log:{a}"
    assert STORE_FORMAT == "3"


def test_keystore_names_are_pinned() -> None:
    # Unchanged since format 1 and untagged: a format-1 store is upgraded by a
    # replay that reads its journal with these keys.
    keys = Keyspace("gm")
    assert keys.keystore_prefix == "gm:keystore"
    assert keys.keystore_pattern == "gm:keystore:*"
    assert keys.agent_keys("a") == "gm:keystore:agent:a"
    assert keys.journal_sequences == "gm:keystore:journal-seq"
    assert keys.api_key("0123abcd") == "gm:keystore:api-key:0123abcd"
    assert keys.api_key_index == "gm:keystore:api-keys"


def test_a_wipe_can_tell_keystore_keys_from_memory_state() -> None:
    keys = Keyspace("gm")
    assert keys.is_keystore_key(keys.agent_keys("a"))
    assert keys.is_keystore_key(keys.journal_sequences.encode())
    # Tenant keys too: a wipe or replay must not lock every tenant out.
    assert keys.is_keystore_key(keys.api_key("0123abcd"))
    assert keys.is_keystore_key(keys.api_key_index)
    for state in (
        keys.memory("a", "m1"),
        keys.decided("a"),
        keys.watermark("a"),
        keys.field_state("a"),
        keys.agents,
        keys.store_format,
    ):
        assert not keys.is_keystore_key(state)
    assert not keys.is_keystore_key("gm:keystore")  # the bare prefix is no key of it
    assert not Keyspace("other").is_keystore_key(keys.agent_keys("a"))


def test_witness_and_scan_patterns_are_pinned() -> None:
    keys = Keyspace("gm")
    assert keys.witness("a") == "gm:witness:{a}"
    assert keys.nexus_pattern("a") == "gm:nexus:{a}:*"
    assert keys.hyperedge_pattern("a") == "gm:hyper:{a}:*"
    assert keys.compaction_plan_pattern("a") == "gm:compact:plan:{a}:*"
    assert keys.compaction_outbox_pattern("a") == "gm:compact:outbox:{a}:*"


def test_scan_patterns_escape_glob_characters() -> None:
    keys = Keyspace("g[m]")
    assert keys.nexus_pattern("a*?\\b") == "g\\[m\\]:nexus:{a\\*\\?\\\\b}:*"
    assert glob_escape("plain:key") == "plain:key"
    # and back: the literal head of a pattern is the agent's key with an empty name
    assert scan_head(keys.nexus_pattern("a*?\\b")) == keys.nexus("a*?\\b", "")


def test_an_agents_patterns_never_match_a_longer_agents_keys() -> None:
    # The tag's closing brace ends the agent id: `a`'s keys are never `a:x`'s or `ab`'s.
    keys = Keyspace("gm")
    for other in ("a:x", "ab"):
        for pattern, build in (
            (keys.nexus_pattern("a"), keys.nexus(other, "k")),
            (keys.derivation_pattern("a"), keys.derived_from(other, "ev")),
            (keys.agent_memory_pattern("a"), keys.memory(other, "m1")),
        ):
            assert not fnmatch.fnmatchcase(build, pattern)
    assert fnmatch.fnmatchcase(keys.nexus("a", "k"), keys.nexus_pattern("a"))


def test_derivation_index_names_are_pinned() -> None:
    keys = Keyspace("gm")
    assert keys.derived_from("a", "ev-1") == "gm:deriv:{a}:from:ev-1"
    assert keys.derivation_sources("a", "m1") == "gm:deriv:{a}:of:m1"
    assert keys.derivation_pattern("a*") == "gm:deriv:{a\\*}:*"


def test_a_prefix_holds_no_braces() -> None:
    # A brace in the prefix would become every key's hash tag.
    for prefix in ("g{m", "gm}", "{gm}"):
        with pytest.raises(ValueError, match="braces"):
            Keyspace(prefix)


def test_every_per_agent_key_is_in_an_agents_footprint() -> None:
    # A key added here with an agent or memory id in it is an agent's state: the
    # footprint (forget, digest) must know it, or say why it stays outside.
    def taking(parameter: str) -> set[str]:
        return {
            name
            for name, member in vars(Keyspace).items()
            if inspect.isfunction(member) and parameter in inspect.signature(member).parameters
        }

    covered = {build.__name__ for build in FIXED_FAMILIES.values()}
    covered |= {build.__name__ for build in MEMBER_FAMILIES.values()}
    covered |= {build.__name__ for build in MEMORY_FAMILIES.values()}
    for pattern, builders in SCANNED_FAMILIES.values():
        covered |= {pattern.__name__, *(build.__name__ for build in builders)}
    outside = {
        "agent_keys",  # the key store: outside the fold, forgotten apart
        "agent_memory_pattern",  # a SCAN pattern of the memory family
        "agent_clades",  # the clade registry: admin-managed, not a fold of a journal
    }
    assert taking("agent_id") - covered - outside == set()
    assert taking("memory_id") == {build.__name__ for build in MEMORY_FAMILIES.values()}


def test_agent_keys_of_two_deployments_never_meet() -> None:
    one, two = Keyspace("one"), Keyspace("two")
    assert one.decided("a") != two.decided("a")
    assert not one.memory("a", "x").startswith(two.memory_prefix)


# ---- Redis Cluster: one agent, one slot ---------------------------------------------

AGENTS = ("a", "golem-1", "fleet-a/golem-2", "x.y_z@host+1=2", "A" * 64, "~forgotten")


def _agent_keys(keys: Keyspace, agent: str) -> list[str]:
    """Every key of the agent's state the keyspace builds (its footprint's families)."""
    built = [build(keys, agent) for build in FIXED_FAMILIES.values()]
    built += [build(keys, agent) for build in MEMBER_FAMILIES.values()]
    built += [
        build(keys, agent, "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
        for build in MEMORY_FAMILIES.values()
    ]
    for _, builders in SCANNED_FAMILIES.values():
        built += [build(keys, agent, "name:with{braces}") for build in builders]
    return built


@pytest.mark.parametrize("agent", AGENTS)
def test_every_key_of_an_agent_carries_its_hash_tag(agent: str) -> None:
    keys = Keyspace("gm")
    for key in _agent_keys(keys, agent):
        # The first braces of the key are the agent id: its hash tag.
        assert key[key.index("{") + 1 : key.index("}")] == agent, key
        assert key.startswith("gm:")


@pytest.mark.parametrize("agent", AGENTS)
def test_every_key_of_an_agent_is_in_its_slot(agent: str) -> None:
    keys = Keyspace("gm")
    slot = agent_slot(agent)
    assert {key_slot(key.encode()) for key in _agent_keys(keys, agent)} == {slot}


def test_agents_spread_over_the_slots() -> None:
    slots = {agent_slot(f"golem-{i}") for i in range(1000)}
    assert len(slots) > 900  # CRC16 of the tag: no hot slot for a fleet


def test_deployment_wide_keys_are_outside_every_agents_transaction() -> None:
    # Untagged, so never queued on an agent's pipeline (`AgentTransactions`):
    # they hash by their whole name.
    keys = Keyspace("gm")
    for key in (keys.agents, keys.metrics, keys.outbox_agents(0), keys.applied_sources,
                keys.vector_space, keys.store_format):  # fmt: skip
        assert "{" not in key


def test_a_masters_index_name_hashes_to_its_tag() -> None:
    keys = Keyspace("gm")
    assert key_slot(keys.cluster_index_name("s7").encode()) == key_slot(b"s7")


def _literal_parts(node: ast.JoinedStr) -> Iterator[tuple[str, bool]]:
    """Each literal part of an f-string, and whether an interpolation touches it."""
    values = node.values
    for i, part in enumerate(values):
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            near = any(
                isinstance(values[j], ast.FormattedValue)
                for j in (i - 1, i + 1)
                if 0 <= j < len(values)
            )
            yield part.value, near


def _builds_key(literal: str) -> bool:
    for segment in SEGMENTS:
        if literal.startswith(f":{segment}") or f":{segment}:" in literal:
            return True
        if literal in (f"{segment}:", f":{segment}"):
            return True
    return literal.startswith("-memory")


def stray_keys(source: str, filename: str) -> list[str]:
    """`file:line` of every f-string that builds a Redis key name."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.JoinedStr) and any(
            near and _builds_key(literal) for literal, near in _literal_parts(node)
        ):
            found.append(f"{filename}:{node.lineno}")
    return found


def _product_sources() -> Iterator[Path]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path != KEYSPACE:
                yield path


def test_no_module_but_the_keyspace_builds_a_key() -> None:
    scanned = list(_product_sources())
    assert len(scanned) > 100, "the scan must see the product's modules"
    stray = [
        hit for path in scanned for hit in stray_keys(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert stray == [], "build these keys with grimoire.tables.keyspace.Keyspace:\n" + "\n".join(
        stray
    )


@pytest.mark.parametrize(
    "line",
    [
        'key = f"{prefix}:mem:{memory_id}"',
        'key = f"{self._prefix}:decided:{agent_id}"',
        'key = f"{self.prefix}:watermarks"',
        'name = f"{prefix}-memory"',
        'key = f"{prefix}:curator:{agent}:entries"',
        'key = f"{base}:use:{i}"',
    ],
)
def test_the_scan_catches_a_stray_key(line: str) -> None:
    assert stray_keys(line, "fake.py") == ["fake.py:1"]


@pytest.mark.parametrize(
    "line",
    [
        'msg = f"{count} memories: {names}"',
        'topic = f"{prefix}.episodes"',
        'space = f"{model}:float32"',
        'log = f"prefix {prefix!r} holds vectors"',
    ],
)
def test_the_scan_passes_what_is_not_a_key(line: str) -> None:
    assert stray_keys(line, "fake.py") == []
