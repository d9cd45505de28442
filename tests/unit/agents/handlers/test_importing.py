"""An import of an export written before the lexical form (store format 2)."""

from __future__ import annotations

from grimoire.agents.handlers.importing import _with_lexical_forms
from grimoire.streams.exchange.format import StateLine, hash_of
from grimoire.streams.model.lexicon import lexical_form

TS = 1_683_504_000_000  # 2023-05-08 00:00 UTC


def _memory(fields: dict[bytes, bytes], name: str = "m-1") -> StateLine:
    return StateLine("memory", name, "hash", tuple(sorted(fields.items())))


def test_a_memory_line_without_a_lexical_form_gets_the_writers() -> None:
    line = _memory({b"text": b"Painted the fence yesterday", b"ts": str(TS).encode()})
    (out,) = _with_lexical_forms([line])
    assert hash_of(out)[b"lexical"] == lexical_form("Painted the fence yesterday", TS).text.encode()
    assert hash_of(out)[b"text"] == b"Painted the fence yesterday"


def test_a_line_that_has_one_and_other_families_are_left_alone() -> None:
    held = _memory({b"text": b"x y", b"ts": b"1", b"lexical": b"kept as exported"})
    other = StateLine("config", "c", "hash", ((b"k", b"v"),))
    assert _with_lexical_forms([held, other]) == [held, other]
