"""The test suite, as a package so test modules can share helpers from ``tests.support``.

pytest runs with ``--import-mode=importlib`` (pyproject.toml). A test module in a folder
without an ``__init__.py`` (tests/unit, tests/integration and their subfolders) is
imported under its path from the rootdir, e.g. ``tests.unit.handlers.test_recall_handler``,
and pytest loads its parent packages from their files first. With this file ``tests`` is a
regular package, so ``from tests.support.builders import ...`` resolves the same way under
``python -m pytest``, the ``pytest`` script, and a single file given on the command line,
without anything on ``sys.path``.

So keep tests/unit, tests/integration and their subfolders free of ``__init__.py``: one
there makes pytest name the modules below it from that folder (``handlers.test_...``),
and ``tests`` is then only importable where the working directory is on ``sys.path``
(``python -m pytest``), not under the ``pytest`` script.
"""
