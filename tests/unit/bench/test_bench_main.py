"""`python -m bench`: the benchmarks' own command line, outside the installed package.

It parses what `grimoire bench` parsed before, prints the result as one JSON line last,
and the product's `grimoire` command no longer knows a `bench` subcommand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import bench.ingest
from bench.__main__ import build_parser, main
from grimoire.infra import cli


def test_every_benchmark_kind_is_a_subcommand() -> None:
    parser = build_parser()
    for kind in (
        "ingest",
        "recall",
        "maintenance",
        "faults",
        "learning",
        "locomo",
        "fleet",
        "fold",
    ):
        assert parser.parse_args([kind]).bench == kind


def test_bench_locomo_names_a_missing_data_file_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "locomo.json"
    assert main(["locomo", "--data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"no LoCoMo file at {missing}" in err
    assert "--data FILE" in err


def test_bench_ingest_passes_its_arguments_and_prints_one_json_line_last(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: dict[str, Any] = {}

    def fake_ingest(settings: object, **kwargs: Any) -> dict[str, Any]:
        asked.update(kwargs)
        return {"kind": "ingest", "events": kwargs["events"]}

    monkeypatch.setattr(bench.ingest, "run_ingest_bench", fake_ingest)
    assert main(["ingest", "--events", "12", "--mix", "distinct", "--profile", "both"]) == 0
    assert asked == {
        "events": 12,
        "agents": 20,
        "mixes": ("distinct",),
        "profiles": ("memory", "durable"),
    }
    last = capsys.readouterr().out.splitlines()[-1]
    assert orjson.loads(last) == {"kind": "ingest", "events": 12}


def test_the_grimoire_command_has_no_bench_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "locomo"])
    assert exited.value.code == 2
    assert "invalid choice: 'bench'" in capsys.readouterr().err
