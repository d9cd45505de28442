"""`python -m bench <kind>`: the benchmarks, run from the repository root (the make
targets `bench-*`). Settings come from GRIMOIRE_* env as for the `grimoire` command;
logs go to stderr and the result is one JSON line printed last on stdout."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from bench.locomo_options import add_arguments as add_locomo_arguments
from bench.locomo_options import options_from_args as locomo_options
from grimoire.infra.logs import configure_logging
from grimoire.infra.settings import Settings

PROG = "python -m bench"


def _add_world_arguments(parser: argparse.ArgumentParser, *, agents_help: str) -> None:
    """The generated world's knobs (`learning_env.build_environment`), which the
    learning and clade benches share."""
    parser.add_argument("--agents", type=int, default=4, help=agents_help)
    parser.add_argument("--situations", type=int, default=3)
    parser.add_argument("--actions", type=int, default=4, help="candidate actions (2..4)")
    parser.add_argument("--runs", type=int, default=60, help="runs per agent")
    parser.add_argument("--seed", type=int, default=7)


def _picked(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The parsed options `names` (their `dest`s), as keywords of the same names: each
    bench's options and runner take them by the flags' names."""
    return {name: getattr(args, name) for name in names}


def _world(args: argparse.Namespace) -> dict[str, Any]:
    """What `_add_world_arguments` read, as the options' fields of the same names."""
    return _picked(args, "agents", "situations", "actions", "runs", "seed")


def _sizes(args: argparse.Namespace) -> tuple[int, ...]:
    return tuple(int(size) for size in args.sizes.split(","))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="benchmarks and evaluation (JSON on the last line)"
    )
    bench_kind = parser.add_subparsers(dest="bench", required=True)
    ingest = bench_kind.add_parser("ingest", help="the real write path on a generated stream")
    ingest.add_argument("--events", type=int, default=20_000)
    ingest.add_argument("--agents", type=int, default=20)
    ingest.add_argument(
        "--mix", choices=["both", "repetitive", "distinct"], default="both", help="stream(s) to run"
    )
    ingest.add_argument(
        "--profile",
        choices=["both", "memory", "durable"],
        default="both",
        help="memory storage without key checks, the durable stack with them (all-distinct), "
        "or both in one run",
    )
    recall_bench = bench_kind.add_parser("recall", help="recall latency at 10k and 100k memories")
    recall_bench.add_argument("--sizes", default="10000,100000", help="comma-separated sizes")
    recall_bench.add_argument("--queries", type=int, default=200, help="timed queries per size")
    maint_bench = bench_kind.add_parser(
        "maintenance", help="one due maintenance pass at 10k and 100k memories"
    )
    maint_bench.add_argument("--sizes", default="10000,100000", help="comma-separated sizes")
    maint_bench.add_argument("--fresh", type=int, default=500, help="new memories per pass")
    faults = bench_kind.add_parser(
        "faults",
        help="every input kind, SIGKILLs of workers, Redis and the broker, hostile input, "
        "against a clean run",
    )
    faults.add_argument("--events", type=int, default=20_000)
    faults.add_argument("--agents", type=int, default=20)
    faults.add_argument("--kills", type=int, default=3, help="worker SIGKILLs")
    faults.add_argument("--fuzz", type=int, default=10_000, help="hostile messages")
    faults.add_argument("--seed", type=int, default=21)
    faults.add_argument(
        "--without", action="append", default=[], help="leave a fuzz kind out (repeatable)"
    )
    learning = bench_kind.add_parser(
        "learning", help="agents learning from run outcomes: success-first recall vs no learning"
    )
    _add_world_arguments(
        learning,
        agents_help="learning agents (each with two ranking shadows: learning off, outcome "
        "prior off)",
    )
    learning.add_argument("--warmup", type=int, default=3, help="unscored visits per situation")
    clade = bench_kind.add_parser(
        "clade",
        help="sibling agents sharing evidence in a clade against the same agents alone: "
        "regret per agent; no heuristic from clade evidence alone",
    )
    _add_world_arguments(clade, agents_help="sibling slots (>= 2 to share)")
    clade.add_argument(
        "--maintenance",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the worker's block-timer maintenance (the curator) during the bench",
    )
    clade.add_argument(
        "--block-interval", type=float, default=4.0, help="the worker's block timer, seconds"
    )
    locomo = bench_kind.add_parser("locomo", help="LoCoMo evidence retrieval vs BM25 and dense")
    add_locomo_arguments(locomo)
    lexicon_bench = bench_kind.add_parser(
        "lexicon", help="plain BM25 on LoCoMo with the lexical form's stems and time words on/off"
    )
    lexicon_bench.add_argument("--data", default=None, help="a LoCoMo-format JSON file")
    lexicon_bench.add_argument("--conversations", default="", help="comma-separated sample ids")
    fold = bench_kind.add_parser(
        "fold", help="the apply loop alone: CPU per folded event, Redis requests per batch"
    )
    fold.add_argument("--agents", type=int, default=600)
    fold.add_argument("--events", type=int, default=6_000)
    fold.add_argument("--batch", type=int, default=256, help="journal records per apply call")
    fleet = bench_kind.add_parser("fleet", help="N agents on the 12 s block cadence (lag, recall)")
    fleet.add_argument("--agents", type=int, default=1_000)
    fleet.add_argument("--blocks", type=int, default=10)
    fleet.add_argument("--speed", type=float, default=1.0, help="accelerated clock: 12/S s a block")
    fleet.add_argument("--workers", type=int, default=1, help="workers that fold the journal")
    fleet.add_argument(
        "--recall-workers",
        type=int,
        default=1,
        help="workers that serve recalls alone (0: the --workers serve them too)",
    )
    fleet.add_argument(
        "--recall-fetch-wait-ms",
        type=int,
        default=10,
        help="the recall workers' fetch wait (default: GRIMOIRE_CONSUMER_FETCH_MAX_WAIT_MS)",
    )
    fleet.add_argument(
        "--ingest-nice",
        type=int,
        default=5,
        help="with recall workers: the folding workers' nice value (GRIMOIRE_WORKER_NICE)",
    )
    fleet.add_argument("--search", action=argparse.BooleanOptionalAction, default=True)
    fleet.add_argument("--search-blocks", type=int, default=4)
    fleet.add_argument("--search-cap-s", type=float, default=900.0)
    return parser


def _print_result(result: Any) -> int:
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Run the benchmark ``args.bench`` (each imported only when asked for)."""
    if args.bench == "ingest":
        from bench.ingest import run_ingest_bench

        mixes = ("repetitive", "distinct") if args.mix == "both" else (args.mix,)
        profiles = ("memory", "durable") if args.profile == "both" else (args.profile,)
        return _print_result(
            run_ingest_bench(
                settings, events=args.events, agents=args.agents, mixes=mixes, profiles=profiles
            )
        )
    if args.bench == "recall":
        from bench.recall import run_recall_bench

        return _print_result(run_recall_bench(settings, sizes=_sizes(args), queries=args.queries))
    if args.bench == "maintenance":
        from bench.maintenance import run_maintenance_bench

        return _print_result(run_maintenance_bench(settings, sizes=_sizes(args), fresh=args.fresh))
    if args.bench == "faults":
        from bench.faults import run_faults_bench

        return _print_result(
            run_faults_bench(
                settings,
                **_picked(args, "events", "agents", "kills", "fuzz", "seed"),
                without=tuple(args.without),
            )
        )
    if args.bench == "learning":
        from bench.learning import LearningOptions, run_learning_bench

        options = LearningOptions(**_world(args), warmup=args.warmup)
        return _print_result(run_learning_bench(settings, options))
    if args.bench == "clade":
        from bench.clade import CladeOptions, exit_code, run_clade_bench

        clade_options = CladeOptions(
            **_world(args), maintenance=args.maintenance, block_interval_s=args.block_interval
        )
        report = run_clade_bench(settings, clade_options)
        _print_result(report)
        return exit_code(report)
    if args.bench == "locomo":
        from bench.locomo import default_data_path, run_locomo_bench

        try:
            options = locomo_options(args)
        except ValueError as error:
            sys.stderr.write(f"{PROG} locomo: {error}\n")
            return 2
        data = Path(args.data) if args.data else default_data_path()
        if not data.is_file():
            sys.stderr.write(
                f"{PROG} locomo: no LoCoMo file at {data}; pass --data FILE "
                '(make bench-locomo LOCOMO_ARGS="--data FILE")\n'
            )
            return 2
        wanted = tuple(c for c in args.conversations.split(",") if c)
        return _print_result(
            run_locomo_bench(settings, data_path=data, conversation_ids=wanted, options=options)
        )
    if args.bench == "lexicon":
        from bench.lexicon import run_lexicon_bench
        from bench.locomo import default_data_path as locomo_data_path

        source = Path(args.data) if args.data else locomo_data_path()
        if not source.is_file():
            sys.stderr.write(f"{PROG} lexicon: no LoCoMo file at {source}; pass --data FILE\n")
            return 2
        chosen = tuple(c for c in args.conversations.split(",") if c)
        return _print_result(run_lexicon_bench(source, chosen))
    if args.bench == "fold":
        from bench.fold import FoldOptions, run_fold_bench

        options_fold = FoldOptions(**_picked(args, "agents", "events", "batch"))
        return _print_result(run_fold_bench(settings, options_fold))
    if args.bench == "fleet":
        from bench.fleet import FleetOptions, run_fleet_bench

        fleet_options = FleetOptions(
            **_picked(args, "agents", "blocks", "speed", "workers", "recall_workers"),
            **_picked(args, "ingest_nice", "search", "search_blocks", "search_cap_s"),
            recall_fetch_max_wait_ms=args.recall_fetch_wait_ms,
        )
        return _print_result(run_fleet_bench(settings, fleet_options))
    return 2


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings()
    configure_logging(settings.worker.log_level)
    return run(settings, args)


if __name__ == "__main__":
    raise SystemExit(main())
