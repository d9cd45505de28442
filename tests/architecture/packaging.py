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


def package_dir_table(pyproject: Mapping[str, object]) -> dict[str, str]:
    """``{package: folder}`` of ``[tool.setuptools] package-dir``, the root entry included."""
    package_dir = _setuptools_table(pyproject).get("package-dir")
    if not isinstance(package_dir, dict):
        raise ValueError("[tool.setuptools] has no package-dir table")
    return {str(package): str(folder) for package, folder in package_dir.items()}


def package_folder(package: str, package_dir: Mapping[str, str]) -> Path:
    """The folder setuptools reads ``package`` from: the longest mapped prefix, then the
    rest of the dotted name as sub-folders (a package with no mapped prefix sits under
    the root, as setuptools' ``""`` default)."""
    parts = package.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        if prefix in package_dir:
            return Path(package_dir[prefix], *parts[cut:])
    return Path(package_dir.get("", "."), *parts)


def wheel_modules(root: Path, pyproject: Mapping[str, object]) -> dict[str, Path]:
    """``{module: source file relative to root}`` for every module a wheel built from the
    explicit package list holds: each listed package's ``.py`` files, not its sub-folders
    (setuptools takes only listed packages; an unlisted folder stays out)."""
    package_dir = package_dir_table(pyproject)
    modules: dict[str, Path] = {}
    for package in listed_packages(pyproject):
        folder = package_folder(package, package_dir)
        for path in sorted((root / folder).glob("*.py")):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path.relative_to(root)
    return modules
