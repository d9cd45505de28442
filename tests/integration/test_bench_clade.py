"""`bench clade` at a small size, through the real broker, Redis and a worker with
its block-timer maintenance on: four sibling slots (a clade member and a lone agent
each), two situations, six runs. What is checked is that every `configure` was
applied, the report's shape and counts, that the siblings received their shares
and that the heuristics check ran over every sibling, not the regret target."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.clade import ARMS, CLADE_CONFIG, TARGET_RATIO, CladeOptions, exit_code, run_clade
from bench.learning import GRIMOIRE_CONFIG
from grimoire.infra.settings import Settings

pytestmark = pytest.mark.integration

AGENTS, SITUATIONS, RUNS = 4, 2, 6


async def test_a_small_clade_bench_runs_end_to_end_and_checks_the_siblings_heuristics(
    settings: Settings, tmp_path: Path
) -> None:
    options = CladeOptions(
        agents=AGENTS,
        situations=SITUATIONS,
        runs=RUNS,
        seed=3,
        block_interval_s=1.0,
        curator_timeout_s=60.0,
    )

    report = await run_clade(settings, options, log_dir=tmp_path)

    siblings = [f"sib-{slot}" for slot in range(AGENTS)]
    solos = [f"solo-{slot}" for slot in range(AGENTS)]
    assert report["configured"] == {
        **{agent: dict.fromkeys(CLADE_CONFIG, "applied") for agent in siblings},
        **{agent: dict.fromkeys(GRIMOIRE_CONFIG, "applied") for agent in solos},
    }
    assert report["configure_refused"] == []
    assert report["clade"]["members"] == siblings

    # Both pipeline arms and the reference arms, each over every slot's runs.
    assert set(report["arms"]) == {*ARMS, "oracle", "thompson", "uniform"}
    for arm, figures in report["arms"].items():
        assert figures["runs"] == AGENTS * RUNS, arm
        assert figures["regret_per_agent"] == pytest.approx(figures["regret"] / AGENTS, abs=1e-3)
        assert 0.0 <= figures["late_success_rate"] <= 1.0, arm
    assert report["regret_per_agent"]["oracle"] == 0.0
    target = report["target"]
    assert (target["max"], set(target)) == (
        TARGET_RATIO,
        {"clade_on_over_clade_off_regret", "max", "met"},
    )
    if target["clade_on_over_clade_off_regret"] is not None:
        assert target["met"] is (target["clade_on_over_clade_off_regret"] <= TARGET_RATIO)

    # Every episode of every run (3 per run, both arms) was decided.
    decided = sum(
        count
        for kind, count in report["decisions"].items()
        if kind.rsplit("/", 1)[-1] in ("trigger", "action", "outcome")
    )
    assert decided == 2 * AGENTS * RUNS * 3

    # The siblings' run ends reached the others: each round waited for its shares.
    shares = report["shares"]
    assert shares["wait"] == "witnessed", shares
    assert shares["expected_per_round"] == AGENTS * (AGENTS - 1)
    assert all(shares["received_per_sibling"][agent] > 0 for agent in siblings), shares
    # ... and at the end every sibling holds a copy of every other's evidence entries.
    copies = shares["copies_at_the_end"]
    assert copies["evidence_entries"] > 0
    assert copies["copies_found"] == copies["copies_expected"], copies

    # The check read every sibling, with the curator running during the bench.
    check = report["heuristics_check"]
    assert check["maintenance"] is True
    assert set(check["per_agent"]) == set(siblings)
    assert all(check["per_agent"][agent]["memories"] > 0 for agent in siblings)
    assert all(check["curator_cycles"][agent] > 0 for agent in siblings), check
    assert check["ok"] is (not check["offenders"])
    assert exit_code(report) == (0 if check["ok"] else 1)
    assert check["ok"], check["offenders"]
