"""An AST import checker that turns Grimoire's layering into something a test can fail on.

The layers are ``infra`` -> ``agents`` -> ``tables``/``topics`` -> ``streams``: an arrow
means "may import". ``streams`` is the pure core (stdlib, numpy, orjson, Stemmer only), so it
must never pull in an I/O library; ``topics`` is the light client side, so it must
not drag in faust, Redis or the embedding stack; nothing outside ``infra`` may import
``infra``; and no product module -- the layers above and the root ``__init__.py`` --
imports the benchmarks and evaluation code, which live outside the installed package
in the top-level ``bench/`` folder (run as ``python -m bench`` by the make targets).

Two rules inside a layer: the journal (``grimoire.agents.journal``) knows no handler,
since the apply loop dispatches through the rule registry the composition root fills;
and every ``Protocol`` of a layer is declared in that layer's ports module or package
(``grimoire.<layer>.ports``), one home per kind of thing (``misplaced_ports``).

Everything here is a pure function over a source tree on disk. The checker reads the
files with :mod:`ast` instead of importing them, so it sees every import a module
could ever execute -- including those inside functions, ``if TYPE_CHECKING:`` blocks,
``try``/``except`` fallbacks and ``importlib.import_module("...")`` calls with a
literal name -- without needing any of the heavy dependencies installed, and without
a new dependency such as import-linter.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

ROOT_PACKAGE: Final = "grimoire"

STREAMS: Final = "grimoire.streams"
TABLES: Final = "grimoire.tables"
TOPICS: Final = "grimoire.topics"
AGENTS: Final = "grimoire.agents"
INFRA: Final = "grimoire.infra"
#: The benchmarks' top-level package (``bench/`` at the repository root, not installed),
#: and the name it would have through the editable install's ``grimoire`` -> ``.`` mapping.
BENCH: Final = "bench"
BENCH_UNDER_ROOT: Final = f"{ROOT_PACKAGE}.{BENCH}"

#: Folder (relative to the project root) -> the package it installs as. Mirrors
#: ``[tool.setuptools] package-dir`` in pyproject.toml; the tests check they agree.
DEFAULT_PACKAGE_DIRS: Final[Mapping[str, str]] = {
    "streams": STREAMS,
    "tables": TABLES,
    "topics": TOPICS,
    "agents": AGENTS,
    "infra": INFRA,
}

#: Libraries that do I/O, run models or drag a framework in: the pure core must not
#: import them (the allow-list below already excludes them; naming them lets the
#: report say *why* an import is wrong).
IO_LIBRARIES: Final = frozenset(
    {
        "faust",
        "mode",
        "redis",
        "redisvl",
        "hiredis",
        "aiokafka",
        "torch",
        "onnxruntime",
        "onnx",
        "sentence_transformers",
        "transformers",
        "huggingface_hub",
    }
)

#: Third-party libraries the pure core may use: numeric, serialisation and stemming.
# Pure computation only: arrays, JSON, and the Snowball stemmer (PyStemmer) the
# lexical form stems with; none does I/O or reads a clock.
STREAMS_THIRD_PARTY: Final = frozenset({"numpy", "orjson", "Stemmer"})

#: What the light client side (``topics``) must not load: agents embed it, and a
#: client should not pay for faust, Redis, the embedding stack or numpy.
TOPICS_FORBIDDEN: Final = IO_LIBRARIES - {"aiokafka"} | {"numpy"}

STDLIB: Final = frozenset(sys.stdlib_module_names)

#: The journal's side of the agents layer, and what it must not import: the apply
#: loop reaches handlers only through the `EntryRule` registry it is given.
JOURNAL: Final = f"{AGENTS}.journal"
JOURNAL_FORBIDDEN: Final = (
    f"{AGENTS}.handlers",
    f"{AGENTS}.maintenance",
    f"{AGENTS}.folding",
)


@dataclass(frozen=True, order=True)
class ImportRef:
    """One import statement (or literal dynamic import) found in a source file.

    ``imported`` is the absolute dotted name. For ``from pkg import name`` it is
    ``pkg.name`` when that is a module of the scanned tree (so importing a
    sub-package by attribute is not missed) and ``pkg`` otherwise.
    """

    file: Path
    line: int
    importer: str
    imported: str


@dataclass(frozen=True, order=True)
class Violation:
    """An import that breaks a layering rule; ``str()`` gives a greppable one-liner."""

    file: Path
    line: int
    importer: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.importer} imports {self.imported} -- {self.rule}"


@dataclass(frozen=True)
class SourceModule:
    """A ``.py`` file of the tree with the module name it installs as."""

    path: Path
    module: str
    is_package: bool


def module_name_for(relative: Path, package_dirs: Mapping[str, str]) -> str | None:
    """Map a path relative to the project root to its installed module name.

    The root ``__init__.py`` is the ``grimoire`` package itself. Returns ``None`` for
    files outside the mapped folders (tests, scripts, ``bench/``), which are not part
    of the installed package and so are not layered.
    """
    if relative == Path("__init__.py"):
        return ROOT_PACKAGE
    parts = relative.with_suffix("").parts
    if not parts or parts[0] not in package_dirs:
        return None
    names = [package_dirs[parts[0]], *parts[1:]]
    if names[-1] == "__init__":
        names.pop()
    return ".".join(names)


def iter_source_modules(
    root: Path, package_dirs: Mapping[str, str] = DEFAULT_PACKAGE_DIRS
) -> Iterator[SourceModule]:
    """Yield the root ``__init__.py`` and every ``.py`` file under the mapped folders,
    in a stable order."""
    root_init = root / "__init__.py"
    if root_init.is_file():
        yield SourceModule(root_init, ROOT_PACKAGE, True)
    for folder in sorted(package_dirs):
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            relative = path.relative_to(root)
            if any(part == "__pycache__" or part.startswith(".") for part in relative.parts):
                continue
            module = module_name_for(relative, package_dirs)
            if module is not None:
                yield SourceModule(path, module, path.name == "__init__.py")


def _resolve_relative(base_package: str, level: int, name: str | None) -> str | None:
    """Resolve ``level`` leading dots against ``base_package`` like the import system.

    Returns ``None`` when the dots climb above the top-level package, which is an
    ``ImportError`` at run time and is reported as a violation by the caller.
    """
    parts = base_package.split(".") if base_package else []
    if level - 1 > len(parts) - 1:
        return None
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if name:
        parts = [*parts, *name.split(".")]
    return ".".join(parts)


def _containing_package(module: str, is_package: bool) -> str:
    """The package that relative imports in ``module`` are resolved against."""
    return module if is_package else module.rpartition(".")[0]


def _literal_str(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _dynamic_import_target(call: ast.Call) -> tuple[str, str | None] | None:
    """``(name, package)`` for ``importlib.import_module``/``__import__`` with a literal name.

    A computed name cannot be checked statically; those calls are ignored rather
    than guessed at.
    """
    func = call.func
    if isinstance(func, ast.Attribute):
        func_name = func.attr
    elif isinstance(func, ast.Name):
        func_name = func.id
    else:
        return None
    if func_name not in {"import_module", "__import__"} or not call.args:
        return None
    name = _literal_str(call.args[0])
    if name is None:
        return None
    package: str | None = None
    if func_name == "import_module":
        if len(call.args) > 1:
            package = _literal_str(call.args[1])
        for keyword in call.keywords:
            if keyword.arg == "package":
                package = _literal_str(keyword.value)
    return name, package


def collect_imports(
    source: str,
    *,
    file: Path,
    module: str,
    is_package: bool,
    known_modules: Iterable[str] = (),
) -> list[ImportRef]:
    """Every import in ``source``, wherever it sits in the file, as absolute names.

    ``ast.walk`` visits the whole tree, so imports nested in functions, classes,
    ``if TYPE_CHECKING:`` and ``try`` blocks are all found: a deferred import still
    makes the layer depend on the other at run time. An unresolvable relative
    import is returned with its dots intact so the rules can flag it.
    """
    known = frozenset(known_modules)
    package = _containing_package(module, is_package)
    tree = ast.parse(source, filename=str(file))
    found: list[ImportRef] = []

    def add(line: int, imported: str) -> None:
        found.append(ImportRef(file, line, module, imported))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = _resolve_relative(package, node.level, node.module)
                if target is None:
                    add(node.lineno, "." * node.level + (node.module or ""))
                    continue
            else:
                target = node.module or ""
            # A name that is a benchmark module counts as one even though the tree's
            # scan does not know it (``from grimoire import bench``).
            submodules = [
                f"{target}.{alias.name}"
                for alias in node.names
                if alias.name != "*"
                and (f"{target}.{alias.name}" in known or is_bench(f"{target}.{alias.name}"))
            ]
            if submodules:
                for submodule in submodules:
                    add(node.lineno, submodule)
            if len(submodules) < len(node.names) and target:
                add(node.lineno, target)
        elif isinstance(node, ast.Call):
            dynamic = _dynamic_import_target(node)
            if dynamic is None:
                continue
            name, anchor = dynamic
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                resolved = _resolve_relative(anchor or package, level, name[level:] or None)
                add(node.lineno, resolved if resolved is not None else name)
            else:
                add(node.lineno, name)
    return sorted(set(found))


def _within(module: str, package: str) -> bool:
    """Whether ``module`` is ``package`` or one of its sub-modules."""
    return module == package or module.startswith(package + ".")


def is_bench(module: str) -> bool:
    """Whether ``module`` names the benchmarks, in any spelling that would import them."""
    return _within(module, BENCH) or _within(module, BENCH_UNDER_ROOT)


def _top_level(module: str) -> str:
    return module.split(".", 1)[0]


def _layer_of(module: str) -> str | None:
    for layer in (STREAMS, TABLES, TOPICS, AGENTS, INFRA):
        if _within(module, layer):
            return layer
    return None


#: Which grimoire layers each layer may import (its own included).
ALLOWED_LAYERS: Final[Mapping[str, frozenset[str]]] = {
    STREAMS: frozenset({STREAMS}),
    TABLES: frozenset({TABLES, STREAMS}),
    TOPICS: frozenset({TOPICS, STREAMS}),
    AGENTS: frozenset({AGENTS, TABLES, TOPICS, STREAMS}),
    INFRA: frozenset({INFRA, AGENTS, TABLES, TOPICS, STREAMS}),
}


def rule_violations(ref: ImportRef) -> list[str]:
    """The rules ``ref`` breaks, as human-readable reasons (empty when it is fine)."""
    importer, imported = ref.importer, ref.imported
    reasons: list[str] = []
    if imported.startswith("."):
        return ["relative import climbs above the top-level package"]
    layer = _layer_of(importer)
    if layer is None and importer != ROOT_PACKAGE:
        return reasons
    if is_bench(imported):
        reasons.append(
            "no product module may import the benchmarks (bench/ lives outside the "
            "installed package)"
        )
        return reasons
    if layer is None:
        return reasons

    if _within(importer, JOURNAL) and any(_within(imported, f) for f in JOURNAL_FORBIDDEN):
        reasons.append(
            "the journal knows no handler: the apply loop dispatches through the rule "
            "registry the composition root fills (grimoire.agents.folding)"
        )
        return reasons

    if _top_level(imported) == ROOT_PACKAGE:
        target_layer = _layer_of(imported)
        if target_layer is None:
            if imported != ROOT_PACKAGE:
                reasons.append(f"{imported} is not a module of any grimoire layer")
        elif target_layer not in ALLOWED_LAYERS[layer]:
            if target_layer == INFRA:
                reasons.append("nothing outside grimoire.infra may import grimoire.infra")
            else:
                allowed = ", ".join(sorted(ALLOWED_LAYERS[layer]))
                reasons.append(f"{layer} may import only {allowed}")
        return reasons

    top = _top_level(imported)
    if layer == STREAMS:
        if top in IO_LIBRARIES:
            reasons.append(f"the pure core must not import the I/O library {top}")
        elif top not in STDLIB and top not in STREAMS_THIRD_PARTY:
            allowed = ", ".join(sorted(STREAMS_THIRD_PARTY))
            reasons.append(f"the pure core may import only the stdlib, {allowed} and itself")
    elif layer == TOPICS and top in TOPICS_FORBIDDEN:
        reasons.append(f"the light client side (grimoire.topics) must not import {top}")
    return reasons


def check_imports(refs: Iterable[ImportRef]) -> list[Violation]:
    """Apply the layering rules to already-collected imports."""
    return sorted(
        Violation(ref.file, ref.line, ref.importer, ref.imported, reason)
        for ref in refs
        for reason in rule_violations(ref)
    )


def collect_tree_imports(
    root: Path, package_dirs: Mapping[str, str] = DEFAULT_PACKAGE_DIRS
) -> list[ImportRef]:
    """Every import of every module under ``root``'s mapped folders."""
    modules = list(iter_source_modules(root, package_dirs))
    known = frozenset(m.module for m in modules)
    refs: list[ImportRef] = []
    for source_module in modules:
        refs.extend(
            collect_imports(
                source_module.path.read_text(encoding="utf-8"),
                file=source_module.path,
                module=source_module.module,
                is_package=source_module.is_package,
                known_modules=known,
            )
        )
    return refs


def check_tree(
    root: Path, package_dirs: Mapping[str, str] = DEFAULT_PACKAGE_DIRS
) -> list[Violation]:
    """All layering violations of the source tree rooted at ``root``."""
    return check_imports(collect_tree_imports(root, package_dirs))


def _is_protocol_base(base: ast.expr) -> bool:
    if isinstance(base, ast.Subscript):  # Protocol[T]
        base = base.value
    if isinstance(base, ast.Name):
        return base.id == "Protocol"
    return isinstance(base, ast.Attribute) and base.attr == "Protocol"


def ports_home(module: str) -> str | None:
    """The ports module or package of ``module``'s layer (None outside the layers)."""
    layer = _layer_of(module)
    return None if layer is None else f"{layer}.ports"


def misplaced_ports(
    root: Path, package_dirs: Mapping[str, str] = DEFAULT_PACKAGE_DIRS
) -> list[Violation]:
    """Every ``Protocol`` class declared outside its layer's ports module or package."""
    found: list[Violation] = []
    for source_module in iter_source_modules(root, package_dirs):
        home = ports_home(source_module.module)
        if home is None or _within(source_module.module, home):
            continue
        tree = ast.parse(source_module.path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(_is_protocol_base(b) for b in node.bases):
                found.append(
                    Violation(
                        source_module.path,
                        node.lineno,
                        source_module.module,
                        node.name,
                        f"a port is declared outside its layer's ports home ({home})",
                    )
                )
    return sorted(found)


def format_violations(violations: Iterable[Violation], root: Path | None = None) -> str:
    """One line per violation, paths relative to ``root`` when given, for test failures."""
    lines = []
    for violation in violations:
        if root is not None and violation.file.is_relative_to(root):
            violation = replace(violation, file=violation.file.relative_to(root))
        lines.append(str(violation))
    return "\n".join(lines)
