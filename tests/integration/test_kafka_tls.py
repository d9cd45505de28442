"""Kafka over TLS, end to end: a broker of the module's own behind the TLS terminator
(infra/local/tls.py: stunnel in front of tansu, which cannot serve TLS itself), and
the worker, the SDK and the HTTP API all connecting through it with the CA file
(`GRIMOIRE_KAFKA_SECURITY_PROTOCOL=SSL`, `GRIMOIRE_KAFKA_SSL_CAFILE`).

An episode goes in through the SDK and one through the HTTP API; both are recalled
through each. The HTTP API's lag probe (its own admin client and consumer) reads
the journal through TLS too. A plaintext client, and a TLS client that does not
trust the local CA, are both refused at the TLS port.

SASL is not tested against a broker: tansu 0.6.0 keeps no SCRAM users and has no
PLAIN (docs/operations.md, "Kafka TLS and SASL").
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError

from grimoire.infra.http.server import build_app
from grimoire.infra.local.services import ServicePorts
from grimoire.infra.local.tls import TlsLocalServices, tls_handshake
from grimoire.infra.local.worker_process import start_worker, stop_worker
from grimoire.infra.settings import Settings
from grimoire.topics.client import GrimoireClient
from grimoire.topics.schemas import EpisodeV1
from grimoire.topics.security import KafkaSecurity
from tests.support.stacks import WHEEL_CACHE, services_up, stack_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0
T0 = 1_790_000_000_000
Eventually = Callable[..., Awaitable[Any]]


def _free_ports(count: int) -> list[int]:
    # All bound at once, so the kernel hands out distinct ports.
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


@pytest.fixture(scope="module")
def tls_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsLocalServices]:
    kafka, redis, tls = _free_ports(3)
    state = tmp_path_factory.mktemp("tls-state")
    ports = ServicePorts(kafka=kafka, redis=redis)
    with services_up(
        TlsLocalServices(state, ports, wheel_cache=WHEEL_CACHE, kafka_tls_port=tls)
    ) as services:
        yield services


@pytest.fixture(scope="module")
def tls_settings(tls_services: TlsLocalServices) -> Settings:
    return stack_settings(
        tls_services.kafka_tls_bootstrap,
        tls_services.redis_url,
        "tls",
        kafka_security_protocol="SSL",
        kafka_ssl_cafile=tls_services.tls_files.ca,
    )


def _sdk(settings: Settings) -> GrimoireClient:
    return GrimoireClient(
        settings.bootstrap_servers,
        settings.broker.topic_prefix,
        partitions=settings.broker.partitions,
        security=settings.kafka_security,
    )


@pytest.fixture(scope="module")
async def tls_worker(
    tls_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[subprocess.Popen[bytes]]:
    # The worker reads GRIMOIRE_KAFKA_* from its environment, as a deployment's would.
    log = tmp_path_factory.mktemp("tls-worker") / "worker.log"
    process = start_worker(tls_settings, log, cwd=ROOT)
    try:
        async with _sdk(tls_settings) as probe:
            await probe.wait_until_ready(timeout=READY_S)
    except BaseException:
        stop_worker(process)
        sys.stderr.write(log.read_text(errors="replace")[-8000:])
        raise
    yield process
    stop_worker(process)


@dataclass
class Served:
    url: str
    server: uvicorn.Server


@pytest.fixture
async def http_api(tls_settings: Settings, eventually: Eventually) -> AsyncIterator[Served]:
    """`grimoire serve`'s app, built from the TLS settings (its own SDK client and lag
    probe, started by its lifespan), on a port of the kernel's choosing."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        build_app(tls_settings), lifespan="on", log_config=None, access_log=False
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        await eventually(lambda: asyncio.sleep(0, result=server.started), timeout=30)
        yield Served(url=f"http://127.0.0.1:{port}", server=server)
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=15)
        listener.close()


def _gists(items: Any) -> list[str]:
    return [item["gist"] if isinstance(item, dict) else item.gist for item in items]


async def test_worker_sdk_and_http_api_over_tls(
    tls_settings: Settings,
    tls_worker: subprocess.Popen[bytes],
    http_api: Served,
    eventually: Eventually,
) -> None:
    agent = f"tls-agent-{uuid.uuid4().hex[:8]}"
    async with (
        _sdk(tls_settings) as sdk,
        httpx.AsyncClient(base_url=http_api.url, timeout=30) as http,
    ):
        await sdk.publish_episode(
            EpisodeV1(
                agent_id=agent, ts=T0, event_id="sdk-1", importance=0.9,
                text="the RPC gateway on node seven timed out behind the load balancer",
            )
        )  # fmt: skip
        posted = await http.post(
            f"/v1/agents/{agent}/events",
            json={
                "kind": "episode", "ts": T0 + 1000, "event_id": "http-1", "importance": 0.9,
                "text": "disk full on node seven, the nightly backups were paused",
            },
        )  # fmt: skip
        assert posted.status_code == 202, posted.text

        async def sdk_recalls_both() -> list[str]:
            answer = await sdk.recall(agent, "node seven", k=5, record_usage=False)
            gists = _gists(answer.items)
            return gists if len(gists) >= 2 else []

        async def http_recalls_both() -> list[str]:
            answer = await http.post(
                f"/v1/agents/{agent}/recall", json={"query": "node seven", "k": 5}
            )
            assert answer.status_code == 200, answer.text
            gists = _gists(answer.json()["items"])
            return gists if len(gists) >= 2 else []

        for recalled in (
            await eventually(sdk_recalls_both, timeout=60),
            await eventually(http_recalls_both, timeout=30),
        ):
            assert any("RPC gateway" in gist for gist in recalled), recalled
            assert any("disk full" in gist for gist in recalled), recalled

        async def lag_scraped() -> bool:
            metrics = await http.get("/metrics")
            return metrics.status_code == 200 and "grimoire_journal_lag{" in metrics.text

        # The lag probe is a Kafka admin client and consumer of the HTTP API's own.
        await eventually(lag_scraped, timeout=30, interval=0.5)


async def test_the_tls_port_refuses_plaintext_and_unknown_authorities(
    tls_services: TlsLocalServices,
) -> None:
    assert tls_handshake(tls_services.kafka_tls_port, tls_services.tls_files.ca).startswith("TLS")

    plaintext = AIOKafkaClient(
        bootstrap_servers=tls_services.kafka_tls_bootstrap, request_timeout_ms=3000
    )
    try:
        with pytest.raises(KafkaConnectionError):
            await plaintext.bootstrap()
    finally:
        await plaintext.close()

    # TLS, but trusting only the system's authorities: the local CA is not among them.
    untrusting = AIOKafkaClient(
        bootstrap_servers=tls_services.kafka_tls_bootstrap,
        request_timeout_ms=3000,
        **KafkaSecurity(security_protocol="SSL").aiokafka_kwargs(),
    )
    try:
        with pytest.raises(KafkaConnectionError):
            await untrusting.bootstrap()
    finally:
        await untrusting.close()


async def test_the_broker_advertises_only_the_tls_port(tls_services: TlsLocalServices) -> None:
    """The plaintext port answers (on loopback, for the terminator), but the brokers
    it names are at the TLS port: a client that reached it is sent to TLS."""
    client = AIOKafkaClient(bootstrap_servers=f"127.0.0.1:{tls_services.ports.kafka}")
    try:
        # Only the bootstrap connection: the metadata read on it names the brokers.
        await client.bootstrap()
        advertised = {(broker.host, broker.port) for broker in client.cluster.brokers()}
    finally:
        await client.close()
    assert advertised == {("127.0.0.1", tls_services.kafka_tls_port)}
