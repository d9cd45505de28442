"""bench.locomo_options: the knobs of `python -m bench locomo` and the ablations, each
a mechanism switched off through settings that already exist."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.locomo_options import (
    ABLATIONS,
    LocomoOptions,
    ablated_settings,
    ablation_changes,
    add_arguments,
    options_from_args,
)
from grimoire.infra.settings import FLAT_NAMES, Settings


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_every_ablation_names_settings_that_exist_with_values_they_accept() -> None:
    for name, changes in ABLATIONS.items():
        assert changes, name
        for field in changes:
            assert field in FLAT_NAMES, (name, field)
        Settings.model_validate(dict(changes))  # raises on a value out of range


def test_ablated_settings_change_only_the_named_mechanisms() -> None:
    base = Settings()
    assert ablated_settings(base, ()) is base
    off = ablated_settings(base, ("walk", "session-context"))
    assert off.recall.walk.num_walkers == 0
    assert off.recall.relevance.context_share == 0.0 and off.recall.relevance.context_anchors == 0
    before, after = base.flat_values(), off.flat_values()
    changed = {name for name in FLAT_NAMES if after[name] != before[name]}
    assert changed == {"walk_num_walkers", "relevance_context_share", "relevance_context_anchors"}
    # The worker is started from these settings: the ranking policy carries them.
    assert off.recall_limits.defaults.walk.num_walkers == 0
    assert off.ranking_policy.relevance.context_share == 0.0


def test_unknown_and_contradictory_ablations_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown ablation"):
        ablation_changes(["teleport"])
    with pytest.raises(ValueError, match="contradicts"):
        ablation_changes(["lexical-relevance", "semantic-relevance"])
    assert ablation_changes(["mmr", "priors"]) == {
        "mmr": {"mmr_lambda": 1.0},
        "priors": {"rerank_prior_share": 0.0},
    }


def test_the_command_line_defaults_and_knobs() -> None:
    assert options_from_args(_parse([])) == LocomoOptions()
    assert LocomoOptions().folds == 2 and LocomoOptions().report_fold == 0
    options = options_from_args(
        _parse(["--folds", "3", "--report-fold", "2", "--ablate", "walk", "--ablate", "walk"])
    )
    assert options == LocomoOptions(folds=3, report_fold=2, ablate=("walk",))
    with pytest.raises(SystemExit):
        _parse(["--ablate", "teleport"])
    with pytest.raises(ValueError):
        LocomoOptions(folds=2, report_fold=2)
    with pytest.raises(ValueError):
        LocomoOptions(folds=1)


def test_bench_locomo_names_a_missing_data_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.json"
    assert main(["locomo", "--data", str(missing), "--ablate", "walk"]) == 2
    assert f"no LoCoMo file at {missing}" in capsys.readouterr().err


def test_bench_locomo_refuses_a_report_fold_out_of_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["locomo", "--folds", "2", "--report-fold", "5"]) == 2
    assert "report fold must be within 0..1" in capsys.readouterr().err
