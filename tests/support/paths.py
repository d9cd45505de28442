"""The repository root, for tests that read the project's own files (docs, static
assets, pyproject.toml): one place that knows where tests/support sits, so a test
module reads the same files wherever it is in the tests tree."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
