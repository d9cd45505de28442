"""Layering is a test: the real tree must obey the import rules, and the checker must bite.

The first tests check the project itself (so ``make test`` fails on a bad import or a
package missing from the wheel); the rest build small fake trees in ``tmp_path`` and
assert that each kind of violation is reported with the right file and line. Without
those, a checker that silently found nothing would pass just as well as a clean tree.
"""

from __future__ import annotations

import textwrap
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import layering, packaging

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _pyproject() -> dict[str, Any]:
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    """Write a fake source tree; every folder gets an ``__init__.py`` unless listed."""
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    for folder in layering.DEFAULT_PACKAGE_DIRS:
        base = root / folder
        if not base.is_dir():
            continue
        for directory in [base, *(p for p in base.rglob("*") if p.is_dir())]:
            (directory / "__init__.py").touch(exist_ok=True)


def _line_of(root: Path, relative: str, needle: str) -> int:
    """1-based line of the first line of ``relative`` containing ``needle``."""
    lines = (root / relative).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def _found(violations: list[layering.Violation]) -> set[tuple[Path, int, str, str]]:
    return {(v.file, v.line, v.importer, v.imported) for v in violations}


# --- the real tree -------------------------------------------------------------------


def test_package_dirs_match_pyproject() -> None:
    """The checker's folder mapping is the one setuptools installs with."""
    assert packaging.package_dirs_from_pyproject(_pyproject()) == dict(
        layering.DEFAULT_PACKAGE_DIRS
    )


def test_real_tree_has_no_layering_violations() -> None:
    """``streams`` stays pure, lower layers never import higher ones, bench stays out."""
    package_dirs = packaging.package_dirs_from_pyproject(_pyproject())
    modules = {m.module for m in layering.iter_source_modules(PROJECT_ROOT, package_dirs)}
    assert layering.ROOT_PACKAGE in modules, "the root __init__.py is a product module too"
    assert not any(layering.is_bench(module) for module in modules)
    refs = layering.collect_tree_imports(PROJECT_ROOT, package_dirs)
    # Guard against a checker that scans nothing (wrong root, wrong mapping).
    assert {ref.importer.split(".")[1] for ref in refs if "." in ref.importer} == {
        "streams",
        "tables",
        "topics",
        "agents",
        "infra",
    }
    violations = layering.check_imports(refs)
    assert not violations, (
        f"{len(violations)} layering violation(s):\n"
        + layering.format_violations(violations, PROJECT_ROOT)
    )


def test_every_port_is_declared_in_its_layers_ports_home() -> None:
    """One home per kind of thing: a layer's Protocols live in ``<layer>.ports``."""
    package_dirs = packaging.package_dirs_from_pyproject(_pyproject())
    misplaced = layering.misplaced_ports(PROJECT_ROOT, package_dirs)
    assert not misplaced, (
        f"{len(misplaced)} port(s) outside their ports home:\n"
        + layering.format_violations(misplaced, PROJECT_ROOT)
    )


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    """A sub-package missing from pyproject's explicit list is missing from the wheel."""
    pyproject = _pyproject()
    problems = packaging.package_problems(
        PROJECT_ROOT,
        packaging.package_dirs_from_pyproject(pyproject),
        packaging.listed_packages(pyproject),
    )
    assert not problems, "\n".join(problems)


# --- the checker catches violations ----------------------------------------------------


def test_clean_fake_tree_reports_nothing(tmp_path: Path) -> None:
    """Every allowed edge at once: no false positives."""
    _write_tree(
        tmp_path,
        {
            "streams/model.py": """
                from __future__ import annotations

                import importlib
                import json
                from typing import TYPE_CHECKING

                import numpy as np
                import orjson

                from . import util
                from .util import helper
                from grimoire.streams.util import helper as again

                if TYPE_CHECKING:
                    from collections.abc import Sequence

                def load() -> object:
                    return importlib.import_module("grimoire.streams.util")
                """,
            "streams/util.py": "def helper() -> None: ...\n",
            "tables/store.py": """
                import redis
                import redisvl
                import numpy

                from grimoire.streams import model
                from ..streams.util import helper
                """,
            "topics/client.py": """
                import aiokafka
                import orjson

                from grimoire.streams.model import load
                from . import names
                """,
            "topics/names.py": "TOPIC = 'x'\n",
            "agents/handler.py": """
                import faust

                from grimoire.streams import model
                from grimoire.tables.store import redis
                from grimoire.topics import client
                from grimoire.agents import other
                """,
            "agents/other.py": "",
            "infra/app.py": """
                import torch

                from grimoire.agents import handler
                from grimoire.infra import settings
                """,
            "infra/settings.py": "",
            "infra/cli.py": """
                import argparse

                from grimoire.infra import app, settings
                """,
            "__init__.py": """
                from grimoire.streams import model
                """,
            # The benchmarks are not a product layer: they may import anything.
            "bench/recall.py": """
                from bench import corpus
                from grimoire.infra.app import torch
                """,
            "bench/corpus.py": "",
        },
    )
    refs = layering.collect_tree_imports(tmp_path)
    assert len(refs) > 20
    assert layering.check_tree(tmp_path) == []


def test_streams_importing_redis_is_reported(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "streams/store.py": """
                import json

                import redis.asyncio
                """,
            "streams/other.py": """
                try:
                    from onnxruntime import InferenceSession
                except ImportError:
                    InferenceSession = None
                """,
        },
    )
    violations = layering.check_tree(tmp_path)
    assert _found(violations) == {
        (
            tmp_path / "streams/store.py",
            _line_of(tmp_path, "streams/store.py", "import redis"),
            "grimoire.streams.store",
            "redis.asyncio",
        ),
        (
            tmp_path / "streams/other.py",
            _line_of(tmp_path, "streams/other.py", "onnxruntime"),
            "grimoire.streams.other",
            "onnxruntime",
        ),
    }
    assert all("I/O library" in v.rule for v in violations)


def test_streams_importing_an_unlisted_third_party_library_is_reported(tmp_path: Path) -> None:
    """The pure core is an allow-list (stdlib, numpy, orjson), not only a deny-list."""
    _write_tree(tmp_path, {"streams/model.py": "import pydantic\n"})
    (violation,) = layering.check_tree(tmp_path)
    assert (violation.file, violation.line, violation.imported) == (
        tmp_path / "streams/model.py",
        1,
        "pydantic",
    )


def test_streams_importing_tables_relatively_and_by_string_is_reported(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "streams/recall/flow.py": """
                import importlib
                from importlib import import_module

                from ...tables import codec
                from ...tables.codec import decode


                def late() -> object:
                    return importlib.import_module("grimoire.tables.codec")


                def later() -> object:
                    return import_module("..tables", package="grimoire.streams")
                """,
            "tables/codec.py": "def decode() -> None: ...\n",
        },
    )
    relative = "streams/recall/flow.py"
    file = tmp_path / relative
    importer = "grimoire.streams.recall.flow"
    codec = "grimoire.tables.codec"
    assert _found(layering.check_tree(tmp_path)) == {
        (file, _line_of(tmp_path, relative, "import codec"), importer, codec),
        (file, _line_of(tmp_path, relative, "import decode"), importer, codec),
        (file, _line_of(tmp_path, relative, '"grimoire.tables.codec"'), importer, codec),
        (file, _line_of(tmp_path, relative, '"..tables"'), importer, "grimoire.tables"),
    }


def test_tables_importing_agents_is_reported(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "tables/store.py": """
                from grimoire.streams import model
                from grimoire.agents.handler import Handler
                """,
            "streams/model.py": "",
            "agents/handler.py": "class Handler: ...\n",
        },
    )
    (violation,) = layering.check_tree(tmp_path)
    assert violation.file == tmp_path / "tables/store.py"
    assert violation.line == 2
    assert (violation.importer, violation.imported) == (
        "grimoire.tables.store",
        "grimoire.agents.handler",
    )
    assert "grimoire.tables may import only" in violation.rule


def test_topics_and_tables_do_not_import_each_other(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "tables/store.py": "from grimoire.topics import schemas\n",
            "topics/schemas.py": "from grimoire.tables import store\n",
        },
    )
    assert _found(layering.check_tree(tmp_path)) == {
        (tmp_path / "tables/store.py", 1, "grimoire.tables.store", "grimoire.topics.schemas"),
        (tmp_path / "topics/schemas.py", 1, "grimoire.topics.schemas", "grimoire.tables.store"),
    }


def test_topics_importing_heavy_libraries_is_reported(tmp_path: Path) -> None:
    """The client side may use aiokafka, but not faust, Redis, the model stack or numpy."""
    _write_tree(
        tmp_path,
        {
            "topics/schemas.py": """
                import aiokafka
                import faust
                import numpy as np
                from sentence_transformers import SentenceTransformer
                """,
        },
    )
    file = tmp_path / "topics/schemas.py"
    assert _found(layering.check_tree(tmp_path)) == {
        (file, 2, "grimoire.topics.schemas", "faust"),
        (file, 3, "grimoire.topics.schemas", "numpy"),
        (file, 4, "grimoire.topics.schemas", "sentence_transformers"),
    }


def test_agents_importing_infra_inside_a_function_is_reported(tmp_path: Path) -> None:
    """Deferred and type-only imports still count: they are dependencies all the same."""
    _write_tree(
        tmp_path,
        {
            "agents/handlers/recall.py": """
                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from grimoire.infra.settings import Settings


                def build() -> object:
                    from grimoire.infra import settings

                    return settings
                """,
            "infra/settings.py": "class Settings: ...\n",
        },
    )
    relative = "agents/handlers/recall.py"
    violations = layering.check_tree(tmp_path)
    assert _found(violations) == {
        (
            tmp_path / relative,
            _line_of(tmp_path, relative, "import Settings"),
            "grimoire.agents.handlers.recall",
            "grimoire.infra.settings",
        ),
        (
            tmp_path / relative,
            _line_of(tmp_path, relative, "import settings"),
            "grimoire.agents.handlers.recall",
            "grimoire.infra.settings",
        ),
    }
    assert {v.rule for v in violations} == {
        "nothing outside grimoire.infra may import grimoire.infra"
    }


def test_no_product_module_imports_bench(tmp_path: Path) -> None:
    """Every spelling that would load ``bench/``, from every layer and the root package."""
    _write_tree(
        tmp_path,
        {
            "__init__.py": "from . import bench\n",
            "streams/model.py": """
                import importlib


                def late() -> object:
                    return importlib.import_module("bench.recall")
                """,
            "tables/store.py": "from ..bench import corpus\n",
            "topics/client.py": "import grimoire.bench.recall\n",
            "agents/handler.py": "import bench.recall\n",
            "infra/app.py": "from grimoire import bench\n",
            "infra/cli.py": """
                def run() -> None:
                    from bench import recall
                """,
            "bench/recall.py": "from bench import corpus\nfrom grimoire.infra import app\n",
            "bench/corpus.py": "",
        },
    )
    violations = layering.check_tree(tmp_path)
    assert _found(violations) == {
        (tmp_path / "__init__.py", 1, "grimoire", "grimoire.bench"),
        (
            tmp_path / "streams/model.py",
            _line_of(tmp_path, "streams/model.py", "bench.recall"),
            "grimoire.streams.model",
            "bench.recall",
        ),
        (tmp_path / "tables/store.py", 1, "grimoire.tables.store", "grimoire.bench.corpus"),
        (tmp_path / "topics/client.py", 1, "grimoire.topics.client", "grimoire.bench.recall"),
        (tmp_path / "agents/handler.py", 1, "grimoire.agents.handler", "bench.recall"),
        (tmp_path / "infra/app.py", 1, "grimoire.infra.app", "grimoire.bench"),
        (
            tmp_path / "infra/cli.py",
            _line_of(tmp_path, "infra/cli.py", "from bench"),
            "grimoire.infra.cli",
            "bench.recall",
        ),
    }
    # One reason each, the bench rule's; bench/ itself is not checked.
    assert len(violations) == 7
    assert all("no product module may import the benchmarks" in v.rule for v in violations)


def test_relative_import_above_the_top_level_is_reported(tmp_path: Path) -> None:
    _write_tree(tmp_path, {"streams/model.py": "from ... import elsewhere\n"})
    (violation,) = layering.check_tree(tmp_path)
    assert (violation.file, violation.line, violation.imported) == (
        tmp_path / "streams/model.py",
        1,
        "...",
    )


def test_violations_format_with_file_line_importer_and_imported(tmp_path: Path) -> None:
    """The failure message must point at the exact import to fix."""
    _write_tree(tmp_path, {"streams/store.py": "import json\nimport redis\n"})
    text = layering.format_violations(layering.check_tree(tmp_path), tmp_path)
    assert text.startswith("streams/store.py:2: grimoire.streams.store imports redis -- ")


# --- the packaging check catches problems ----------------------------------------------


def test_package_check_catches_missing_init_and_unlisted_packages(tmp_path: Path) -> None:
    for relative in (
        "streams/__init__.py",
        "streams/listed/__init__.py",
        "streams/unlisted/__init__.py",
        "streams/no_init/module.py",
        "streams/data_only/schema.yaml",
        "streams/outer/inner/__init__.py",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).touch()
    listed = [
        "grimoire",
        "grimoire.streams",
        "grimoire.streams.listed",
        "grimoire.streams.outer.inner",
        "grimoire.streams.gone",
    ]
    problems = packaging.package_problems(tmp_path, {"streams": "grimoire.streams"}, listed)
    assert sorted(problems) == sorted(
        [
            "streams/unlisted/: package grimoire.streams.unlisted is not listed in "
            "[tool.setuptools] packages",
            "streams/no_init/: holds .py files but has no __init__.py",
            "streams/outer/: holds .py files but has no __init__.py",
            "grimoire.streams.gone: listed in [tool.setuptools] packages but not on disk",
        ]
    )


def test_package_check_accepts_a_consistent_tree(tmp_path: Path) -> None:
    for relative in ("tables/__init__.py", "tables/schema/__init__.py", "tables/schema/x.yaml"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).touch()
    listed = ["grimoire", "grimoire.tables", "grimoire.tables.schema"]
    assert packaging.package_problems(tmp_path, {"tables": "grimoire.tables"}, listed) == []


def test_the_journal_importing_a_handler_is_reported(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "agents/journal/apply.py": """
                from grimoire.agents.ports import EntryRule
                from grimoire.agents.handlers.ingest import IngestHandler
                from grimoire.agents import folding
                """,
            "agents/ports.py": "",
            "agents/folding.py": "",
            "agents/handlers/ingest.py": "class IngestHandler: ...\n",
            "agents/folding_user.py": "from grimoire.agents.handlers.ingest import IngestHandler\n",
        },
    )
    found = _found(layering.check_tree(tmp_path))
    apply = tmp_path / "agents/journal/apply.py"
    assert {(file, line, imported) for file, line, _, imported in found} == {
        (apply, 2, "grimoire.agents.handlers.ingest"),
        (apply, 3, "grimoire.agents.folding"),
    }


def test_a_protocol_outside_its_layers_ports_home_is_reported(tmp_path: Path) -> None:
    _write_tree(
        tmp_path,
        {
            "tables/ports/memory.py": """
                from typing import Protocol

                class MemoryStore(Protocol): ...
                """,
            "tables/memory/store.py": """
                import typing
                from typing import Protocol

                class RedisMemoryStore: ...

                class Loader(typing.Protocol): ...

                class Generic(Protocol[int]): ...
                """,
            "agents/ports.py": """
                from typing import Protocol

                class EventSink(Protocol): ...
                """,
            "agents/handlers/x.py": """
                from typing import Protocol

                def make() -> object:
                    class Inner(Protocol): ...
                    return Inner
                """,
        },
    )
    found = {
        (v.file.relative_to(tmp_path).as_posix(), v.line, v.imported)
        for v in layering.misplaced_ports(tmp_path)
    }
    assert found == {
        ("tables/memory/store.py", 6, "Loader"),
        ("tables/memory/store.py", 8, "Generic"),
        ("agents/handlers/x.py", 4, "Inner"),
    }
