"""Faust's aiokafka transport with a configurable consumer fetch wait.

Faust builds its worker consumer with `fetch_max_wait_ms=1500` hard-coded. A
broker answers an empty fetch only after that wait (tansu after half of it), so
every hop of an idle pipeline costs ~750 ms. The extension point is Faust's own
class structure: Transport.Consumer → Consumer._new_consumer_thread →
ConsumerThread._create_worker_consumer. We subclass along it and set the wait
on the aiokafka consumer before it starts (its Fetcher reads the value then).
`tests/integration/test_transport.py` pins this against library upgrades.
"""

from __future__ import annotations

from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka


class _TunedConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    fetch_max_wait_ms: int = 1500

    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = self.fetch_max_wait_ms
        return consumer


def tuned_transport(fetch_max_wait_ms: int) -> type[faust_aiokafka.Transport]:
    """A Transport class whose worker consumers wait at most `fetch_max_wait_ms`."""
    thread_cls = type(
        "TunedConsumerThread",
        (_TunedConsumerThread,),
        {"fetch_max_wait_ms": fetch_max_wait_ms},
    )

    class TunedConsumer(faust_aiokafka.Consumer):
        def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
            return thread_cls(self, loop=self.loop, beacon=self.beacon)

    class TunedTransport(faust_aiokafka.Transport):
        Consumer = TunedConsumer

    return TunedTransport
