"""What answering on a caller's reply topic needs from a handler and its request."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from grimoire.agents.ports.io import EventSink, InputMessage

if TYPE_CHECKING:
    from grimoire.streams.inbound.events import Rejection
    from grimoire.tables.ports.trust import AuthMetrics
    from grimoire.tables.trust.api_keys import Authenticator
    from grimoire.topics.declarations import TopicNames

__all__ = ["AddressedRequest", "ReplyingHandler"]


class ReplyingHandler(Protocol):
    """A handler that answers on the caller's reply topic, as `admitted` and
    `reply_error` use it."""

    sink: EventSink
    topics: TopicNames
    authenticator: Authenticator | None
    auth_metrics: AuthMetrics | None

    async def reply_rejection(self, message: InputMessage, rejection: Rejection) -> None: ...


class AddressedRequest(Protocol):
    """A request that names its agent and the topic its answer goes to."""

    @property
    def agent_id(self) -> str: ...

    @property
    def reply_to(self) -> str: ...
