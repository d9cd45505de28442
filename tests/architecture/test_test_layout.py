"""The unit tests mirror the source tree: a test of ``streams/recall/`` sits in
``tests/unit/streams/recall/``, a benchmark test in ``tests/unit/bench/``.

So no test module sits directly in ``tests/unit/``,
every folder there is a layer, every folder under a layer names a package of that layer
in the source tree, and no folder there has an ``__init__.py`` (one would make pytest
name its modules from that folder, ``bench.test_...``, and shadow the real top-level
package of that name; see tests/__init__.py).

The first test checks the project itself; the rest build fake trees in ``tmp_path`` and
show each rule catching its violation.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
UNIT = Path("tests", "unit")

#: The source layers the unit tests mirror (``bench`` is the top-level benchmark package).
LAYERS = ("streams", "agents", "tables", "topics", "infra", "bench")

#: pytest's default ``python_files``: what it would collect as a test module.
TEST_MODULE_PATTERNS = ("test_*.py", "*_test.py")
SKIPPED_DIRS = frozenset({"__pycache__"})


def _folders(base: Path) -> Iterable[Path]:
    for path in sorted(base.rglob("*")):
        if path.is_dir() and not SKIPPED_DIRS & set(path.relative_to(base).parts):
            yield path


def layout_problems(root: Path) -> list[str]:
    """Every way ``root``'s tests/unit/ departs from the source tree's layout."""
    unit = root / UNIT
    problems: list[str] = []
    for path in sorted(unit.iterdir()):
        name = path.name
        if path.is_file():
            is_test = any(fnmatch.fnmatch(name, p) for p in TEST_MODULE_PATTERNS)
            if is_test:
                problems.append(
                    f"{UNIT / name}: a test module directly in {UNIT}/; move it to the "
                    f"folder of what it tests ({UNIT}/<layer>/<subpackage>/)"
                )
        elif path.is_dir() and name not in SKIPPED_DIRS and name not in LAYERS:
            problems.append(f"{UNIT / name}/: not a layer folder (one of {', '.join(LAYERS)})")
    for folder in _folders(unit):
        relative = folder.relative_to(unit)
        if (folder / "__init__.py").exists():
            problems.append(
                f"{UNIT / relative}/__init__.py: no __init__.py under {UNIT}/ (pytest would "
                "name the modules below from that folder; see tests/__init__.py)"
            )
        if relative.parts[0] not in LAYERS or len(relative.parts) == 1:
            continue
        source = root / relative
        if not (source / "__init__.py").is_file():
            problems.append(
                f"{UNIT / relative}/: names {relative}/, which is not a package of the source tree"
            )
    for layer in LAYERS:
        if (unit / layer).is_dir() and not (root / layer / "__init__.py").is_file():
            problems.append(f"{UNIT / layer}/: the source tree has no {layer}/ package")
    return problems


def _tree(root: Path, files: Iterable[str]) -> Path:
    """Empty files at the given paths under ``root``."""
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return root


SOURCE = (
    "streams/__init__.py",
    "streams/recall/__init__.py",
    "streams/recall/walk/__init__.py",
    "infra/__init__.py",
    "infra/http/__init__.py",
    "infra/cli/__init__.py",
    "infra/http/static/inspector.js",  # a folder of the tree, not a package
    "bench/__init__.py",
)


# --- the real tree -------------------------------------------------------------------


def test_the_unit_tests_mirror_the_source_tree() -> None:
    assert layout_problems(PROJECT_ROOT) == []


def test_a_mirrored_tree_passes(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        (
            *SOURCE,
            "tests/unit/streams/recall/test_flow.py",
            "tests/unit/streams/recall/walk/test_walk.py",
            "tests/unit/streams/test_layer_wide.py",
            "tests/unit/infra/http/conftest.py",
            "tests/unit/bench/test_fleet.py",
            "tests/unit/infra/cli/test_cli.py",
        ),
    )
    assert layout_problems(root) == []


def test_a_test_module_directly_in_unit_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, (*SOURCE, "tests/unit/test_flow.py", "tests/unit/flow_test.py"))
    problems = layout_problems(root)
    assert [p.split(":")[0] for p in problems] == [
        "tests/unit/flow_test.py",
        "tests/unit/test_flow.py",
    ]


def test_a_folder_naming_no_subpackage_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        (
            *SOURCE,
            "tests/unit/streams/recal/test_flow.py",  # a typo
            "tests/unit/streams/recall/lanes/test_bm25.py",  # not (or no longer) a package
            "tests/unit/infra/http/static/test_assets.py",  # a folder, not a package
            "tests/unit/bench/fleet/test_plan.py",
        ),
    )
    problems = layout_problems(root)
    assert [p.split(":")[0] for p in problems] == [
        "tests/unit/bench/fleet/",
        "tests/unit/infra/http/static/",
        "tests/unit/streams/recal/",
        "tests/unit/streams/recall/lanes/",
    ]


def test_a_folder_outside_the_layers_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, (*SOURCE, "tests/unit/handlers/test_ingest.py"))
    problems = layout_problems(root)
    assert [p.split(":")[0] for p in problems] == ["tests/unit/handlers/"]


def test_a_layer_missing_from_the_source_tree_is_reported(tmp_path: Path) -> None:
    root = _tree(tmp_path, (*SOURCE, "tests/unit/topics/test_client.py"))
    problems = layout_problems(root)
    assert [p.split(":")[0] for p in problems] == ["tests/unit/topics/"]


def test_an_init_under_unit_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        (*SOURCE, "tests/unit/bench/__init__.py", "tests/unit/bench/test_fleet.py"),
    )
    problems = layout_problems(root)
    assert [p.split(":")[0] for p in problems] == ["tests/unit/bench/__init__.py"]
