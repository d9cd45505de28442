"""The journal's usage entry (streams/journal/usage.py) with what learning keeps: the
run a recall served and the factor values that ranked each used memory. Entries
journaled before learning existed still decode; a malformed one is `InvalidEntry`."""

from __future__ import annotations

import orjson
import pytest

from grimoire.streams.journal.entry import InvalidEntry
from grimoire.streams.journal.usage import RecallUsage, decode_usage, encode_usage

FACTORS = (
    ("m1", (("relevance", 1.0), ("quality", 0.25), ("rank", 0.0))),
    ("m2", (("relevance", 0.5), ("causal", 0.75), ("rank", 1.0))),
)


@pytest.mark.parametrize(
    "usage",
    [
        RecallUsage(("m1", "m2"), 1_000, None, "run-7", FACTORS),
        RecallUsage(("m1",), 1_000, 3, "run-7", FACTORS[:1]),
        RecallUsage(("m1",), 1_000, None, "run-7", ()),  # a run's recall that used nothing
        RecallUsage((), 5, 2),
        RecallUsage(("m1", "m2"), 1_000),
    ],
)
def test_usage_round_trips(usage: RecallUsage) -> None:
    assert decode_usage(encode_usage(usage)) == usage


def test_the_wire_form_of_a_runs_usage() -> None:
    raw = orjson.loads(encode_usage(RecallUsage(("m1", "m2"), 1_000, None, "run-7", FACTORS)))
    assert raw == {
        "memory_ids": ["m1", "m2"],
        "as_of": 1_000,
        "contrarian_window": None,
        "run_id": "run-7",
        "factors": {
            "m1": {"relevance": 1.0, "quality": 0.25, "rank": 0.0},
            "m2": {"relevance": 0.5, "causal": 0.75, "rank": 1.0},
        },
    }


def test_factors_travel_only_with_a_run() -> None:
    # Without a run nothing will learn from them: they are not journaled.
    raw = encode_usage(RecallUsage(("m1",), 1_000, None, "", FACTORS))
    assert set(orjson.loads(raw)) == {"memory_ids", "as_of", "contrarian_window"}
    assert decode_usage(raw) == RecallUsage(("m1",), 1_000)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"memory_ids": ["m1"], "as_of": 1000, "contrarian_window": null}',
        b'{"memory_ids": ["m1"], "as_of": 1000}',
        b'{"memory_ids": ["m1"], "as_of": 1000, "run_id": null, "factors": null}',
    ],
)
def test_entries_journaled_before_learning_still_decode(raw: bytes) -> None:
    assert decode_usage(raw) == RecallUsage(("m1",), 1_000)


def test_integer_factor_values_are_floats() -> None:
    raw = b'{"memory_ids": ["m1"], "as_of": 1, "run_id": "r", "factors": {"m1": {"rank": 2}}}'
    usage = decode_usage(raw)
    assert usage.factors == (("m1", (("rank", 2.0),)),)
    assert isinstance(usage.factors[0][1][0][1], float)


BASE = b'"memory_ids": ["m1"], "as_of": 1'


@pytest.mark.parametrize(
    "tail",
    [
        b'"run_id": 7, "factors": {}',  # a run id is text
        b'"run_id": ["r"], "factors": {}',
        b'"run_id": "r", "factors": ["m1"]',  # factors are an object
        b'"run_id": "r", "factors": "m1"',
        b'"run_id": "r", "factors": {"m1": 0.5}',  # ... of objects
        b'"run_id": "r", "factors": {"m1": ["relevance", 0.5]}',
        b'"run_id": "r", "factors": {"m1": {"relevance": "high"}}',  # ... of numbers
        b'"run_id": "r", "factors": {"m1": {"relevance": null}}',
        b'"run_id": "r", "factors": {"m1": {"relevance": {"v": 1}}}',
    ],
)
def test_malformed_run_fields_are_invalid_entries(tail: bytes) -> None:
    with pytest.raises(InvalidEntry):
        decode_usage(b"{" + BASE + b", " + tail + b"}")
