"""Fails loudly when the environment drifted from what Grimoire is pinned to run on.

Run by `make setup` right after installing: a CUDA build of torch (gigabytes,
pulled in by an unpinned resolver) or a broken dependency set must stop the
build, not surface later as a slow or crashing worker.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

EXPECTED_TORCH = "2.13.0"


def problems() -> list[str]:
    found: list[str] = []
    torch_version = metadata.version("torch")
    if torch_version.split("+")[0] != EXPECTED_TORCH:
        found.append(f"torch {torch_version} installed, expected {EXPECTED_TORCH} (CPU build)")
    cuda = sorted(
        dist.metadata["Name"]
        for dist in metadata.distributions()
        if dist.metadata["Name"] and dist.metadata["Name"].lower().startswith(("nvidia-", "triton"))
    )
    if cuda:
        found.append(f"CUDA packages installed: {', '.join(cuda)}")
    check = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        found.append(f"pip check failed:\n{check.stdout}{check.stderr}")
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(f"environment check: {problem}", file=sys.stderr)
    if not found:
        print(f"environment check: ok (torch {metadata.version('torch')}, pip check clean)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
