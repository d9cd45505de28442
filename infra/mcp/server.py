"""The MCP server on the official `mcp` SDK (`MCPServer`), over stdio or streamable HTTP.

Every tool is one call of the HTTP API through `GrimoireApi`: the key given at start
decides what the tools may touch, and a refusal (401/403/400/404) comes back as a tool
error carrying the API's message, so the model reads why and can correct itself.
`forget` and `retract` are registered only when the server is started with
`allow_destructive`; the API still checks the key on each call. `unpublish_memory`
is always listed (marked destructive: it removes the siblings' copies, never the
agent's own memory), since it only undoes what the agent itself shared.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

import httpx
import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from grimoire.infra.mcp.api import EventKind, GrimoireApi, HttpApiError, RecallCall
from grimoire.topics.options import RecallBudgets, RecallFilters, RecallMode

__all__ = [
    "DESTRUCTIVE_TOOLS",
    "READ_WRITE_TOOLS",
    "McpOptions",
    "Transport",
    "build_server",
    "run_server",
]

logger = logging.getLogger(__name__)

#: Always listed.
READ_WRITE_TOOLS: Final = (
    "remember",
    "recall",
    "search",
    "fetch_memory",
    "read_playbook",
    "causal_neighbours",
    "facts",
    "publish_memory",
    "unpublish_memory",
    "clade_entries",
)
#: Listed only with `allow_destructive`.
DESTRUCTIVE_TOOLS: Final = ("retract", "forget")

Transport = Literal["stdio", "http"]

_INSTRUCTIONS: Final = (
    "Grimoire is this agent's long-term memory. `remember` stores an episode or a "
    "transcript turn; `recall` answers a question from memory (and counts the use); "
    "`search` looks without counting; a recalled item may carry only a gist: "
    "`fetch_memory` gives its full text. `read_playbook` returns the agent's curated "
    "PLAYBOOK.md; `facts` reads its bi-temporal facts. `publish_memory` shares a memory "
    "with the agent's clades (siblings get a copy), `unpublish_memory` withdraws it, "
    "`clade_entries` lists what a clade's members shared. Results are compact JSON."
)


@dataclass(frozen=True, slots=True)
class McpOptions:
    """What one MCP server process is bound to.

    `agent_id` is the default agent of every tool (a tool's `agent` argument overrides
    it); without one, each call must name its agent. `allow_destructive` lists
    `forget` and `retract`; the key must allow them too (the API answers 403).
    """

    api_url: str = "http://127.0.0.1:8080"
    api_key: str | None = None
    agent_id: str | None = None
    allow_destructive: bool = False
    timeout_s: float = 30.0


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _compact(value: Any) -> Any:
    # Nulls say nothing to a model and cost tokens: dropped at every depth.
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _json_text(value: Any) -> str:
    return orjson.dumps(_compact(value)).decode()


# Argument types, shared by the tools that take them; the descriptions are what the
# model reads in the tool's input schema.
Agent = Annotated[
    str | None,
    Field(description="The agent id; omit to use the server's default agent."),
]
Tags = Annotated[
    list[str] | None, Field(description="Tags, namespaced as you like (e.g. infra/rpc).")
]
Entities = Annotated[list[str] | None, Field(description="Names of the things involved.")]
Clade = Field(
    description="Only this clade (one the agent belongs to); omit for every clade it belongs to."
)


class _Tools:
    """The tool functions, bound to one server's options (the API client comes from
    the server's lifespan, one per running server)."""

    def __init__(self, options: McpOptions, clock: Callable[[], int]) -> None:
        self._options = options
        self._clock = clock

    def _agent(self, agent: str | None) -> str:
        chosen = agent or self._options.agent_id
        if not chosen:
            raise ToolError("no agent given and this server has no default agent: pass `agent`")
        return chosen

    @staticmethod
    def _api(ctx: Context) -> GrimoireApi:
        api = ctx.request_context.lifespan_context
        if not isinstance(api, GrimoireApi):  # a server built elsewhere, never ours
            raise ToolError("the Grimoire API client is not available in this server")
        return api

    async def remember(
        self,
        ctx: Context,
        text: Annotated[
            str,
            Field(
                min_length=1,
                description="What happened (an episode) or what was said (a transcript turn).",
            ),
        ],
        agent: Agent = None,
        event: Annotated[
            EventKind,
            Field(description="`episode` (default) or `transcript` (one turn of a dialogue)."),
        ] = "episode",
        role: Annotated[
            Literal["user", "assistant"] | None,
            Field(description="Transcript turns only: who spoke (default assistant)."),
        ] = None,
        ts: Annotated[
            int | None,
            Field(ge=0, description="Event time in epoch milliseconds (default: now)."),
        ] = None,
        event_id: Annotated[
            str | None,
            Field(description="Your id for the event: resending it changes nothing."),
        ] = None,
        session_id: str | None = None,
        run_id: str | None = None,
        actor_id: str | None = None,
        tick: Annotated[int | None, Field(ge=0)] = None,
        tags: Tags = None,
        entities: Entities = None,
        turn_id: Annotated[
            str | None,
            Field(description="Transcript turns only: groups the lines of one turn."),
        ] = None,
        episode_type: Annotated[
            Literal["observation", "action", "regime_shift", "alert", "report", "coordination"]
            | None,
            Field(description="Episodes only (default observation)."),
        ] = None,
        outcome: Annotated[
            str | None, Field(description="Episodes only: how it turned out.")
        ] = None,
        importance: Annotated[
            float | None, Field(ge=0.0, le=1.0, description="Episodes only: 0..1.")
        ] = None,
        error: Annotated[
            str | None, Field(description="Episodes only: an error message seen.")
        ] = None,
        paths: Annotated[
            list[str] | None, Field(description="Episodes only: file paths involved.")
        ] = None,
        urls: Annotated[
            list[str] | None, Field(description="Episodes only: URLs involved.")
        ] = None,
    ) -> str:
        """Store something in long-term memory: an episode (what the agent observed or
        did) or one transcript turn. It is ingested asynchronously; the answer says it was
        accepted, not yet admitted."""
        episode_only: dict[str, Any] = {
            "episode_type": episode_type,
            "outcome": outcome,
            "importance": importance,
            "error": error,
            "paths": paths,
            "urls": urls,
        }
        common: dict[str, Any] = {
            "ts": self._clock() if ts is None else ts,
            "event_id": event_id,
            "session_id": session_id,
            "run_id": run_id,
            "actor_id": actor_id,
            "tick": tick,
            "tags": tags,
            "entities": entities,
        }
        if event == "episode":
            if role is not None or turn_id is not None:
                raise ToolError("`role` and `turn_id` apply to transcript turns only")
            fields: dict[str, Any] = {"text": text, **common, **episode_only}
        else:
            misplaced = sorted(name for name, value in episode_only.items() if value is not None)
            if misplaced:
                raise ToolError(f"{', '.join(misplaced)}: episodes only, not transcript turns")
            line = {"role": role or "assistant", "content": text}
            fields = {"line": line, **common, "turn_id": turn_id}
        agent_id = self._agent(agent)
        fields = {name: value for name, value in fields.items() if value is not None}
        try:
            answer = await self._api(ctx).publish(agent_id, event, fields)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text({"agent": agent_id, "kind": event, **answer})

    async def _ask(
        self,
        ctx: Context,
        route: Literal["recall", "search"],
        agent: str | None,
        query: RecallCall,
    ) -> str:
        agent_id = self._agent(agent)
        api = self._api(ctx)
        try:
            if route == "recall":
                answer = await api.recall(agent_id, query)
            else:
                answer = await api.search(agent_id, query)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text(answer)

    async def recall(
        self,
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="What to remember about.")],
        agent: Agent = None,
        k: Annotated[int | None, Field(ge=1, description="How many items at most.")] = None,
        session_id: Annotated[str | None, Field(description="Only this session.")] = None,
        run_id: Annotated[str | None, Field(description="Only this run.")] = None,
        actor_id: Annotated[str | None, Field(description="Only this actor.")] = None,
        since: Annotated[
            int | None, Field(ge=0, description="Event time from, epoch ms (inclusive).")
        ] = None,
        until: Annotated[
            int | None, Field(ge=0, description="Event time until, epoch ms (inclusive).")
        ] = None,
        kinds: Annotated[
            list[str] | None,
            Field(
                description="Only these kinds: episode, insight, heuristic, warning, "
                "causal_link, strategy_fragment, summary, aggregate."
            ),
        ] = None,
        layers: Annotated[
            list[str] | None,
            Field(
                description="Only these layers: input, contemplation, output, observation, action."
            ),
        ] = None,
        token_budget: Annotated[
            int | None, Field(ge=0, description="Tokens the answer may use in all.")
        ] = None,
        full_text_items: Annotated[
            int | None,
            Field(ge=0, description="How many top items carry full text (others: a gist)."),
        ] = None,
        mode: Annotated[
            RecallMode | None,
            Field(description="Retrieval depth: auto (default), none, light, semantic, full."),
        ] = None,
        explain: Annotated[
            bool | None, Field(description="Add each item's per-factor score breakdown.")
        ] = None,
        expand_episodes: Annotated[
            bool | None,
            Field(description="Attach each item's episode siblings with their roles."),
        ] = None,
    ) -> str:
        """Recall from long-term memory: the items most useful for the query, ranked,
        within the budgets. The recall counts as a use of what it returns (use `search`
        to look without counting). Items without `text` carry a gist: `fetch_memory`
        gives the full text."""
        return await self._ask(
            ctx,
            "recall",
            agent,
            _query(
                query,
                k=k,
                filters={
                    "session_id": session_id,
                    "run_id": run_id,
                    "actor_id": actor_id,
                    "since": since,
                    "until": until,
                    "kinds": kinds,
                    "layers": layers,
                },
                budgets={"token_budget": token_budget, "full_text_items": full_text_items},
                mode=mode,
                explain=explain,
                expand_episodes=expand_episodes,
            ),
        )

    async def search(
        self,
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="What to look for.")],
        agent: Agent = None,
        k: Annotated[int | None, Field(ge=1, description="How many items at most.")] = None,
        session_id: Annotated[str | None, Field(description="Only this session.")] = None,
        kinds: Annotated[
            list[str] | None, Field(description="Only these kinds (as for recall).")
        ] = None,
        layers: Annotated[
            list[str] | None, Field(description="Only these layers (as for recall).")
        ] = None,
        explain: Annotated[
            bool | None, Field(description="Add each item's per-factor score breakdown.")
        ] = None,
    ) -> str:
        """Search memory the way recall would rank it, for inspection: nothing is counted
        as used, so searching does not change what later recalls prefer."""
        return await self._ask(
            ctx,
            "search",
            agent,
            _query(
                query,
                k=k,
                filters={"session_id": session_id, "kinds": kinds, "layers": layers},
                budgets={},
                mode=None,
                explain=explain,
                expand_episodes=None,
            ),
        )

    async def fetch_memory(
        self,
        ctx: Context,
        memory_id: Annotated[
            str, Field(min_length=1, description="An item's `id` from recall or search.")
        ],
        agent: Agent = None,
    ) -> str:
        """One memory by id with its full text and fields: the second step after a
        recall that returned only a gist."""
        agent_id = self._agent(agent)
        try:
            return _json_text(await self._api(ctx).memory(agent_id, memory_id))
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure

    async def causal_neighbours(
        self,
        ctx: Context,
        memory_id: Annotated[
            str, Field(min_length=1, description="An item's `id` from recall or search.")
        ],
        hops: Annotated[
            int, Field(ge=1, le=4, description="How many cause → effect edges away (1-4).")
        ] = 1,
        direction: Annotated[
            Literal["effects", "causes", "both"],
            Field(
                description="effects: what followed this memory; causes: what led to it; "
                "both: either way."
            ),
        ] = "effects",
        agent: Agent = None,
    ) -> str:
        """The memory's neighbours in the agent's causal graph (learned from runs'
        outcomes): what tended to follow doing it, or what led to it, each with the
        edge's weight (-1 failure ... 1 success) and evidence."""
        agent_id = self._agent(agent)
        try:
            answer = await self._api(ctx).causal(agent_id, memory_id, hops, direction)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text(answer)

    async def facts(
        self,
        ctx: Context,
        valid_at: Annotated[
            int | None,
            Field(ge=0, description="A block: the facts that held then (as known now)."),
        ] = None,
        known_at: Annotated[
            int | None,
            Field(
                ge=0,
                description="An event time (ms): what the agent knew then (with valid_at: "
                "what it then believed held at that block).",
            ),
        ] = None,
        subject: Annotated[str | None, Field(description="Only this subject entity.")] = None,
        predicate: Annotated[str | None, Field(description="Only this relation.")] = None,
        neighbours_of: Annotated[
            str | None,
            Field(
                description="An entity: list the entities linked to it by facts instead "
                "(within `hops`; active facts, or those valid at `valid_at`)."
            ),
        ] = None,
        hops: Annotated[int, Field(ge=1, le=4, description="neighbours_of: links away.")] = 1,
        agent: Agent = None,
    ) -> str:
        """The agent's bi-temporal facts (subject, predicate, object, valid from/until a
        block, known from a time): those valid at a block, those known at a time, or
        the entities near one (`neighbours_of`). Read-only."""
        agent_id = self._agent(agent)
        api = self._api(ctx)
        try:
            if neighbours_of is not None:
                answer = await api.fact_neighbours(agent_id, neighbours_of, hops, valid_at)
            elif valid_at is None and known_at is None:
                raise ValueError("give valid_at (a block), known_at (ms) or neighbours_of")
            else:
                answer = await api.facts(
                    agent_id,
                    valid_at=valid_at,
                    known_at=known_at,
                    subject=subject,
                    predicate=predicate,
                )
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text(answer)

    async def read_playbook(self, ctx: Context, agent: Agent = None) -> str:
        """The agent's PLAYBOOK.md: the heuristics and warnings the curator distilled
        from its experience (markdown)."""
        agent_id = self._agent(agent)
        try:
            playbook: str = await self._api(ctx).playbook(agent_id)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return playbook

    async def _publishing(
        self, ctx: Context, publish: bool, memory_id: str, clade: str | None, agent: str | None
    ) -> str:
        agent_id = self._agent(agent)
        api = self._api(ctx)
        try:
            if publish:
                answer = await api.publish_memory(agent_id, memory_id, clade)
            else:
                answer = await api.unpublish_memory(agent_id, memory_id, clade)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text({"agent": agent_id, **answer})

    async def publish_memory(
        self,
        ctx: Context,
        memory_id: Annotated[
            str, Field(min_length=1, description="The memory to share (an item's `id`).")
        ],
        clade: Annotated[str | None, Clade] = None,
        agent: Agent = None,
    ) -> str:
        """Share one of the agent's memories (a warning, an insight, a heuristic, an
        episode) with its clades: every sibling gets a copy marked as shared by this
        agent. Applied asynchronously through the agent's journal. Which agents are
        siblings is the deployment's (an operator's) business."""
        return await self._publishing(ctx, True, memory_id, clade, agent)

    async def unpublish_memory(
        self,
        ctx: Context,
        memory_id: Annotated[str, Field(min_length=1, description="A memory the agent published.")],
        clade: Annotated[str | None, Clade] = None,
        agent: Agent = None,
    ) -> str:
        """Withdraw a memory the agent published: the siblings' copies are removed
        (the agent's own memory stays). Applied asynchronously through its journal."""
        return await self._publishing(ctx, False, memory_id, clade, agent)

    async def clade_entries(
        self,
        ctx: Context,
        clade: Annotated[str, Field(min_length=1, description="The clade's name.")],
        limit: Annotated[
            int | None, Field(ge=1, le=1000, description="How many entries at most (200).")
        ] = None,
    ) -> str:
        """What a clade's members shared with it: each entry's origin agent and memory
        id, kind, text and confidence. Needs a key that reaches one of its members."""
        try:
            return _json_text(await self._api(ctx).clade_entries(clade, limit))
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure

    async def retract(
        self,
        ctx: Context,
        source_event_id: Annotated[
            str,
            Field(min_length=1, description="The event to retract (an item's source_event_id)."),
        ],
        agent: Agent = None,
    ) -> str:
        """Retract one event and everything derived from it (memories, merges, keys).
        Applied asynchronously through the journal; it cannot be undone."""
        agent_id = self._agent(agent)
        try:
            answer = await self._api(ctx).retract(agent_id, source_event_id)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text({"agent": agent_id, "retract": source_event_id, **answer})

    async def forget(
        self,
        ctx: Context,
        confirm_agent: Annotated[
            str,
            Field(description="The agent id again, to confirm: everything of it is erased."),
        ],
        agent: Agent = None,
    ) -> str:
        """Forget an agent entirely: its memories become unreadable for good
        (crypto-shredding) and its state is cleared. Irreversible."""
        agent_id = self._agent(agent)
        if confirm_agent != agent_id:
            raise ToolError(
                f"confirm_agent ({confirm_agent!r}) must equal the agent to forget ({agent_id!r})"
            )
        try:
            answer = await self._api(ctx).forget(agent_id)
        except (HttpApiError, ValueError) as failure:
            raise ToolError(str(failure)) from failure
        return _json_text({"agent": agent_id, "forget": True, **answer})


def _query(
    query: str,
    *,
    k: int | None,
    filters: dict[str, Any],
    budgets: dict[str, Any],
    mode: RecallMode | None,
    explain: bool | None,
    expand_episodes: bool | None,
) -> RecallCall:
    """The typed query; the options' own checks (known kinds, since <= until, ...) become
    tool errors here instead of a round trip."""
    # An empty list is no filter; an empty string is left for the options to refuse.
    present_filters = {k: v for k, v in filters.items() if v is not None and v != []}
    present_budgets = {k: v for k, v in budgets.items() if v is not None}
    try:
        return RecallCall(
            query=query,
            k=k,
            filters=RecallFilters(**present_filters) if present_filters else None,
            budgets=RecallBudgets(**present_budgets) if present_budgets else None,
            mode=mode,
            explain=explain,
            expand_episodes=expand_episodes,
        )
    except (TypeError, ValueError) as bad:
        raise ToolError(str(bad)) from bad


_READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True)


def build_server(
    options: McpOptions,
    *,
    http_transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], int] = _wall_clock_ms,
) -> MCPServer[GrimoireApi]:
    """The MCP server for `options`. `http_transport` replaces the network for tests
    (an `httpx.MockTransport`); `clock` gives `remember`'s default event time (ms)."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[GrimoireApi]) -> AsyncIterator[GrimoireApi]:
        # One pooled API client per running server (per stdio process, per HTTP app).
        async with GrimoireApi(
            options.api_url,
            options.api_key,
            timeout_s=options.timeout_s,
            transport=http_transport,
        ) as api:
            yield api

    instructions = _INSTRUCTIONS
    if options.agent_id:
        instructions += f" Tools act for agent {options.agent_id!r} unless given `agent`."
    server: MCPServer[GrimoireApi] = MCPServer(
        "grimoire",
        title="Grimoire memory",
        instructions=instructions,
        lifespan=lifespan,
    )
    tools = _Tools(options, clock)
    server.add_tool(
        tools.remember,
        name="remember",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False
        ),
        structured_output=False,
    )
    server.add_tool(
        tools.recall,
        name="recall",
        # It records usage, so not read-only; nothing is lost by calling it.
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
        structured_output=False,
    )
    for name, fn in (
        ("search", tools.search),
        ("fetch_memory", tools.fetch_memory),
        ("read_playbook", tools.read_playbook),
        ("causal_neighbours", tools.causal_neighbours),
        ("facts", tools.facts),
        ("clade_entries", tools.clade_entries),
    ):
        server.add_tool(fn, name=name, annotations=_READ_ONLY, structured_output=False)
    server.add_tool(
        tools.publish_memory,
        name="publish_memory",
        # The same memory published again writes the same copies.
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
        structured_output=False,
    )
    server.add_tool(
        tools.unpublish_memory,
        name="unpublish_memory",
        # It removes the siblings' copies (and what they derived from them), never the
        # agent's own memory: listed always, as it only undoes the agent's own sharing.
        annotations=_DESTRUCTIVE,
        structured_output=False,
    )
    if options.allow_destructive:
        server.add_tool(
            tools.retract,
            name="retract",
            annotations=_DESTRUCTIVE,
            structured_output=False,
        )
        server.add_tool(
            tools.forget,
            name="forget",
            annotations=_DESTRUCTIVE,
            structured_output=False,
        )
    return server


def run_server(
    options: McpOptions,
    *,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    """Serve until interrupted: stdio for an agent runtime that spawns the process,
    streamable HTTP (at `/mcp`) for one that connects to it."""
    server = build_server(options)
    logger.info(
        "MCP server over %s for %s (default agent %s, destructive tools %s)",
        transport,
        options.api_url,
        options.agent_id or "none",
        "on" if options.allow_destructive else "off",
    )
    if transport == "stdio":
        server.run("stdio")
        return
    logger.info("streamable HTTP at http://%s:%d/mcp", host, port)
    server.run("streamable-http", host=host, port=port)
