"""The Faust app factory: everything the worker needs, built from Settings, no globals."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
from faust.types.auth import CredentialsT

from grimoire.agents.faust_agents import FaustSink, register_agents
from grimoire.agents.maintenance.pressure import faust_consumer_lag
from grimoire.agents.ports import Embedder
from grimoire.infra.purge import register_staging_purge
from grimoire.infra.runtime import Runtime, worker_topology
from grimoire.infra.settings import Settings
from grimoire.infra.transport import tuned_transport
from grimoire.topics.declarations import TopicNames
from grimoire.topics.security import KafkaSecurity

logger = logging.getLogger(__name__)


class GrimoireApp(faust.App):
    """A Faust app whose consumer transport honours `consumer_fetch_max_wait_ms`."""

    fetch_max_wait_ms: int = 1500

    def _new_transport(self) -> Any:
        transport_cls = tuned_transport(self.fetch_max_wait_ms)
        return transport_cls(self.conf.broker_consumer, self)


def faust_credentials(security: KafkaSecurity) -> CredentialsT | None:
    """What Faust's `broker_credentials` takes for `security` (None: plaintext).
    Faust hands these to every aiokafka client it makes: consumer, producer and the
    client that creates its topics."""
    if security.uses_sasl:
        # With a context Faust speaks SASL_SSL, without one SASL_PLAINTEXT.
        return faust.SASLCredentials(
            username=security.sasl_username,
            password=security.sasl_password,
            mechanism=security.sasl_mechanism,
            ssl_context=security.ssl_context(),
        )
    context = security.ssl_context()
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> GrimoireApp:
    app = GrimoireApp(
        settings.worker.app_id,
        broker=settings.broker.url,  # kafka:// whatever the protocol: credentials say it
        broker_credentials=faust_credentials(settings.kafka_security),
        store="memory://",
        datadir=str(settings.worker.data_dir),
        autodiscover=False,
        key_serializer="raw",
        value_serializer="raw",
        topic_partitions=settings.broker.partitions,
        topic_replication_factor=settings.broker.replication_factor,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.broker.session_timeout_s,
        broker_heartbeat_interval=settings.broker.heartbeat_interval_s,
        broker_rebalance_timeout=settings.broker.rebalance_timeout_s,
        broker_commit_interval=settings.broker.commit_interval_s,
        web_enabled=settings.worker.web_enabled,
        web_port=settings.worker.web_port,
        web_bind="127.0.0.1",
    )
    app.fetch_max_wait_ms = settings.broker.consumer_fetch_max_wait_ms
    names = TopicNames(settings.broker.topic_prefix)
    # What the worker's pressure watches: the inputs waiting to be journaled and the
    # journal waiting to be applied.
    ingest_topics = {
        names.episodes,
        names.tool_events,
        names.transcripts,
        names.outcomes,
        names.journal,
    }
    runtime = Runtime(
        settings, FaustSink(app), embedder, lag=faust_consumer_lag(app, ingest_topics)
    )
    register_agents(app, runtime, worker_topology(settings))
    register_staging_purge(app, settings)

    @app.on_before_shutdown.connect  # type: ignore[misc]
    async def _close_runtime(_app: Any, **_: Any) -> None:
        await runtime.close()

    catching_up: set[asyncio.Future[None]] = set()

    @app.on_partitions_assigned.connect  # type: ignore[misc]
    async def _on_partitions_assigned(_app: Any, *_: Any, **__: Any) -> None:
        # Kept witness heads go stale across a rebalance (Runtime.partitions_assigned).
        runtime.partitions_assigned()
        held: dict[str, list[int]] = {}
        for tp in app.assignor.assigned_actives():
            held.setdefault(tp.topic, []).append(tp.partition)
        if journal_partitions := held.get(names.journal):
            # In the background: the check loads the handlers (the model) first.
            catching_up.add(asyncio.ensure_future(runtime.catch_up_assigned(journal_partitions)))
            for task in [t for t in catching_up if t.done()]:
                catching_up.discard(task)
        logger.info(
            "assigned: %s",
            "; ".join(f"{topic} {sorted(parts)}" for topic, parts in sorted(held.items()))
            or "nothing",
        )

    app.grimoire_runtime = runtime  # type: ignore[attr-defined]
    return app
