"""`grimoire serve`'s app: built from settings without connecting to anything; its
lifespan starts the Kafka client and closes what it opened, in that order."""

from __future__ import annotations

from typing import Any

from grimoire.infra import cli
from grimoire.infra.http.deps import HttpDeps, owned_resources
from grimoire.infra.http.server import build_app
from grimoire.infra.settings import Settings


def test_the_served_app_is_built_from_settings_without_connecting() -> None:
    settings = Settings(
        broker_url="kafka://127.0.0.1:1",
        redis_url="redis://127.0.0.1:1/0",
        topic_prefix="gm",
        auth_enabled=True,
        http_kafka_api_key="gmk_00.aaaaaaaaaaaaaaaaaaaa",
        _env_file=None,
    )
    app = build_app(settings)
    deps: HttpDeps = app.state.deps
    assert deps.prefix == "gm"
    assert deps.authenticator.enabled
    assert deps.journal_lag is not None
    assert deps.client._api_key == "gmk_00.aaaaaaaaaaaaaaaaaaaa"  # type: ignore[attr-defined]


async def test_owned_resources_start_the_client_then_stop_it_and_close_the_rest() -> None:
    calls: list[str] = []

    class Client:
        async def start(self) -> None:
            calls.append("start")

        async def stop(self) -> None:
            calls.append("stop")

    async def close_redis() -> None:
        calls.append("redis")

    async def broken() -> None:
        calls.append("broken")
        raise OSError("already gone")

    deps: Any = HttpDeps(
        redis=None,  # type: ignore[arg-type]
        prefix="gm",
        client=Client(),  # type: ignore[arg-type]
        authenticator=None,  # type: ignore[arg-type]
        settings=Settings(_env_file=None),
    )
    async with owned_resources(deps, closers=(broken, close_redis)):
        calls.append("serving")
    assert calls == ["start", "serving", "stop", "broken", "redis"]


def test_serve_takes_host_and_port_and_defaults_to_the_settings(monkeypatch: Any) -> None:
    seen: list[tuple[str, int]] = []

    def fake_run(settings: Settings, *, host: str, port: int) -> None:
        seen.append((host, port))
        raise KeyboardInterrupt  # how uvicorn hands back a Ctrl-C

    monkeypatch.setattr("grimoire.infra.http.server.run_server", fake_run)
    assert cli.main(["serve"]) == 0
    assert cli.main(["serve", "--host", "0.0.0.0", "--port", "9000"]) == 0
    assert seen == [("127.0.0.1", 8080), ("0.0.0.0", 9000)]
