"""`main`: parse the arguments, then hand the command to its module. Nothing else
happens here, so every command is found, tested and read in its own module."""

from __future__ import annotations

from grimoire.infra.cli.common import UsageError
from grimoire.infra.cli.parser import COMMANDS, build_parser
from grimoire.infra.logs import configure_logging
from grimoire.infra.settings import Settings

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    settings = Settings()
    configure_logging(settings.worker.log_level)
    command = COMMANDS.get(args.command)
    if command is None:
        return 2
    try:
        return command.run(settings, args)
    except UsageError as bad:
        parser.error(str(bad))
