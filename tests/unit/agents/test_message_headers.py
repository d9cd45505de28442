"""`_message` (agents/faust_agents.py): a Faust event as the handlers' InputMessage,
its Kafka headers included whatever shape Faust hands them in (a list of pairs, a
mapping, None), so a tenant key may come as a `grimoire-api-key` header."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from grimoire.agents.faust_agents import _message


def event(headers: Any, value: Any = b"{}") -> Any:
    message = SimpleNamespace(topic="gm.commands", partition=1, offset=9, headers=headers)
    return SimpleNamespace(message=message, value=value)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (None, ()),
        ([], ()),
        ([("grimoire-api-key", b"gmk_x")], (("grimoire-api-key", b"gmk_x"),)),
        ([(b"a", b"1"), ("b", None)], (("a", b"1"), ("b", b""))),
        ({"grimoire-api-key": "gmk_y"}, (("grimoire-api-key", b"gmk_y"),)),
    ],
)
def test_headers_are_carried_as_name_and_bytes(headers: Any, expected: Any) -> None:
    message = _message(event(headers))
    assert message.headers == expected
    assert (message.value, message.topic, message.partition, message.offset) == (
        b"{}",
        "gm.commands",
        1,
        9,
    )


def test_an_event_without_a_headers_attribute_has_none() -> None:
    message = SimpleNamespace(topic="t", partition=0, offset=0)
    assert _message(SimpleNamespace(message=message, value=None)).headers == ()
