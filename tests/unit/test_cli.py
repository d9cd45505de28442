"""The command line: what it says when it cannot start a job."""

from __future__ import annotations

from pathlib import Path

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
