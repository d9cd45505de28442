"""The benchmarks stay out of the wheel: ``bench/`` sits at the repository root, which is
the ``grimoire`` package in the editable install, so only pyproject's explicit package
list keeps it out of a release. These tests read that list (and build a real wheel from
a copy of the sources) and fail when a benchmark module would ship."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from . import layering, packaging

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _benchmarks(modules: Mapping[str, Path]) -> list[str]:
    """The modules that are benchmark code, by name or by the file they come from."""
    return sorted(
        name
        for name, source in modules.items()
        if layering.is_bench(name) or source.parts[:1] == (layering.BENCH,)
    )


def test_the_wheel_holds_no_benchmark_module() -> None:
    modules = packaging.wheel_modules(PROJECT_ROOT, _pyproject())
    # Guard against a reader that finds nothing (wrong root, wrong table).
    assert {"grimoire", "grimoire.infra.cli", "grimoire.streams", "grimoire.topics"} <= set(modules)
    assert (PROJECT_ROOT / layering.BENCH / "__init__.py").is_file()
    assert _benchmarks(modules) == []


def test_the_wheel_reader_sees_a_listed_benchmark(tmp_path: Path) -> None:
    for relative in ("__init__.py", "infra/__init__.py", "infra/cli.py", "bench/__init__.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).touch()
    (tmp_path / "bench/recall.py").touch()
    setuptools: dict[str, Any] = {
        "package-dir": {"grimoire": ".", "grimoire.infra": "infra"},
        "packages": ["grimoire", "grimoire.infra"],
    }
    pyproject = {"tool": {"setuptools": setuptools}}
    clean = packaging.wheel_modules(tmp_path, pyproject)
    assert clean == {
        "grimoire": Path("__init__.py"),
        "grimoire.infra": Path("infra/__init__.py"),
        "grimoire.infra.cli": Path("infra/cli.py"),
    }
    assert _benchmarks(clean) == []
    setuptools["packages"] = [*setuptools["packages"], "grimoire.bench"]
    listed = packaging.wheel_modules(tmp_path, pyproject)
    assert _benchmarks(listed) == ["grimoire.bench", "grimoire.bench.recall"]
    assert listed["grimoire.bench.recall"] == Path("bench/recall.py")


def _copy_sources(destination: Path) -> None:
    """What a wheel is built from: pyproject, README, the root package and its folders,
    and bench/ (so the build proves it leaves the folder out, not that it was absent)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    for name in ("pyproject.toml", "README.md", "__init__.py"):
        shutil.copy2(PROJECT_ROOT / name, destination / name)
    package_dir = packaging.package_dir_table(_pyproject())
    for folder in {*package_dir.values(), layering.BENCH} - {"."}:
        shutil.copytree(PROJECT_ROOT / folder, destination / folder, ignore=ignore)


@pytest.mark.timeout(120)
def test_a_built_wheel_holds_no_benchmark_file(tmp_path: Path) -> None:
    """About two seconds: setuptools from this environment, no build isolation, no network."""
    if not all(importlib.util.find_spec(name) for name in ("pip", "setuptools")):
        pytest.skip("building a wheel needs pip and setuptools in this environment")
    source, out = tmp_path / "src", tmp_path / "dist"
    source.mkdir()
    _copy_sources(source)
    build = ["pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet"]
    subprocess.run(
        [sys.executable, "-m", *build, "-w", str(out), str(source)],
        check=True,
        timeout=110,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "grimoire/__init__.py" in names
    assert "grimoire/infra/cli/__init__.py" in names
    shipped = [
        name
        for name in names
        if name.startswith(("bench/", "grimoire/bench/", "grimoire/infra/bench/"))
    ]
    assert shipped == []
