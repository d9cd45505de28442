"""The export manifest: what it holds, what it refuses, and what names it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from grimoire.infra.embedding.export_manifest import (
    ExportManifest,
    cached_encoder,
    manifest_path,
    source_key,
)


def _model(root: Path) -> Path:
    (root / "1_Pooling").mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "bert"}')
    (root / "model.safetensors").write_bytes(bytes(range(256)) * 4)
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return root


def test_a_manifest_round_trips_through_its_json() -> None:
    manifest = ExportManifest("bert-00a2", 384, '{"version": "1.0"}')
    assert ExportManifest.from_json(manifest.to_json()) == manifest


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b"not json",
        b'{"model_key": "", "dims": 384, "tokenizer": "{}"}',
        b'{"model_key": "../up", "dims": 384, "tokenizer": "{}"}',
        b'{"model_key": "bert", "dims": 0, "tokenizer": "{}"}',
        b'{"model_key": "bert", "dims": "384", "tokenizer": "{}"}',
        b'{"model_key": "bert", "dims": 384, "tokenizer": ""}',
        b'{"model_key": "bert", "dims": 384}',
    ],
)
def test_a_bad_manifest_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        ExportManifest.from_json(raw)


def test_the_key_follows_every_files_bytes_and_name(tmp_path: Path) -> None:
    model = _model(tmp_path / "a")
    key = source_key(model)
    assert key == source_key(model)
    assert key == source_key(_model(tmp_path / "b"))  # where the model lies is not named
    (model / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    changed = source_key(model)
    assert changed != key
    (model / "1_Pooling" / "config.json").rename(model / "1_Pooling" / "other.json")
    assert source_key(model) not in (key, changed)


def test_only_a_folder_has_a_key(tmp_path: Path) -> None:
    """A hub name (resolved from the hub's cache by the loader) has no files here to
    hash: keyed on nothing, every such name would share one manifest."""
    with pytest.raises(ValueError, match="not a model folder"):
        source_key(Path("sentence-transformers/all-MiniLM-L6-v2"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a model folder"):
        source_key(tmp_path / "file")


def test_no_manifest_no_export_or_a_bad_tokenizer_means_loading_the_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model, cache = _model(tmp_path / "model"), tmp_path / "cache"
    cache.mkdir()
    manifest = manifest_path(model, cache)
    assert manifest.parent == cache and manifest.name.startswith("source-")
    assert cached_encoder(manifest, lanes=1, int8=True) is None
    manifest.write_bytes(ExportManifest("bert-gone", 384, "{}").to_json())
    # The manifest names an export that is not there (a cache cleared by hand).
    assert cached_encoder(manifest, lanes=1, int8=True) is None
    assert cached_encoder(manifest, lanes=1, int8=False) is None
    (cache / "bert-gone.onnx").write_bytes(b"not read: the tokenizer fails first")
    with caplog.at_level(logging.WARNING):
        assert cached_encoder(manifest, lanes=1, int8=False) is None
    assert "its tokenizer" in caplog.text
