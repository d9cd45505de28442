"""The HTTP API (`grimoire serve`): a small Starlette app over the tables (reads) and
the client SDK (recall, search and commands through Kafka). See `app.create_app`."""

from grimoire.infra.http.app import create_app
from grimoire.infra.http.deps import HttpDeps

__all__ = ["HttpDeps", "create_app"]
