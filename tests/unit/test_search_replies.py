"""`total_results` reads a reply's match count in every form Redis gives it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grimoire.tables.codec.search_replies import total_results


@pytest.mark.parametrize(
    ("reply", "total"),
    [
        ({"total_results": 7, "results": []}, 7),  # RESP3, decoded keys
        ({b"total_results": 620, b"results": []}, 620),  # RESP3 from execute_command
        ({b"results": []}, 0),  # no count at all
        ([3, b"k1", b"k2", b"k3"], 3),  # raw RESP2 array
        (SimpleNamespace(total=12, docs=[]), 12),  # redis-py Result
    ],
)
def test_total_results_in_every_reply_form(reply: object, total: int) -> None:
    assert total_results(reply) == total
