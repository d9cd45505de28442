"""The real model (all-MiniLM-L6-v2, offline): coalesced calls and the cache."""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grimoire.infra.embedding import embedder as embedder_module
from grimoire.infra.embedding import export_manifest, onnx_encoder
from grimoire.infra.embedding.embedder import (
    MAX_AUTO_LANES,
    PER_ROW_PIECE,
    CachingEmbedder,
    SentenceTransformerEmbedder,
    default_model_path,
    lane_slices,
    resolve_lanes,
    row_pieces,
)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def model(cache_dir: Path) -> Iterator[SentenceTransformerEmbedder]:
    # the default backend: onnx-int8
    embedder = SentenceTransformerEmbedder(max_batch=64, cache_dir=cache_dir)
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def onnx_model(model: SentenceTransformerEmbedder, cache_dir: Path) -> Iterator[Any]:
    embedder = SentenceTransformerEmbedder(lanes=2, backend="onnx", cache_dir=cache_dir)
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def torch_model() -> Iterator[SentenceTransformerEmbedder]:
    embedder = SentenceTransformerEmbedder(lanes=2, backend="torch")
    yield embedder
    embedder.close()


# Different lengths: one word, padding-free, whitespace, non-ASCII, and past the
# 256-token truncation.
VARIED = [
    "ok",
    "disk full on /var",
    "  leading and trailing spaces  ",
    "Zürich → Tōkyō: prix du pétrole en hausse de 3 %",
    "The validator missed 12 consecutive slots after the upgrade to v1.18.",
    " ".join(f"token{i}" for i in range(400)),
]


def _texts(prefix: str, count: int) -> list[str]:
    return [f"{prefix} event {i}: the oracle price moved {i} basis points" for i in range(count)]


async def test_concurrent_calls_share_one_model_call_up_to_the_batch_cap(
    onnx_model: SentenceTransformerEmbedder,
) -> None:
    """A batching model (float ONNX, torch): calls that meet in the queue run as one."""
    model = onnx_model
    groups = [_texts("alpha", 20), _texts("beta", 20), _texts("gamma", 20)]
    alone = [await model.embed(group) for group in groups]

    calls_before = model.model_calls
    together = await asyncio.gather(*(model.embed(group) for group in groups))
    assert model.model_calls - calls_before == 1  # 60 texts fit in one call of at most 64
    for mine, reference in zip(together, alone, strict=True):
        np.testing.assert_allclose(mine, reference, atol=1e-5)

    calls_before = model.model_calls
    await asyncio.gather(*(model.embed(group) for group in (*groups, _texts("delta", 20))))
    assert model.model_calls - calls_before == 2  # 80 texts: the cap splits them


async def test_int8_calls_go_to_the_lanes_at_once_with_the_same_vectors(
    model: SentenceTransformerEmbedder,
) -> None:
    """The int8 model runs each text alone, so nothing is gained by joining calls:
    each call's pieces are queued for the lanes as it arrives, and a later call's
    first piece is taken as soon as a lane frees up, not after the earlier call."""
    groups = [_texts("alpha", 9), _texts("beta", 9), _texts("gamma", 9)]
    alone = [await model.embed(group) for group in groups]
    calls_before = model.model_calls
    together = await asyncio.gather(*(model.embed(group) for group in groups))
    assert model.model_calls - calls_before == len(groups)
    for mine, reference in zip(together, alone, strict=True):
        np.testing.assert_array_equal(mine, reference)
    vectors, seconds = await model.embed_timed(groups[0])
    np.testing.assert_array_equal(vectors, alone[0])
    assert seconds > 0


async def test_vectors_are_normalised_and_the_cache_skips_the_model(
    model: SentenceTransformerEmbedder,
) -> None:
    cache = CachingEmbedder(model, capacity=100)
    texts = ["disk full on /var", "disk full on /var", "RPC timed out"]
    first = await cache.embed(texts)
    assert first.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first[0], first[1])
    calls = model.model_calls
    again = await cache.embed(list(reversed(texts)))
    assert model.model_calls == calls
    np.testing.assert_array_equal(again[::-1], first)
    assert (cache.hits, cache.misses) == (4, 2)


async def test_lanes_split_a_batch_and_return_rows_in_order(
    model: SentenceTransformerEmbedder,
) -> None:
    texts = [
        f"{'long ' * (i % 7)}line {i} about the settlement of trade {i * 13}" for i in range(40)
    ]
    calls = model.model_calls
    together = await model.embed(texts)
    assert model.model_calls == calls + 1  # one model call, however many lanes work on it
    one_by_one = np.vstack([await model.embed([text]) for text in texts])
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    assert model.lanes >= 1


def test_lane_slices_partition_the_rows_with_balanced_lengths() -> None:
    lengths = [50, 10, 40, 20, 30, 60, 70, 80, 15, 25, 35, 45, 55, 65, 75, 85]
    slices = lane_slices(lengths, 2)
    assert sorted(row for rows in slices for row in rows) == list(range(16))
    # dealt in length order (10→lane 0, 15→lane 1, 20→lane 0, …); these lengths
    # happen to put rows 0-7 on one lane
    assert slices == [list(range(8)), list(range(8, 16))]
    assert lane_slices(lengths[:15], 2) == [list(range(15))]  # 7 rows would be too few
    assert lane_slices(lengths, 1) == [list(range(16))]
    assert lane_slices([], 4) == []


def test_row_pieces_cover_the_rows_in_order() -> None:
    assert row_pieces(10, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert row_pieces(3, 4) == [[0, 1, 2]]
    assert row_pieces(0, 4) == []
    assert row_pieces(9) == [list(range(i, min(i + PER_ROW_PIECE, 9))) for i in range(0, 9, 4)]


def test_lanes_default_to_one_per_core_capped() -> None:
    assert resolve_lanes(3) == 3
    assert 1 <= resolve_lanes(0) <= MAX_AUTO_LANES


async def test_onnx_matches_torch_for_single_texts_and_split_batches(
    onnx_model: SentenceTransformerEmbedder, torch_model: SentenceTransformerEmbedder
) -> None:
    assert (onnx_model.backend, torch_model.backend) == ("onnx", "torch")
    for text in VARIED:
        _assert_same_vectors(await onnx_model.embed([text]), await torch_model.embed([text]))

    batch = [f"{text} #{i}" for i in range(3) for text in VARIED]  # 18 texts
    assert len(lane_slices([len(text) for text in batch], onnx_model.lanes)) == 2
    _assert_same_vectors(await onnx_model.embed(batch), await torch_model.embed(batch))


def _assert_same_vectors(mine: np.ndarray, reference: np.ndarray) -> None:
    assert mine.shape == reference.shape
    assert mine.dtype == np.float32
    np.testing.assert_allclose(mine, reference, atol=1e-5)
    assert np.min(np.sum(mine * reference, axis=1)) >= 0.99999  # cosine: both unit length


async def test_onnx_vectors_are_unit_length(onnx_model: SentenceTransformerEmbedder) -> None:
    for texts in ([VARIED[0]], VARIED, VARIED * 3):
        vectors = await onnx_model.embed(texts)
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)


async def test_int8_vectors_stay_close_to_the_float_models(
    model: SentenceTransformerEmbedder, onnx_model: SentenceTransformerEmbedder
) -> None:
    assert model.backend == "onnx-int8"
    assert model._onnx is not None and model._onnx.per_row
    quantized, exact = await model.embed(VARIED), await onnx_model.embed(VARIED)
    assert quantized.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(quantized, axis=1), 1.0, atol=1e-6)
    cosines = np.sum(quantized * exact, axis=1)
    # a lone word ("ok") moves most, about 0.97
    assert cosines.min() >= 0.95 and cosines.mean() >= 0.985, cosines
    assert not np.array_equal(quantized, exact)  # it is the quantized model that ran


async def test_an_int8_vector_depends_on_its_text_only(model: SentenceTransformerEmbedder) -> None:
    """Quantized activations take their scale from the whole input, so batching
    or padding a text would move its vector: each text runs alone instead."""
    alone = np.vstack([await model.embed([text]) for text in VARIED])
    batch = [f"{text} #{i}" for i in range(3) for text in VARIED]  # split across the lanes
    assert len(row_pieces(len(batch))) > 2  # taken by the lanes as they free up
    mixed = await model.embed([*batch, *VARIED])
    np.testing.assert_array_equal(mixed[len(batch) :], alone)
    together = await asyncio.gather(*(model.embed([text]) for text in reversed(VARIED)))
    np.testing.assert_array_equal(np.vstack(together[::-1]), alone)


async def test_a_query_does_not_wait_behind_a_bulk_batch(
    model: SentenceTransformerEmbedder,
) -> None:
    """A recall query goes to the model beside a running batch (compaction's
    summaries, an ingest burst), not after it, and gets the vector `embed` gives."""
    query = "which validator missed slots after the upgrade?"
    expected = await model.embed([query])
    bulk = [f"{'settlement ' * 30} bulk line {i}" for i in range(256)]
    queries_before = model.query_calls
    running = asyncio.ensure_future(model.embed(bulk))
    await asyncio.sleep(0)  # the batch is on the lanes
    answered = await model.embed_query([query])
    assert not running.done()  # through the queue it would have waited for all 256
    assert model.query_calls == queries_before + 1
    np.testing.assert_array_equal(answered, expected)
    assert (await running).shape == (256, 384)

    cache = CachingEmbedder(model, capacity=10)
    before = model.query_calls
    np.testing.assert_array_equal(await cache.embed_query([query]), expected)
    np.testing.assert_array_equal(await cache.embed_query([query]), expected)  # a hit
    assert model.query_calls == before + 1


async def test_bulk_lanes_yield_the_cpu_and_queries_do_not(cache_dir: Path) -> None:
    """The bulk lanes' threads run niced (`embed_lane_nice`), so on full cores a
    recall's query thread, the event loop, the broker and Redis go first."""
    embedder = SentenceTransformerEmbedder(lanes=2, cache_dir=cache_dir, lane_nice=7)
    loop = asyncio.get_running_loop()

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    def os_name() -> str:
        return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

    try:
        base = os.getpriority(os.PRIO_PROCESS, 0)
        lanes = await asyncio.gather(
            *(loop.run_in_executor(embedder._executor, niceness) for _ in range(8))
        )
        query = await loop.run_in_executor(embedder._query_executor, niceness)
        assert set(lanes) == {min(base + 7, 19)}
        assert query == base
        assert niceness() == base  # the caller's own thread is left alone
        # Named for the OS, so top -H and the benches' CPU split tell them apart.
        assert await loop.run_in_executor(embedder._executor, os_name) == "embed-lane"
        assert await loop.run_in_executor(embedder._query_executor, os_name) == "embed-query"
        assert os_name() != "embed-lane"
        assert (await embedder.embed(["still embeds"])).shape == (1, 384)
    finally:
        embedder.close()


def test_the_export_is_cached_by_weights_and_reused(
    model: SentenceTransformerEmbedder, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = sorted(cache_dir.iterdir())
    # the export, its int8 copy and their manifest, no temp files left behind
    assert sorted(path.suffix for path in written) == [".json", ".onnx", ".onnx"]
    exports = [path for path in written if path.suffix == ".onnx"]
    quantized, export = sorted(exports, key=lambda path: len(path.name), reverse=True)
    assert quantized.name == f"{export.stem}-{onnx_encoder.QUANTIZED_FORMAT}.onnx"
    assert model._onnx is not None and model._onnx.path == quantized
    mtimes = [path.stat().st_mtime_ns for path in written]

    def no_write(*args: object) -> None:
        raise AssertionError("written again despite a cached file")

    monkeypatch.setattr(onnx_encoder, "_export", no_write)
    monkeypatch.setattr("onnxruntime.quantization.quantize_dynamic", no_write)
    for backend, path in (("onnx", export), ("onnx-int8", quantized)):
        again = SentenceTransformerEmbedder(lanes=1, backend=backend, cache_dir=cache_dir)
        try:
            assert again._onnx is not None and again._onnx.path == path
        finally:
            again.close()
    assert sorted(cache_dir.iterdir()) == written
    assert [path.stat().st_mtime_ns for path in written] == mtimes


def test_a_start_with_the_manifest_loads_no_model_and_embeds_the_same(
    model: SentenceTransformerEmbedder,
    onnx_model: SentenceTransformerEmbedder,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The module's first embedder loaded the model into an empty cache and left a
    manifest; the next ones find the export through it, without the model, and give
    the vectors the loaded model's tokenizer and export give, byte for byte."""
    manifest = export_manifest.manifest_path(default_model_path(), cache_dir)
    assert manifest.exists()
    held = export_manifest.ExportManifest.from_json(manifest.read_bytes())
    assert model._onnx is not None and held.model_key == model._onnx.model_key
    assert held.dims == model.dims == 384

    def no_model(path: Path) -> None:
        raise AssertionError("the model was loaded despite the manifest")

    monkeypatch.setattr(embedder_module, "_load_sentence_transformer", no_model)
    texts = [*VARIED, *_texts("manifest", 5)]
    for loaded in (model, onnx_model):
        assert loaded._onnx is not None
        again = SentenceTransformerEmbedder(lanes=1, backend=loaded.backend, cache_dir=cache_dir)
        try:
            assert again._onnx is not None and again._onnx.path == loaded._onnx.path
            assert again.vector_space == loaded.vector_space and again.dims == loaded.dims
            assert again._onnx.tokenizer_spec == loaded._onnx.tokenizer_spec
            mine = again._onnx.encode(texts, whole=True)
            assert mine.tobytes() == loaded._onnx.encode(texts, whole=True).tobytes()
        finally:
            again.close()


def test_a_worker_start_with_the_manifest_imports_no_torch(
    model: SentenceTransformerEmbedder, cache_dir: Path
) -> None:
    """The point of the manifest: torch, transformers and sentence-transformers
    are most of a worker's start, and an ONNX worker needs none of them."""
    script = (
        "import sys; from pathlib import Path; "
        "from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder; "
        "e = SentenceTransformerEmbedder(lanes=1, cache_dir=Path(sys.argv[1])); "
        "print(sorted({'torch', 'transformers', 'sentence_transformers'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(cache_dir)],
        capture_output=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.decode().strip() == "[]", done.stderr.decode()[-2000:]


def test_a_changed_model_file_or_a_bad_manifest_loads_the_model_again(
    model: SentenceTransformerEmbedder,
    cache_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A manifest is named by the model's bytes: a copy of the model with one file
    changed has none, and is loaded (its manifest written then); an unreadable
    manifest is ignored, with a warning, and the model loaded and the manifest
    written again."""
    copy = tmp_path / "model"
    shutil.copytree(default_model_path(), copy)
    original = export_manifest.manifest_path(default_model_path(), cache_dir)
    (copy / "README.md").write_text("a different card, the same weights\n")
    changed = export_manifest.manifest_path(copy, cache_dir)
    assert changed != original and not changed.exists()
    again = SentenceTransformerEmbedder(copy, lanes=1, cache_dir=cache_dir)
    again.close()
    assert changed.exists() and again.vector_space == model.vector_space
    changed.write_bytes(b'{"model_key": "../elsewhere", "dims": 384, "tokenizer": "{}"}')
    with caplog.at_level(logging.WARNING, logger=export_manifest.__name__):
        third = SentenceTransformerEmbedder(copy, lanes=1, cache_dir=cache_dir)
    third.close()
    assert any("unreadable export manifest" in r.getMessage() for r in caplog.records)
    assert third.vector_space == model.vector_space
    rewritten = export_manifest.ExportManifest.from_json(changed.read_bytes())
    assert model._onnx is not None and rewritten.model_key == model._onnx.model_key


def test_workers_quantizing_at_once_each_get_the_same_file(
    model: SentenceTransformerEmbedder, cache_dir: Path, tmp_path: Path
) -> None:
    """Workers starting together on an empty cache each quantize the export. The
    quantizer writes a side file beside its input; shared, one process deleted it
    under another (FileNotFoundError, a worker crashed at warm-up)."""
    assert model._onnx is not None
    cached = model._onnx.path
    export = cache_dir / cached.name.replace(f"-{onnx_encoder.QUANTIZED_FORMAT}", "")
    shutil.copyfile(export, tmp_path / export.name)
    script = (
        "import sys; from pathlib import Path; "
        "from grimoire.infra.embedding.onnx_encoder import quantize; "
        "print(quantize(Path(sys.argv[1])))"
    )
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path / export.name)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(3)
    ]
    for run in runs:
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err.decode()[-2000:]
        assert Path(out.decode().strip()).name == cached.name
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([export.name, cached.name])
    assert (tmp_path / cached.name).read_bytes() == cached.read_bytes()


def test_the_vector_space_names_the_weights_and_the_precision(
    model: SentenceTransformerEmbedder,
    onnx_model: SentenceTransformerEmbedder,
    torch_model: SentenceTransformerEmbedder,
) -> None:
    # torch and float ONNX give the same vectors, so they share a space
    assert onnx_model._onnx is not None
    key = onnx_model._onnx.path.stem
    assert onnx_model.vector_space == torch_model.vector_space == f"{key}:float32"
    assert model.vector_space == f"{key}:{onnx_encoder.QUANTIZED_FORMAT}"
    assert CachingEmbedder(model).vector_space == model.vector_space


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend"):
        SentenceTransformerEmbedder(backend="openvino")


def test_only_the_quantizers_chatter_is_silenced(caplog: pytest.LogCaptureFixture) -> None:
    advice = "Please consider to run pre-processing before quantization."
    with caplog.at_level(logging.INFO):
        with onnx_encoder._quiet_quantizer():
            logging.info('Quantization parameters for tensor:"x" not specified')
            logging.warning(advice)
            logging.warning("a real problem")
        logging.info("after")
        logging.warning(advice)
    assert [r.getMessage() for r in caplog.records] == ["a real problem", "after", advice]


# AVX2 and FMA, no AVX-512 and no VNNI: the int8 kernels ONNX Runtime picks on
# such a CPU are not the ones it picks on an AVX-512 VNNI machine.
OTHER_CPU = "Haswell"
_ENCODE_ON_ANOTHER_CPU = """
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from grimoire.infra.embedding.onnx_encoder import OnnxEncoder

spec, model, texts, out = sys.argv[1:5]


class SameTokenizer:
    def __init__(self) -> None:
        self.tokenizer = Tokenizer.from_str(Path(spec).read_text())

    def get(self) -> Tokenizer:
        return self.tokenizer


lines = Path(texts).read_text().split("\\n")
encoder = OnnxEncoder(Path(model), SameTokenizer(), lanes=1, per_row=True)
np.save(out, encoder.encode(lines, whole=True))
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="emulates another x86-64 CPU")
def test_int8_vectors_do_not_depend_on_the_cpus_instruction_set(
    model: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    """A replay on another machine, or workers on mixed hardware, must write one
    vector space: the same int8 model under qemu emulating an AVX2-only CPU gives
    this CPU's vectors (signed weights gave cosines down to 0.96 here)."""
    assert model._onnx is not None and model._onnx.per_row
    qemu = shutil.which("qemu-x86_64")
    assert qemu is not None, "qemu-user is missing: `make test` installs it"
    texts = [*VARIED, *_texts("replay", 12)]
    spec, lines, out = tmp_path / "tokenizer.json", tmp_path / "texts", tmp_path / "v.npy"
    spec.write_text(model._onnx._tokenizer.get().to_str())
    lines.write_text("\n".join(texts))
    arguments = [str(spec), str(model._onnx.path), str(lines), str(out)]
    subprocess.run(
        [qemu, "-cpu", OTHER_CPU, sys.executable, "-c", _ENCODE_ON_ANOTHER_CPU, *arguments],
        check=True,
        capture_output=True,
        timeout=600,
    )
    elsewhere, here = np.load(out), model._onnx.encode(texts, whole=True)
    assert elsewhere.shape == (len(texts), 384)
    np.testing.assert_allclose(elsewhere, here, atol=1e-6)
