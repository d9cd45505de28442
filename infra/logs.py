"""Logging setup for the CLI entry points (library modules only get loggers)."""

from __future__ import annotations

import logging


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Faust and aiokafka are chatty at INFO about every rebalance step.
    # httpx logs every request of the staging purge's S3 calls at INFO.
    for noisy in ("aiokafka", "faust.transport", "faust.tables", "mode", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
