"""What a worker needs to run a cached ONNX export without loading the model it came from.

The export's file is named by a hash of the weights as torch loads them, and its
tokenizer is read through transformers: finding a cached export that way means
importing torch, transformers and sentence-transformers, about 11 s of a worker's
17 s start on a 2-core machine, every start. Both are fixed by the model's files,
so the first start writes them down in a small manifest beside the export, named
by a hash of those files' bytes and of the versions of the libraries that read
them. A later start with the same files and libraries opens the export named
there with the tokenizer as configured there, and goes straight to ONNX Runtime;
a changed file or library names another manifest, which is not there, and the
model is loaded as before.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import orjson

from grimoire.infra.embedding.onnx_encoder import (
    EXPORT_FORMAT,
    OPSET,
    OnnxEncoder,
    ThreadTokenizer,
    quantized_path,
    write_once,
)

__all__ = [
    "MANIFEST_FORMAT",
    "ExportManifest",
    "cached_encoder",
    "manifest_path",
    "remember_export",
    "source_key",
]

logger = logging.getLogger(__name__)

# Part of every manifest's name: bump it when what a manifest holds changes.
MANIFEST_FORMAT = "export-manifest/v1"
# The libraries between the model's files and the export's name and tokenizer.
_READERS = ("sentence-transformers", "transformers", "tokenizers", "torch", "onnx")


@dataclass(frozen=True, slots=True)
class ExportManifest:
    """model_key: the export's file stem (`onnx_encoder.model_key` of the weights);
    dims: the sentence vector's length; tokenizer: the configured tokenizer's JSON
    (`OnnxEncoder.tokenizer_spec`)."""

    model_key: str
    dims: int
    tokenizer: str

    def to_json(self) -> bytes:
        return orjson.dumps(
            {"model_key": self.model_key, "dims": self.dims, "tokenizer": self.tokenizer}
        )

    @classmethod
    def from_json(cls, data: bytes) -> ExportManifest:
        raw = orjson.loads(data)
        if not isinstance(raw, dict):
            raise ValueError("a manifest is a JSON object")
        model_key, dims, tokenizer = raw.get("model_key"), raw.get("dims"), raw.get("tokenizer")
        if not isinstance(model_key, str) or not model_key or "/" in model_key:
            raise ValueError(f"bad model_key {model_key!r}")
        if not isinstance(dims, int) or dims <= 0:
            raise ValueError(f"bad dims {dims!r}")
        if not isinstance(tokenizer, str) or not tokenizer:
            raise ValueError("no tokenizer")
        return cls(model_key, dims, tokenizer)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "absent"


def source_key(model_path: Path) -> str:
    """A hash of every file under `model_path` (names and bytes), the export and
    manifest formats, and the versions of the libraries that read them."""
    if not model_path.is_dir():
        # Nothing to hash: every such name would share one manifest.
        raise ValueError(f"{model_path} is not a model folder")
    digest = hashlib.sha256(f"{MANIFEST_FORMAT}|{EXPORT_FORMAT}|{OPSET}|".encode())
    for distribution in _READERS:
        digest.update(f"{distribution}={_version(distribution)}|".encode())
    for file in sorted(path for path in model_path.rglob("*") if path.is_file()):
        with file.open("rb") as handle:
            content = hashlib.file_digest(handle, "sha256").hexdigest()
        digest.update(f"{file.relative_to(model_path).as_posix()}|{content}|".encode())
    return digest.hexdigest()[:32]


def manifest_path(model_path: Path, cache_dir: Path) -> Path:
    return cache_dir / f"source-{source_key(model_path)}.json"


def _read(path: Path) -> ExportManifest | None:
    try:
        return ExportManifest.from_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # orjson.JSONDecodeError is a ValueError
        logger.warning("ignoring unreadable export manifest %s: %s", path, error)
        return None


def cached_encoder(
    manifest_file: Path, *, lanes: int, int8: bool
) -> tuple[OnnxEncoder, int] | None:
    """The encoder and vector length the manifest names (`manifest_path`), its
    export beside it, without loading the model; None when there is no manifest or
    its export is gone (the caller loads the model, which exports again)."""
    manifest = _read(manifest_file)
    if manifest is None:
        return None
    export = manifest_file.with_name(f"{manifest.model_key}.onnx")
    # `quantize` only reads the float export when its int8 copy is missing.
    if not (export.exists() or (int8 and quantized_path(export).exists())):
        return None
    try:
        tokenizer = ThreadTokenizer(manifest.tokenizer)
    except Exception as error:  # tokenizers raises a bare Exception
        logger.warning("ignoring export manifest %s: its tokenizer: %s", manifest_file, error)
        return None
    encoder = OnnxEncoder.from_export(export, tokenizer, lanes=lanes, int8=int8)
    logger.info("export %s found through its manifest %s", export.name, manifest_file.name)
    return encoder, manifest.dims


def remember_export(manifest_file: Path, encoder: OnnxEncoder, dims: int) -> Path:
    """Write the manifest of `encoder` (made from the model whose `manifest_path`
    is `manifest_file`, its export in the same folder)."""
    manifest = ExportManifest(encoder.model_key, dims, encoder.tokenizer_spec)
    # Only reached without a usable manifest: one that is there is unreadable, or
    # names an export that is gone, and is replaced (a start loading the model
    # meanwhile just writes the same bytes).
    manifest_file.unlink(missing_ok=True)
    return write_once(
        manifest_file,
        lambda temp: temp.write_bytes(manifest.to_json()),
        what="export manifest",
    )
