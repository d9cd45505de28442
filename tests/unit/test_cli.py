"""The command line: what it says when it cannot start a job, and how the trust
commands (digest, audit verify) parse their arguments and answer."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from grimoire.infra import cli


def test_bench_locomo_names_a_missing_data_file_instead_of_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "locomo.json"
    assert cli.main(["bench", "locomo", "--data", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"no LoCoMo file at {missing}" in err
    assert "--data FILE" in err


def test_digest_takes_several_agents_and_prints_one_line_each(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked: list[list[str]] = []

    async def fake_digest(settings: object, agent_ids: list[str]) -> list[dict[str, object]]:
        asked.append(agent_ids)
        return [{"agent": agent, "digest": "ab" * 32, "counts": {}} for agent in agent_ids]

    monkeypatch.setattr(cli, "_digest", fake_digest)
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

    monkeypatch.setattr(cli, "_audit_verify", fake_verify)
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
