"""The command line: what it says when it cannot start a job, and how the trust
commands (digest, audit verify) parse their arguments and answer."""

from __future__ import annotations

import orjson
import pytest

from grimoire.infra import cli
from grimoire.infra.cli import upkeep, worker
from grimoire.infra.settings import Settings


def test_digest_takes_several_agents_and_prints_one_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[list[str]] = []

    async def fake_digest(settings: object, agent_ids: list[str]) -> list[dict[str, object]]:
        asked.append(agent_ids)
        return [{"agent": agent, "digest": "ab" * 32, "counts": {}} for agent in agent_ids]

    monkeypatch.setattr(upkeep, "_digest", fake_digest)
    assert cli.main(["digest", "--agent", "a", "--agent", "b:c"]) == 0
    assert asked == [["a", "b:c"]]
    lines = capsys.readouterr().out.splitlines()
    assert [orjson.loads(line)["agent"] for line in lines] == ["a", "b:c"]


def test_digest_needs_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["digest"])
    assert exited.value.code == 2
    assert "--agent" in capsys.readouterr().err


@pytest.mark.parametrize(("verified", "code"), [(True, 0), (False, 1)])
def test_audit_verify_prints_the_verdict_and_fails_when_broken(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verified: bool,
    code: int,
) -> None:
    async def fake_verify(settings: object, agent_id: str) -> dict[str, object]:
        return {
            "agent": agent_id,
            "verified": verified,
            "records": 4,
            "first_broken": None if verified else 3,
            "reason": None if verified else "hash",
        }

    monkeypatch.setattr(upkeep, "_audit_verify", fake_verify)
    assert cli.main(["audit", "verify", "--agent", "golem-1"]) == code
    printed = orjson.loads(capsys.readouterr().out)
    assert printed["agent"] == "golem-1"
    assert printed["verified"] is verified
    assert printed["first_broken"] == (None if verified else 3)


@pytest.mark.parametrize(
    "argv", [["audit"], ["audit", "verify"], ["audit", "nope", "--agent", "a"]]
)
def test_audit_needs_a_known_action_and_an_agent(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2


def test_worker_roles_and_nice_reach_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """`grimoire worker --roles` overrides GRIMOIRE_WORKER_ROLES (a bad one is refused
    before anything starts), and GRIMOIRE_WORKER_NICE is applied before the app is
    built, so every thread the worker makes inherits it."""
    started: list[tuple[str, int]] = []
    niced: list[int] = []
    monkeypatch.setenv("GRIMOIRE_WORKER_NICE", "4")
    monkeypatch.setattr(worker.os, "nice", lambda n: niced.append(n) or n)

    def fake_run_worker(settings: Settings) -> int:
        started.append((settings.worker.roles, settings.worker.nice))
        return 0

    monkeypatch.setattr(worker, "run_worker", fake_run_worker)
    assert cli.main(["worker", "--roles", "recall"]) == 0
    assert cli.main(["worker"]) == 0
    assert started == [("recall", 4), ("ingest,recall", 4)]
    with pytest.raises(SystemExit):
        cli.main(["worker", "--roles", "reads"])
    assert len(started) == 2


def test_run_worker_nices_itself_before_building_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    order: list[str] = []
    monkeypatch.setattr(worker.os, "nice", lambda n: order.append(f"nice {n}") or n)

    async def no_topics(*_: object, **__: object) -> None:
        order.append("topics")

    monkeypatch.setattr(worker, "ensure_topics", no_topics)

    class Stop(Exception):
        pass

    def create_app(settings: Settings) -> None:
        order.append("app")
        raise Stop

    import grimoire.infra.app as app_module

    monkeypatch.setattr(app_module, "create_app", create_app)
    with pytest.raises(Stop):
        worker.run_worker(Settings(_env_file=None, worker_nice=3))
    assert order == ["nice 3", "topics", "app"]
    order.clear()
    with pytest.raises(Stop):
        worker.run_worker(Settings(_env_file=None))
    assert order == ["topics", "app"]
