"""grimoire.streams.recall.packing: hand-computed MMR picks and token-budget boundaries."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations

import pytest

from grimoire.streams.model.records import Kind
from grimoire.streams.recall.packing import (
    DEFAULT_FULL_TEXT_ITEMS,
    DEFAULT_MAX_ITEMS,
    DEFAULT_MMR_LAMBDA,
    DEFAULT_TOKEN_BUDGET,
    ITEM_OVERHEAD_TOKENS,
    PackInput,
    estimate_tokens,
    item_cost,
    mmr,
    pack,
)


@dataclass(frozen=True)
class Hit:
    memory_id: str
    score: float


def ids(items: list[Hit]) -> list[str]:
    return [item.memory_id for item in items]


def test_defaults() -> None:
    assert DEFAULT_MMR_LAMBDA == 0.7
    assert (DEFAULT_MAX_ITEMS, DEFAULT_TOKEN_BUDGET, DEFAULT_FULL_TEXT_ITEMS) == (10, 500, 2)
    assert ITEM_OVERHEAD_TOKENS == 8


def test_mmr_2d_prefers_a_different_direction() -> None:
    hits = [Hit("a", 1.0), Hit("b", 0.9), Hit("c", 0.5)]
    vectors = {"a": (1.0, 0.0), "b": (1.0, 0.0), "c": (0.0, 1.0)}
    # 1st: a (0.7). Then b: .7*.9 - .3*1 = 0.33 < c: .7*.5 - 0 = 0.35.
    assert ids(mmr(hits, vectors)) == ["a", "c", "b"]
    # lambda 1 is pure relevance; lambda 0 after the first pick is pure novelty.
    assert ids(mmr(hits, vectors, lambda_=1.0)) == ["a", "b", "c"]
    assert ids(mmr(hits, vectors, lambda_=0.0)) == ["a", "c", "b"]


def test_mmr_3d_hand_values_and_limit() -> None:
    hits = [Hit("a", 1.0), Hit("b", 0.9), Hit("c", 0.7)]
    vectors = {"a": (1.0, 0.0, 0.0), "b": (0.6, 0.8, 0.0), "c": (0.0, 0.0, 1.0)}
    # After a: b = .63 - .3*.6 = 0.45; c = .49 - 0 = 0.49 -> c.
    # Then b: max sim to {a, c} = .6 -> 0.45.
    assert ids(mmr(hits, vectors)) == ["a", "c", "b"]
    assert ids(mmr(hits, vectors, limit=2)) == ["a", "c"]
    assert mmr(hits, vectors, limit=0) == []
    assert ids(mmr(hits, vectors, limit=99)) == ["a", "c", "b"]
    # c at 0.6 scores .42 < .45, so b wins the second slot.
    lower_c = [Hit("a", 1.0), Hit("b", 0.9), Hit("c", 0.6)]
    assert ids(mmr(lower_c, vectors)) == ["a", "b", "c"]


def test_mmr_normalises_vectors_and_handles_missing() -> None:
    hits = [Hit("a", 1.0), Hit("b", 0.9), Hit("c", 0.5)]
    # b is a scaled copy of a: still cosine 1. c has no vector: similar to nothing.
    vectors = {"a": (2.0, 0.0), "b": (5.0, 0.0)}
    assert ids(mmr(hits, vectors)) == ["a", "c", "b"]
    assert ids(mmr(hits, {})) == ["a", "b", "c"]


def test_mmr_ties_break_on_id_in_any_input_order() -> None:
    hits = [Hit("y", 0.5), Hit("x", 0.5), Hit("z", 0.5)]
    vectors = {"x": (1.0, 0.0, 0.0), "y": (0.0, 1.0, 0.0), "z": (0.0, 0.0, 1.0)}
    for order in permutations(hits):
        assert ids(mmr(list(order), vectors)) == ["x", "y", "z"]


def test_mmr_is_deterministic_and_drops_duplicate_ids() -> None:
    hits = [Hit(f"m{i}", 1.0 - i / 20) for i in range(8)]
    vectors = {f"m{i}": (float(i % 3), float(i % 2), 1.0) for i in range(8)}
    first = mmr(hits, vectors, limit=5)
    assert all(ids(mmr(list(order), vectors, limit=5)) == ids(first) for order in [hits[::-1]])
    assert ids(mmr([Hit("a", 1.0), Hit("a", 0.1)], {})) == ["a"]


def test_mmr_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        mmr([Hit("a", 1.0)], {}, lambda_=1.5)
    with pytest.raises(ValueError):
        mmr([Hit("a", 1.0), Hit("b", 1.0)], {"a": (1.0,), "b": (1.0, 0.0)})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("   ", 0),
        ("abcd", 1),
        ("abcde", 2),
        ("a b c d e", 5),  # 9 chars -> 3, but 5 words
        ("  hello   world ", 3),  # normalised "hello world": 11 chars -> 3
        ("x" * 40, 10),
    ],
)
def test_estimate_tokens(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def item(memory_id: str, *, gist: str = "abcd", text: str = "x" * 40) -> PackInput:
    # full cost 8 + 1 + 10 = 19, gist-only cost 8 + 1 = 9
    return PackInput(memory_id=memory_id, kind=Kind.INSIGHT, text=text, score=0.5, gist=gist)


THREE = [item("a"), item("b"), item("c")]


def test_item_cost() -> None:
    assert item_cost("abcd", None) == 9
    assert item_cost("abcd", "x" * 40) == 19


@pytest.mark.parametrize(
    ("full_text_items", "budget", "expected_ids", "expected_used"),
    [
        (1, 37, ["a", "b", "c"], 37),  # exactly fits: 19 + 9 + 9
        (1, 36, ["a", "b"], 28),  # one over: c would make 37
        (0, 27, ["a", "b", "c"], 27),
        (0, 26, ["a", "b"], 18),
        (3, 57, ["a", "b", "c"], 57),
        (3, 56, ["a", "b", "c"], 47),  # c falls back to its gist: 19 + 19 + 9
        (3, 46, ["a", "b"], 38),
    ],
)
def test_pack_budget_boundaries(
    full_text_items: int, budget: int, expected_ids: list[str], expected_used: int
) -> None:
    packed = pack(THREE, max_items=10, token_budget=budget, full_text_items=full_text_items)
    assert [p.memory_id for p in packed.items] == expected_ids
    assert packed.tokens_used == expected_used
    assert sum(p.tokens for p in packed.items) == expected_used


@pytest.mark.parametrize("full_text_items", [0, 1, 3])
def test_only_top_items_carry_full_text(full_text_items: int) -> None:
    packed = pack(THREE, max_items=3, token_budget=1000, full_text_items=full_text_items)
    carried = [p.text is not None for p in packed.items]
    assert carried == [i < full_text_items for i in range(3)]
    for p in packed.items:
        assert (p.kind, p.gist, p.score) == ("insight", "abcd", 0.5)


def test_full_text_that_does_not_fit_degrades_to_gist() -> None:
    packed = pack(THREE, max_items=3, token_budget=18, full_text_items=1)
    assert [(p.memory_id, p.text) for p in packed.items] == [("a", None), ("b", None)]
    assert packed.tokens_used == 18


def test_stops_at_first_misfit_instead_of_skipping() -> None:
    big = item("b", gist="y" * 100)  # 8 + 25 = 33
    packed = pack([item("a"), big, item("c")], token_budget=40, full_text_items=0)
    assert [p.memory_id for p in packed.items] == ["a"]


def test_zero_budgets_give_empty_and_negatives_raise() -> None:
    assert pack(THREE, max_items=0).items == ()
    assert pack(THREE, token_budget=0).tokens_used == 0
    assert pack(THREE, token_budget=0).items == ()
    assert pack([], token_budget=100).items == ()
    with pytest.raises(ValueError):
        pack(THREE, token_budget=-1)


def test_max_items_caps_count() -> None:
    packed = pack(THREE, max_items=2, token_budget=1000, full_text_items=0)
    assert [p.memory_id for p in packed.items] == ["a", "b"]


def test_gist_derived_from_text_and_metadata_kept() -> None:
    source = PackInput(
        memory_id="m",
        kind="warning",
        text="hello   world",
        score=0.9,
        factors=(("relevance", 1.0),),
        reasons=("tool:swap",),
    )
    (packed,) = pack([source], full_text_items=0).items
    assert packed.gist == "hello world"
    assert (packed.factors, packed.reasons, packed.text) == (
        (("relevance", 1.0),),
        ("tool:swap",),
        None,
    )
    assert packed.tokens == ITEM_OVERHEAD_TOKENS + 3


def test_pack_is_deterministic() -> None:
    assert pack(THREE, token_budget=40) == pack(list(THREE), token_budget=40)
