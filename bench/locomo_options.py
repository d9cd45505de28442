"""The knobs of `python -m bench locomo` (folds, bootstrap, ablations) and the
ablations themselves: each switches one recall mechanism off through settings that
already exist (infra/settings.py), for the bench's worker only. Light to import: no
model, broker or Redis."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from bench.locomo_stats import DEFAULT_FOLDS, DEFAULT_REPORT_FOLD, DEFAULT_RESAMPLES, DEFAULT_SEED
from grimoire.infra.settings import Settings

# Mechanism name -> the settings that turn it off (docs/recall.md names each).
ABLATIONS: Mapping[str, Mapping[str, float | int]] = MappingProxyType(
    {
        # The lanes: a lane asked for no hits does not run.
        "bm25-lane": {"recall_bm25_k": 0},
        "canonical-lane": {"recall_canonical_k": 0},
        "eidolon-lane": {"recall_eidolon_k": 0},
        # The daimoi walk: no walkers, no walk candidates.
        "walk": {"walk_num_walkers": 0},
        # Relevance: each side alone, and no session neighbours (neither brought into
        # the pool nor lending relevance).
        "lexical-relevance": {"relevance_lexical_share": 0.0},
        "semantic-relevance": {"relevance_lexical_share": 1.0},
        "session-context": {"relevance_context_share": 0.0, "relevance_context_anchors": 0},
        # What the query asks beyond its words (streams/recall/temporal.py, named.py).
        "time-cue": {"relevance_time_cue_share": 0.0},
        "time-window": {"relevance_time_window_share": 0.0},
        "actor": {"relevance_actor_share": 0.0},
        "actor-free-query": {"recall_actor_free_query": 0},
        "entity-lane": {"recall_entity_k": 0},
        # The rerank's priors: relevance alone orders the candidates.
        "priors": {"rerank_prior_share": 0.0},
        # MMR: lambda 1 picks by score alone.
        "mmr": {"mmr_lambda": 1.0},
        # Anti-rumination: 0 ticks never injects.
        "contrarian": {"contrarian_every_ticks": 0},
    }
)


@dataclass(frozen=True, slots=True)
class LocomoOptions:
    folds: int = DEFAULT_FOLDS
    report_fold: int = DEFAULT_REPORT_FOLD
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    ablate: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.folds < 2:
            raise ValueError("folds must be at least 2")
        if not 0 <= self.report_fold < self.folds:
            raise ValueError(f"report fold must be within 0..{self.folds - 1}")
        if self.resamples < 1:
            raise ValueError("resamples must be at least 1")
        ablation_changes(self.ablate)


def ablation_changes(names: Iterable[str]) -> dict[str, dict[str, float | int]]:
    """{name: its settings} for the named ablations, in the order given; refuses an
    unknown name and two ablations that set one setting differently."""
    chosen: dict[str, dict[str, float | int]] = {}
    merged: dict[str, float | int] = {}
    for name in names:
        if name not in ABLATIONS:
            raise ValueError(f"unknown ablation {name!r} (one of {', '.join(ABLATIONS)})")
        for field, value in ABLATIONS[name].items():
            if field in merged and merged[field] != value:
                raise ValueError(f"ablation {name!r} contradicts another one on {field}")
            merged[field] = value
        chosen[name] = dict(ABLATIONS[name])
    return chosen


def ablated_settings(settings: Settings, names: Iterable[str]) -> Settings:
    """`settings` with the named mechanisms off (validated as the worker will read them)."""
    update: dict[str, float | int] = {}
    for changes in ablation_changes(names).values():
        update.update(changes)
    if not update:
        return settings
    return settings.with_values(**update)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None, help="a LoCoMo-format JSON file")
    parser.add_argument("--conversations", default="", help="comma-separated sample ids")
    parser.add_argument(
        "--folds",
        type=int,
        default=DEFAULT_FOLDS,
        help="k folds of the data file's conversations (by a hash of their ids)",
    )
    parser.add_argument(
        "--report-fold",
        type=int,
        default=DEFAULT_REPORT_FOLD,
        help="the fold reported on; the others are the ones to tune on",
    )
    parser.add_argument(
        "--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    parser.add_argument(
        "--ablate",
        action="append",
        default=[],
        choices=sorted(ABLATIONS),
        metavar="NAME",
        help="switch a recall mechanism off (repeatable): " + ", ".join(sorted(ABLATIONS)),
    )


def options_from_args(args: argparse.Namespace) -> LocomoOptions:
    return LocomoOptions(
        folds=args.folds,
        report_fold=args.report_fold,
        resamples=args.resamples,
        seed=args.seed,
        ablate=tuple(dict.fromkeys(args.ablate)),
    )
