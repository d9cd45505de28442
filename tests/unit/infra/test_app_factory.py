"""The app factory wires the tuned transport; pinned so a Faust upgrade cannot silently
bring back its hard-coded 1.5 s fetch wait."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition as TP

from grimoire.infra.app import GrimoireApp, create_app
from grimoire.infra.local.worker_process import settings_env
from grimoire.infra.settings import Settings
from grimoire.topics.declarations import partition_of
from tests.support.settings import unit_settings


async def test_worker_consumer_uses_the_configured_fetch_wait() -> None:
    app = create_app(unit_settings(consumer_fetch_max_wait_ms=37))
    thread = app.consumer._thread  # the consumer thread builds the aiokafka consumer
    consumer = thread._create_worker_consumer(app.transport)
    assert consumer._fetch_max_wait_ms == 37
    assert consumer._session_timeout_ms == 3000
    assert consumer._heartbeat_interval_ms == 500


async def test_app_settings_follow_grimoire_settings() -> None:
    app = create_app(unit_settings(broker_commit_interval_s=0.2, partitions=3, web_enabled=False))
    assert app.conf.broker_commit_interval == 0.2
    assert app.conf.topic_partitions == 3
    assert app.conf.web_enabled is False
    assert app.conf.consumer_auto_offset_reset == "earliest"


_INGEST_TOPICS = {
    "unit.episodes",
    "unit.tool-events",
    "unit.transcripts",
    "unit.outcomes",
    "unit.maintenance",
    "unit.clade",
    "unit.commands",
    "unit.journal",
    "unit.facts",
}
_READ_TOPICS = {"unit.recall-requests", "unit.fact-queries"}


async def test_every_input_topic_has_an_agent() -> None:
    app = create_app(unit_settings())
    consumed = {topic for agent in app.agents.values() for topic in agent.channel.topics}
    assert consumed == _INGEST_TOPICS | _READ_TOPICS


def _consumed(roles: str) -> set[str]:
    app = create_app(unit_settings(worker_roles=roles))
    return {topic for agent in app.agents.values() for topic in agent.channel.topics}


async def test_a_worker_serves_only_its_roles() -> None:
    """Split, the journal's folds and the reads never share an event loop; together
    the roles cover every topic (test_every_input_topic_has_an_agent)."""
    assert _consumed("ingest") == _INGEST_TOPICS
    assert _consumed("recall") == _READ_TOPICS
    assert _consumed("recall, ingest") == _INGEST_TOPICS | _READ_TOPICS


def _captured_timers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    timers: list[tuple[Any, dict[str, Any]]] = []

    def timer(self: Any, **options: Any) -> Any:
        def register(fun: Any) -> Any:
            timers.append((fun, options))
            return fun

        return register

    monkeypatch.setattr(GrimoireApp, "timer", timer, raising=True)
    return timers


@pytest.mark.parametrize(
    ("roles", "runs_it"), [("ingest", True), ("recall", False), ("ingest,recall", True)]
)
async def test_ingest_workers_run_the_block_timer_on_every_member(
    roles: str, runs_it: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not on the group's leader alone: each ingest worker fans maintenance out for
    the partitions it folds, under its own pressure."""
    timers = _captured_timers(monkeypatch)
    create_app(unit_settings(worker_roles=roles))
    assert [(fun.__name__, options) for fun, options in timers] == (
        [("block_timer", {"interval": 12.0})] if runs_it else []
    )
    timers.clear()
    create_app(unit_settings(worker_roles=roles, maintenance_enabled=False))
    assert timers == []


async def test_the_block_timer_sends_for_the_agents_of_its_journal_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timers = _captured_timers(monkeypatch)
    app = create_app(unit_settings(partitions=4))
    ((block_timer, _),) = timers
    agents = [f"golem-{n}" for n in range(40)]
    held = {1, 3}
    runtime = app.grimoire_runtime  # type: ignore[attr-defined]

    async def known_agents() -> Any:
        for n, agent in enumerate(agents):
            yield agent, 1_000 + n

    async def everyone(agent_ids: Any) -> list[str]:
        return list(agent_ids)

    sent: list[tuple[str, bytes]] = []

    class Producer:
        async def send(self, topic: str, key: bytes, value: bytes, *_: Any) -> None:
            sent.append((topic, key))

    monkeypatch.setattr(runtime, "known_agents", known_agents)
    monkeypatch.setattr(runtime, "maintenance_wanted", everyone)
    monkeypatch.setattr(runtime, "pressure", lambda: "normal")
    monkeypatch.setattr(
        app.assignor,
        "assigned_actives",
        lambda: {TP("unit.journal", p) for p in held} | {TP("unit.episodes", 0)},
    )
    monkeypatch.setattr(GrimoireApp, "producer", Producer())
    await block_timer()
    expected = [a for a in agents if partition_of(a, 4) in held]
    assert 0 < len(expected) < len(agents)
    assert sent == [("unit.maintenance", a.encode()) for a in expected]
    # Nothing moved since: the next tick sends nothing.
    sent.clear()
    await block_timer()
    assert sent == []
    # A worker that holds no journal partition sends nothing.
    monkeypatch.setattr(app.assignor, "assigned_actives", lambda: {TP("unit.episodes", 1)})
    monkeypatch.setattr(runtime, "known_agents", lambda: (_ for _ in ()).throw(AssertionError))
    await block_timer()
    assert sent == []


@pytest.mark.parametrize("roles", ["", "ingest,", "read", "ingest;recall", "INGEST"])
def test_unknown_roles_are_refused_at_startup(roles: str) -> None:
    with pytest.raises(ValueError, match="worker_roles"):
        unit_settings(worker_roles=roles)


async def test_maintenance_can_be_switched_off() -> None:
    app = create_app(unit_settings(maintenance_enabled=False))
    consumed = {topic for agent in app.agents.values() for topic in agent.channel.topics}
    assert "unit.maintenance" not in consumed


async def test_every_rebalance_reaches_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """It forgets the witness heads it kept (`Runtime.partitions_assigned`): a
    partition it gets back may have moved on under another worker."""
    app = create_app(unit_settings())
    calls: list[str] = []
    monkeypatch.setattr(
        app.grimoire_runtime,  # type: ignore[attr-defined]
        "partitions_assigned",
        lambda: calls.append("assigned"),
    )
    await app.on_partitions_assigned.send(set())
    assert calls == ["assigned"]


def test_a_child_process_environment_reproduces_every_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parent = unit_settings(
        embed_batch_size=7, web_enabled=True, rrf_k=11, partitions=2, worker_roles="recall"
    )
    monkeypatch.setenv("GRIMOIRE_EMBED_BATCH_SIZE", "999")  # the parent's own value must win
    env = settings_env(parent)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert env["GRIMOIRE_EMBED_BATCH_SIZE"] == "7"
    assert Settings(_env_file=None) == parent
