"""Sentence embeddings through ONNX Runtime, from a SentenceTransformer exported once.

For one short recall query ONNX Runtime is about three times faster than torch
on CPU (all-MiniLM-L6-v2: p50 ~7 ms against ~20 ms) and gives the same vectors
to ~1e-7, so the transformer is exported to ONNX, cached on disk, and the mean
pooling and normalisation the SentenceTransformer would apply are done here.
An int8 copy of the export (`quantize`) embeds a query in about half that time
again, with vectors within cosine ~0.99 of the float ones.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import onnxruntime
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
DEFAULT_CACHE_DIR = Path(".grimoire/models")
# Part of the cache key: bump it whenever the exported graph changes shape
# (inputs, outputs, opset), so no worker loads an export made by older code.
EXPORT_FORMAT = "last_hidden_state/v1"
OPSET = 17
# Part of the quantized file's name, for the same reason, and of the vector space
# a prefix is claimed with (v1 had signed weights: see `quantize`).
QUANTIZED_FORMAT = "int8-matmul-channel-u8w-v2"
# Graph input -> attribute of a `tokenizers.Encoding`.
_ENCODING_FIELDS = {
    "input_ids": "ids",
    "attention_mask": "attention_mask",
    "token_type_ids": "type_ids",
}


class OnnxEncoder:
    """Two sessions on one exported file. A batch that goes to the model whole
    (a single recall query, most often) gets `lanes` intra-op threads: all cores
    on one small input. Batches split across the embedder's lanes run on a
    single-threaded session, one call per lane thread (`run` is thread-safe and
    releases the GIL), for the reasons the torch lanes are single-threaded.

    `per_row` runs every text on its own through one single-threaded session,
    for a quantized model (see `quantize`): its activations are scaled by the
    range of the whole input tensor, so a text batched with others, or padded,
    would get a slightly different vector. One text, one vector, however the
    calls were batched, is what makes a replay rebuild the same memory."""

    def __init__(
        self,
        path: Path,
        tokenizer: ThreadTokenizer,
        *,
        lanes: int,
        per_row: bool = False,
        model_key: str = "",
    ) -> None:
        self.path = path
        self.per_row = per_row
        self.model_key = model_key  # `model_key()` of the weights it was exported from
        self._tokenizer = tokenizer
        self._whole = _session(path, 1 if per_row else max(1, lanes))
        self._lane = _session(path, 1) if lanes > 1 and not per_row else self._whole
        # Feed only what the graph declares: models without token_type_ids work too.
        self._inputs = [graph_input.name for graph_input in self._whole.get_inputs()]
        unknown = set(self._inputs) - set(_ENCODING_FIELDS)
        if unknown or "attention_mask" not in self._inputs:
            raise ValueError(f"{path}: unsupported graph inputs {self._inputs}")

    @classmethod
    def from_sentence_transformer(
        cls, model: SentenceTransformer, cache_dir: Path, *, lanes: int, int8: bool = False
    ) -> OnnxEncoder:
        check_supported(model)
        max_length = model.max_seq_length or model.tokenizer.model_max_length
        tokenizer = ThreadTokenizer.like(model.tokenizer, int(max_length))
        return cls.from_export(
            export(model, tokenizer, cache_dir), tokenizer, lanes=lanes, int8=int8
        )

    @classmethod
    def from_export(
        cls, exported: Path, tokenizer: ThreadTokenizer, *, lanes: int, int8: bool
    ) -> OnnxEncoder:
        """The encoder of an export (its int8 copy, made if missing, with `int8`),
        named by the export's stem whichever file runs."""
        if int8:
            path = quantize(exported)
            return cls(path, tokenizer, lanes=lanes, per_row=True, model_key=exported.stem)
        return cls(exported, tokenizer, lanes=lanes, model_key=exported.stem)

    @property
    def tokenizer_spec(self) -> str:
        """The configured tokenizer as JSON (`ThreadTokenizer`)."""
        return str(self._tokenizer.get().to_str())

    def encode(self, texts: Sequence[str], *, whole: bool) -> Vectors:
        """Unit-length sentence vectors; `whole` picks the multi-threaded session."""
        session = self._whole if whole else self._lane
        if self.per_row and len(texts) > 1:
            return np.vstack([self._encode(session, [text]) for text in texts])
        return self._encode(session, texts)

    def _encode(self, session: onnxruntime.InferenceSession, texts: Sequence[str]) -> Vectors:
        encodings = self._tokenizer.get().encode_batch(list(texts))
        feed = {
            name: np.array([getattr(e, _ENCODING_FIELDS[name]) for e in encodings], dtype=np.int64)
            for name in self._inputs
        }
        (hidden,) = session.run(["last_hidden_state"], feed)
        mask = feed["attention_mask"].astype(np.float32)
        counts = np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        pooled = np.einsum("bsd,bs->bd", hidden, mask) / counts
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return np.asarray(pooled / norms, dtype=np.float32)


class ThreadTokenizer(threading.local):
    """A fast tokenizer keeps padding and truncation as shared mutable state, and
    transformers sets them on every call, so concurrent calls fail ("Already
    borrowed"). Each thread instead gets its own `tokenizers.Tokenizer` from one
    configured spec: the JSON of a tokenizer that pads to the longest and
    truncates at `max_seq_length`, as SentenceTransformer tokenises (the JSON
    carries both settings, so the spec alone rebuilds it, in any process)."""

    def __init__(self, spec: str) -> None:
        from tokenizers import Tokenizer

        # threading.local runs this again on each thread's first access.
        self._tokenizer = Tokenizer.from_str(spec)

    @classmethod
    def like(cls, hf_tokenizer: Any, max_length: int) -> ThreadTokenizer:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
        # Explicit, as tokenizer.json may carry fixed-length padding of its own.
        tokenizer.enable_truncation(max_length, direction=hf_tokenizer.truncation_side)
        tokenizer.enable_padding(
            direction=hf_tokenizer.padding_side,
            pad_id=hf_tokenizer.pad_token_id,
            pad_type_id=hf_tokenizer.pad_token_type_id,
            pad_token=hf_tokenizer.pad_token,
        )
        return cls(tokenizer.to_str())

    def get(self) -> Any:
        return self._tokenizer


def check_supported(model: SentenceTransformer) -> None:
    """Only Transformer -> mean Pooling (-> Normalize) is reproduced here; any
    other pipeline would silently give vectors unlike the torch backend's."""
    modules: list[Any] = list(model)
    names = [type(module).__name__ for module in modules]
    pooling = modules[1].get_config_dict() if len(modules) > 1 else {}
    if (
        names[:2] != ["Transformer", "Pooling"]
        or names[2:] not in ([], ["Normalize"])
        or pooling.get("pooling_mode") != "mean"
        or getattr(modules[0], "do_lower_case", False)
    ):
        raise ValueError(
            f"the onnx backend handles Transformer + mean Pooling (+ Normalize) only, "
            f"not {names} {pooling}: use the torch backend"
        )


def export(model: SentenceTransformer, tokenizer: ThreadTokenizer, cache_dir: Path) -> Path:
    """The ONNX file for `model`'s transformer, exported on first use only."""
    transformer: Any = model[0].auto_model
    names = _input_names(model)
    path = cache_dir / f"{model_key(model)}.onnx"
    return write_once(path, lambda temp: _export(transformer, tokenizer, names, temp))


def model_key(model: SentenceTransformer) -> str:
    """`<model type>-<weights_key>`: names the model's weights, whichever backend runs them."""
    transformer: Any = model[0].auto_model
    return f"{transformer.config.model_type}-{weights_key(transformer, _input_names(model))}"


def _input_names(model: SentenceTransformer) -> list[str]:
    return [name for name in model.tokenizer.model_input_names if name in _ENCODING_FIELDS]


def quantize(exported: Path) -> Path:
    """The int8 copy of an exported model, made on first use only.

    Dynamic quantization of the MatMul weights, one scale per output channel:
    on all-MiniLM-L6-v2 it embeds a short query in about 0.6 of the time of
    the float export and keeps each vector within cosine ~0.99 of the float
    model's (per-tensor scales: ~0.96). Deterministic: the same export always
    quantizes to the same file.

    The weights are unsigned. With signed weights, ONNX Runtime multiplies the
    (unsigned) activations by them with a pairwise instruction that saturates
    at 16 bits on CPUs without VNNI (AVX2) and exactly with VNNI (AVX-512):
    the same text got vectors at cosine 0.96-0.99 on the two (LoCoMo R@5 0.6108 on
    one, 0.6158 on the other), so workers on mixed hardware, or a replay on
    another machine, would write two vector spaces into one prefix. Unsigned
    by unsigned has no saturating path: the vectors agree across CPUs to
    ~1e-8, as the float model's do."""
    path = quantized_path(exported)

    def write(temp: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # The quantizer writes (and deletes) `<input>-inferred.onnx` beside its input:
        # workers quantizing at once from the shared export took each other's file
        # away. Each reads its own link to the export, in a directory of its own.
        with tempfile.TemporaryDirectory(dir=temp.parent, prefix=".quantize.") as private:
            source = Path(private) / exported.name
            try:
                os.link(exported, source)
            except OSError:  # a file system without hard links
                shutil.copyfile(exported, source)
            # The quantizer's advice to pre-process (shape inference) is not taken: the
            # vectors it gives without it are measured (cosine, LoCoMo) and kept.
            with _quiet_quantizer():
                quantize_dynamic(
                    source,
                    temp,
                    op_types_to_quantize=["MatMul"],
                    per_channel=True,
                    weight_type=QuantType.QUInt8,
                )

    return write_once(path, write)


def quantized_path(exported: Path) -> Path:
    """Where `quantize` keeps the int8 copy of an export."""
    return exported.with_name(f"{exported.stem}-{QUANTIZED_FORMAT}.onnx")


_PREPROCESS_ADVICE = "consider to run pre-processing before quantization"


@contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """While the block runs, drop what the quantizer says on the root logger:
    a line of INFO per tensor (hundreds) and its pre-processing advice. Other
    warnings and errors still pass."""

    def keep(record: logging.LogRecord) -> bool:
        if _PREPROCESS_ADVICE in record.getMessage():
            return False
        return record.levelno >= logging.WARNING

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def write_once(path: Path, write: Callable[[Path], object], what: str = "ONNX model") -> Path:
    """`path`, written by `write` (given a temp file beside it) unless it exists."""
    if path.exists():
        logger.info("using cached %s %s", what, path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    # Workers starting together each write their own temp file and rename it
    # into place: nobody ever opens half a file, and the last rename wins harmlessly.
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(temp))
        # Flushed first, or a crash could leave a truncated file under the final name.
        with open(temp, "rb+") as written:
            os.fsync(written.fileno())
        os.chmod(temp, 0o644)  # mkstemp's 0600 would hide the cache from other users' workers
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    logger.info("wrote %s %s", what, path)
    return path


def weights_key(transformer: Any, input_names: Sequence[str]) -> str:
    """A hash of everything the exported graph depends on: the weights as loaded
    (whatever files they came from), the config and the export format. Hashing the
    full weights (~90 MB, ~60 ms with sha256) is stale-proof, unlike names/sizes."""
    import torch

    digest = hashlib.sha256(f"{EXPORT_FORMAT}|{OPSET}|{','.join(input_names)}|".encode())
    digest.update(transformer.config.to_json_string().encode())
    for name, tensor in transformer.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"|{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(flat.view(torch.uint8).numpy())
    return digest.hexdigest()[:32]


def _export(transformer: Any, tokenizer: ThreadTokenizer, names: list[str], path: Path) -> None:
    import torch

    class LastHiddenState(torch.nn.Module):
        # The model's forward takes keyword arguments; the tracer passes positional ones.
        def __init__(self) -> None:
            super().__init__()
            self.model = transformer

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            named = dict(zip(names, inputs, strict=True))
            hidden: torch.Tensor = self.model(**named).last_hidden_state
            return hidden

    # Two texts of different lengths: the trace then sees a padded attention mask.
    encodings = tokenizer.get().encode_batch(["hello world", "a slightly longer example text"])
    example = tuple(
        torch.tensor([getattr(e, _ENCODING_FIELDS[name]) for e in encodings], dtype=torch.int64)
        for name in names
    )
    transformer.eval()
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(),
            example,
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "seq"} for name in [*names, "last_hidden_state"]},
            opset_version=OPSET,
            dynamo=False,
        )


def _session(path: Path, threads: int) -> onnxruntime.InferenceSession:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle pool threads would otherwise spin for a while after each run, taking
    # the cores Redis and the event loop need for the rest of the recall
    # (measured in-process: p99 at 10,000 memories 87-93 ms spinning, 63-74 not).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
