"""Checks that the explicit setuptools package list matches the folders on disk.

pyproject.toml lists every package by hand (``[tool.setuptools] packages``) because
the folders install under different names (``streams/`` -> ``grimoire.streams``).
A sub-package missing from that list, or a folder of modules without an
``__init__.py``, works from the source checkout but silently vanishes from a wheel;
these pure functions find both before a release does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path


def _setuptools_table(pyproject: Mapping[str, object]) -> Mapping[str, object]:
    tool = pyproject.get("tool")
    setuptools = tool.get("setuptools") if isinstance(tool, dict) else None
    if not isinstance(setuptools, dict):
        raise ValueError("pyproject.toml has no [tool.setuptools] table")
    return setuptools


def package_dirs_from_pyproject(pyproject: Mapping[str, object]) -> dict[str, str]:
    """``{folder: package}`` for the layer folders of ``[tool.setuptools] package-dir``.

    The root entry (``"grimoire" = "."``) is left out: the root holds only
    ``__init__.py`` and non-package folders such as ``tests/``.
    """
    package_dir = _setuptools_table(pyproject).get("package-dir")
    if not isinstance(package_dir, dict):
        raise ValueError("[tool.setuptools] has no package-dir table")
    return {str(folder): str(package) for package, folder in package_dir.items() if folder != "."}


def listed_packages(pyproject: Mapping[str, object]) -> list[str]:
    """The explicit ``[tool.setuptools] packages`` list (a ``find:`` directive is an error)."""
    packages = _setuptools_table(pyproject).get("packages")
    if not isinstance(packages, list):
        raise ValueError("[tool.setuptools] packages must be an explicit list")
    return [str(package) for package in packages]


def _skipped(relative: Path) -> bool:
    return any(part == "__pycache__" or part.startswith(".") for part in relative.parts)


def package_problems(
    root: Path, package_dirs: Mapping[str, str], listed: Iterable[str]
) -> list[str]:
    """Every way the folders under ``package_dirs`` and the ``listed`` packages disagree.

    Reports: a folder holding ``.py`` files (directly or deeper) but no
    ``__init__.py`` (its modules would be left out of the wheel, or become an
    accidental namespace package); a
    package on disk missing from the list; a listed package with no folder or no
    ``__init__.py`` behind it (a stale entry after a move).
    """
    listed_set = set(listed)
    problems: list[str] = []
    on_disk: set[str] = set()
    for folder, package in sorted(package_dirs.items()):
        base = root / folder
        if not base.is_dir():
            problems.append(f"{folder}/: mapped to {package} but missing")
            continue
        directories = [base, *sorted(p for p in base.rglob("*") if p.is_dir())]
        for directory in directories:
            relative = directory.relative_to(root)
            if _skipped(relative):
                continue
            name = ".".join([package, *directory.relative_to(base).parts])
            has_init = (directory / "__init__.py").is_file()
            if has_init:
                on_disk.add(name)
                if name not in listed_set:
                    problems.append(
                        f"{relative}/: package {name} is not listed in [tool.setuptools] packages"
                    )
            elif any(directory.rglob("*.py")):
                problems.append(f"{relative}/: holds .py files but has no __init__.py")
    mapped_packages = set(package_dirs.values())
    for name in sorted(listed_set - on_disk):
        if any(name == p or name.startswith(p + ".") for p in mapped_packages):
            problems.append(f"{name}: listed in [tool.setuptools] packages but not on disk")
    return problems
