"""The README's folder table is the map a newcomer reads first: it must name every
package folder of the tree and nothing that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("streams", "tables", "agents", "topics", "infra")
MARKER = "<!-- folder-table:"


def table_folders(readme: str) -> set[str]:
    """Folders named in the first column of the marked table."""
    start = readme.index(MARKER)
    rows = []
    for line in readme[start:].splitlines()[1:]:
        if not line.startswith("|"):
            break
        rows.append(line.split("|")[1])
    return {name.rstrip("/") for row in rows for name in re.findall(r"`([^`]+/)`", row)}


def package_folders(root: Path) -> set[str]:
    return {
        str(init.parent.relative_to(root))
        for layer in LAYERS
        for init in (root / layer).rglob("__init__.py")
    }


def test_the_folder_table_names_every_package_and_nothing_else() -> None:
    named = table_folders((ROOT / "README.md").read_text())
    packages = package_folders(ROOT)
    assert len(packages) > 10
    assert sorted(packages - named) == [], "packages missing from the README's folder table"
    missing = sorted(name for name in named if not (ROOT / name).is_dir())
    assert missing == [], "the README's folder table names folders that do not exist"


def test_the_table_reader_sees_a_missing_package(tmp_path: Path) -> None:
    (tmp_path / "streams" / "extra").mkdir(parents=True)
    (tmp_path / "streams" / "__init__.py").write_text("")
    (tmp_path / "streams" / "extra" / "__init__.py").write_text("")
    for layer in LAYERS[1:]:
        (tmp_path / layer).mkdir()
    readme = f"{MARKER} -->\n| folder | what |\n| --- | --- |\n| `streams/` | core |\n\nrest"
    assert table_folders(readme) == {"streams"}
    assert package_folders(tmp_path) - table_folders(readme) == {"streams/extra"}
