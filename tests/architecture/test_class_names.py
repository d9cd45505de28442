"""One class per name across the product: a name found in a traceback, a log line or
a review points at one definition, and two classes of one name never have to be told
apart by their module (as `Outcome` and an aliased `OutcomeEvent` once were).

Module-private classes count too: `_Part` in three modules reads the same in a
traceback. The benchmarks and the tests are not product code and are not checked.

The first test checks the project; the others build fake trees and show the rule
catching a repeat and passing distinct names.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("streams", "agents", "tables", "topics", "infra")


def repeated_class_names(root: Path) -> dict[str, list[str]]:
    """Every class name defined at the top level of more than one product module,
    with the modules that define it."""
    where: defaultdict[str, list[str]] = defaultdict(list)
    for layer in PRODUCT:
        for path in sorted((root / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(path.relative_to(root).as_posix())
    return {name: sorted(paths) for name, paths in sorted(where.items()) if len(paths) > 1}


def test_every_product_class_name_is_defined_once() -> None:
    assert repeated_class_names(PROJECT_ROOT) == {}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_a_name_defined_in_two_layers_is_reported(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "streams/a.py": "class Outcome:\n    pass\n",
            "agents/b.py": "class _Part:\n    pass\n\nclass Outcome:\n    pass\n",
            "infra/c.py": "class _Part:\n    pass\n",
        },
    )
    assert repeated_class_names(root) == {
        "Outcome": ["agents/b.py", "streams/a.py"],
        "_Part": ["agents/b.py", "infra/c.py"],
    }


def test_distinct_names_and_non_product_folders_pass(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "streams/a.py": "class Outcome:\n    class Inner:\n        pass\n",
            "tables/b.py": "class Inner:\n    pass\n",
            "bench/c.py": "class Outcome:\n    pass\n",
            "tests/d.py": "class Outcome:\n    pass\n",
        },
    )
    assert repeated_class_names(root) == {}
