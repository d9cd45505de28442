"""A recall under the agent's runtime configuration: retrieval off answers
nothing and counts nothing; top_k is the default item count; the time window,
layers and lane weights narrow and weigh what the lanes see."""

from __future__ import annotations

from typing import Any

import orjson

from grimoire.streams.config.agent_config import AgentConfig, apply_update
from grimoire.tables.testing.config_store import InMemoryConfigStore
from tests.support.handlers import REPLY_TO, TS, Rig, recall_request, seeded


async def _configured(update: dict[str, Any]) -> tuple[Rig, InMemoryConfigStore]:
    rig = await seeded()
    configs = InMemoryConfigStore()
    await configs.save("agent-1", apply_update(AgentConfig(), update))
    rig.recall.configs = configs
    rig.sink.sent.clear()
    return rig, configs


async def _reply(rig: Rig, **fields: Any) -> dict[str, Any]:
    await rig.recall.handle(recall_request(as_of=TS + 500, **fields))
    (reply,) = [orjson.loads(v) for t, _, v in rig.sink.sent if t == REPLY_TO]
    rig.sink.sent.clear()
    return reply


async def test_retrieval_off_answers_nothing_and_records_no_use() -> None:
    rig, configs = await _configured({"retrieval_enabled": False})
    reply = await _reply(rig)
    assert (reply["items"], reply["mode"], reply.get("error")) == ([], "disabled", None)
    assert rig.recorded == []
    await configs.save("agent-1", AgentConfig())  # on again: the next request is answered
    assert (await _reply(rig))["items"]


async def test_memory_off_turns_retrieval_off_too() -> None:
    rig, _ = await _configured({"memory_enabled": False})
    assert (await _reply(rig))["mode"] == "disabled"


async def test_top_k_is_the_default_count_and_a_request_may_still_name_its_own() -> None:
    rig, _ = await _configured({"top_k": 1})
    assert len((await _reply(rig))["items"]) == 1
    assert len((await _reply(rig, k=3))["items"]) == 3


async def test_the_time_window_hides_what_is_older() -> None:
    # a1..a3 are at TS, TS + 1, TS + 2; as_of is TS + 500.
    rig, _ = await _configured({"time_window_ms": 499})
    items = (await _reply(rig, k=10))["items"]
    assert {item["ts"] for item in items} == {TS + 1, TS + 2}


async def test_layers_the_configuration_hides_are_never_returned() -> None:
    rig, _ = await _configured({"layers": ["output"]})
    assert (await _reply(rig, k=10))["items"] == []  # the seeded memories are input
    assert (await _reply(rig, k=10, filters={"layers": ["input"]}))["mode"] == "none"
