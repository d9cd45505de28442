"""How `python -m bench locomo` reports its scores: folds of conversations (tune on
some, report on the others), figures per category, percentile bootstrap intervals,
and the human-readable table printed before the JSON line. Pure: no I/O, no clock.

Folds. Each conversation's id is hashed (SHA-256 of its UTF-8 bytes), the ids are
ordered by that hash, and fold ``rank mod k`` takes the id at each rank: balanced to
one conversation, independent of the file's order, and keyed to nothing but the ids.
The folds are those of every conversation in the data file, so running a subset
(``--conversations``) never moves a conversation to another fold.

Intervals. Percentile bootstrap over questions (categories 1-4), resampled with
replacement within the set evaluated (all conversations, or the report folds), from a
fixed seed: the same questions give the same interval, to the last digit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.locomo_data import CATEGORIES
from bench.retrieval_metrics import HEADLINE_CATEGORIES, Judged, recall_at_k, score

DEFAULT_FOLDS = 2
DEFAULT_REPORT_FOLD = 0
DEFAULT_RESAMPLES = 1_000
DEFAULT_SEED = 0
CONFIDENCE = 0.95
FOLD_METHOD = "conversation ids ordered by SHA-256, fold = rank mod k"
BOOTSTRAP_METHOD = "percentile bootstrap over questions (categories 1-4), within each set"
OVERALL = "overall"
METRICS = ("R@5", "R@10", "NDCG@10")


@dataclass(frozen=True, slots=True)
class FoldSplit:
    """Which fold each conversation is in; `report_fold` is reported on, the rest tuned on."""

    k: int
    report_fold: int
    assignment: Mapping[str, int]

    @property
    def report(self) -> tuple[str, ...]:
        return tuple(sorted(c for c, f in self.assignment.items() if f == self.report_fold))

    @property
    def tune(self) -> tuple[str, ...]:
        return tuple(sorted(c for c, f in self.assignment.items() if f != self.report_fold))

    def describe(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "method": FOLD_METHOD,
            "report_fold": self.report_fold,
            "tune_folds": [f for f in range(self.k) if f != self.report_fold],
            "assignment": dict(sorted(self.assignment.items())),
            "tune": list(self.tune),
            "report": list(self.report),
        }


def _hash(conversation_id: str) -> str:
    return hashlib.sha256(conversation_id.encode()).hexdigest()


def assign_folds(conversation_ids: Iterable[str], k: int = DEFAULT_FOLDS) -> dict[str, int]:
    """Fold of each id (0..k-1): ids ordered by their hash, dealt out in turn."""
    if k < 1:
        raise ValueError("k must be at least 1")
    ordered = sorted(set(conversation_ids), key=lambda c: (_hash(c), c))
    return {conversation: rank % k for rank, conversation in enumerate(ordered)}


def split_folds(
    conversation_ids: Iterable[str],
    k: int = DEFAULT_FOLDS,
    report_fold: int = DEFAULT_REPORT_FOLD,
) -> FoldSplit:
    if k < 2:
        raise ValueError("k must be at least 2: a fold to tune on and one to report on")
    if not 0 <= report_fold < k:
        raise ValueError(f"report_fold must be within 0..{k - 1}")
    return FoldSplit(k, report_fold, assign_folds(conversation_ids, k))


def pick(by_conversation: Mapping[str, Sequence[Judged]], wanted: Iterable[str]) -> list[Judged]:
    """The questions of the wanted conversations, in conversation order."""
    keep = set(wanted)
    return [j for conversation, js in by_conversation.items() if conversation in keep for j in js]


def per_category(judged: Sequence[Judged]) -> dict[str, dict[str, float]]:
    """R@5, R@10, NDCG@10 and n for categories 1-4 by name, and `overall` (1-4)."""
    scored = score(judged)
    by_category: Mapping[str, dict[str, float]] = scored["by_category"]  # type: ignore[assignment]
    empty = {"R@5": 0.0, "R@10": 0.0, "NDCG@10": 0.0, "n": 0}
    out = {CATEGORIES[c]: dict(by_category.get(str(c), empty)) for c in HEADLINE_CATEGORIES}
    out[OVERALL] = dict(scored["overall_no_adv"])  # type: ignore[call-overload]
    return out


def recall_values(judged: Sequence[Judged], k: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Each headline question's recall@k, in order (the bootstrap's sample)."""
    return np.array(
        [recall_at_k(j.ranked, j.relevant, k) for j in judged if j.category in HEADLINE_CATEGORIES],
        dtype=np.float64,
    )


def bootstrap_interval(
    values: Sequence[float] | np.ndarray[Any, Any],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> dict[str, float | None]:
    """{"point", "low", "high"} of the mean: percentile bootstrap, `resamples` draws of
    len(values) with replacement from a PCG64 generator seeded with `seed`. Samples
    of one length and one seed draw the same indices, so intervals of two metrics
    over the same questions are resampled alike. An empty sample has no interval."""
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be within (0, 1)")
    sample = np.asarray(values, dtype=np.float64)
    if sample.size == 0:
        return {"point": None, "low": None, "high": None}
    rng = np.random.Generator(np.random.PCG64(seed))
    draws = rng.integers(0, sample.size, size=(resamples, sample.size))
    means = sample[draws].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return {
        "point": round(float(sample.mean()), 4),
        "low": round(float(low), 4),
        "high": round(float(high), 4),
    }


def bootstrap_set(
    judged: Sequence[Judged],
    baseline: Sequence[Judged],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, dict[str, float | None]]:
    """Intervals of R@5 and R@10, and of the paired difference in R@5 against a
    baseline asked the same questions in the same order."""
    r5, r10 = recall_values(judged, 5), recall_values(judged, 10)
    base5 = recall_values(baseline, 5)
    if base5.shape != r5.shape:
        raise ValueError("the baseline must be asked the same questions")
    kw = {"resamples": resamples, "seed": seed}
    return {
        "R@5": bootstrap_interval(r5, **kw),
        "R@10": bootstrap_interval(r10, **kw),
        "R@5_minus_bm25": bootstrap_interval(r5 - base5, **kw),
    }


def measure(
    judged: Mapping[str, Sequence[Judged]],
    baselines: Mapping[str, Mapping[str, Sequence[Judged]]],
    folds: FoldSplit,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """The keys `per_category`, `folds`, `report_folds`, `tune_folds` and `bootstrap`
    of one run. `judged` and each baseline (`bm25` among them) map every conversation
    run to its questions, in one order."""
    run = list(judged)
    report = [c for c in run if c in set(folds.report)]
    tune = [c for c in run if c in set(folds.tune)]

    def figures(conversations: list[str]) -> dict[str, Any]:
        return {
            "conversations": conversations,
            "per_category": per_category(pick(judged, conversations)),
            "baselines": {
                name: per_category(pick(by_conversation, conversations))
                for name, by_conversation in baselines.items()
            },
        }

    def intervals(conversations: list[str]) -> dict[str, dict[str, float | None]]:
        return bootstrap_set(
            pick(judged, conversations),
            pick(baselines["bm25"], conversations),
            resamples=resamples,
            seed=seed,
        )

    return {
        "per_category": per_category(pick(judged, run)),
        "folds": folds.describe(),
        "report_folds": {"folds": [folds.report_fold], **figures(report)},
        "tune_folds": {"folds": folds.describe()["tune_folds"], **figures(tune)},
        "bootstrap": {
            "resamples": resamples,
            "seed": seed,
            "confidence": CONFIDENCE,
            "method": BOOTSTRAP_METHOD,
            "all": intervals(run),
            "report": intervals(report),
        },
    }


def _fmt(value: object) -> str:
    return "-" if value is None else f"{value:.3f}"


def _interval(entry: Mapping[str, float | None]) -> str:
    return f"{_fmt(entry['point'])} [{_fmt(entry['low'])}, {_fmt(entry['high'])}]"


def _table_row(label: str, everything: Mapping[str, Any], held: Mapping[str, Any]) -> str:
    """One row of the summary table: the metrics over all conversations, then over
    the report fold."""
    return (
        f"| {label} | {everything['n']} | "
        + " | ".join(_fmt(everything[m]) for m in METRICS)
        + f" | {held['n']} | "
        + " | ".join(_fmt(held[m]) for m in METRICS)
        + " |"
    )


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    """The human-readable report printed before the JSON line."""
    folds, report = result["folds"], result["report_folds"]
    boot = result["bootstrap"]
    ablated = result.get("ablated") or {}
    lines = [
        f"LoCoMo {result['data']}: {len(result['conversations'])} conversations, "
        f"{result['per_category'][OVERALL]['n']} questions in categories 1-4",
        f"folds: k={folds['k']} ({folds['method']}); "
        f"tune on fold(s) {','.join(map(str, folds['tune_folds']))}: "
        f"{', '.join(folds['tune']) or '-'}; "
        f"report on fold {folds['report_fold']}: {', '.join(folds['report']) or '-'}",
        "ablated: "
        + (
            "; ".join(
                f"{name} ({', '.join(f'{k}={v}' for k, v in changes.items())})"
                for name, changes in ablated.items()
            )
            or "nothing (every mechanism on)"
        ),
        "",
        f"| category | all: n | R@5 | R@10 | NDCG@10 | report fold {folds['report_fold']}: n "
        "| R@5 | R@10 | NDCG@10 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, everything in result["per_category"].items():
        lines.append(_table_row(name, everything, report["per_category"][name]))
    for label, name in (("baseline BM25", "bm25"), ("baseline dense", "dense")):
        everything = result["baselines"][name]["overall_no_adv"]
        lines.append(
            _table_row(f"{label}, overall", everything, report["baselines"][name][OVERALL])
        )
    tuned = result["tune_folds"]["per_category"][OVERALL]
    lines.append("")
    lines.append(
        f"tune fold(s) {','.join(map(str, folds['tune_folds']))}, overall: n {tuned['n']}, "
        + ", ".join(f"{m} {_fmt(tuned[m])}" for m in METRICS)
    )
    lines.append(
        f"bootstrap {round(CONFIDENCE * 100)} % intervals ({boot['resamples']} resamples, "
        f"seed {boot['seed']}, {boot['method']}):"
    )
    for label, key in (("all", "all"), (f"report fold {folds['report_fold']}", "report")):
        entry = boot[key]
        lines.append(
            f"  {label}: R@5 {_interval(entry['R@5'])}, R@10 {_interval(entry['R@10'])}, "
            f"R@5 minus BM25 {_interval(entry['R@5_minus_bm25'])}"
        )
    return lines
