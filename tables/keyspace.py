"""Every Redis key Grimoire reads or writes, built in one place.

A deployment's keys all start with its prefix (`GRIMOIRE_TOPIC_PREFIX`), so several
deployments share one Redis without meeting. Every key holding an agent's state
carries the agent id as a Redis Cluster hash tag, `{<agent id>}`, right after the
concern's name (`{prefix}:stats:{golem-1}`, `{prefix}:mem:{golem-1}:<memory id>`):
all of an agent's keys hash to one slot, so every script and transaction over one
agent's state is single-slot and runs on a Redis Cluster as on one Redis. Agent ids
hold no braces (their alphabet is letters, digits and `._-@+=/`), so the tag is
exactly the id; the prefix holds none either (`Keyspace` refuses one), so the tag is
the first braces of every key.

Deployment-wide keys (the vector-space and store-format claims, the metrics hash,
the applied-source marks, the registry of known agents, each journal partition's
list of agents with an outbox) are never written in an agent's transaction: on a
cluster they live in slots of their own (see `grimoire.tables.transaction`).

Nothing else in the code base builds a key: a test greps the other modules for
key f-strings (`tests/unit/tables/test_keyspace.py`). Lua scripts receive their keys as
`KEYS[...]`, never build them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["STORE_FORMAT", "Keyspace", "glob_escape", "hash_tag"]

# The layout these names make, recorded per prefix (`Keyspace.store_format`): a
# worker meeting a prefix written in another layout refuses it
# (`grimoire.tables.schema.store_format`). Version 1 had no hash tags; version 2
# indexed each memory's text as written, version 3 its lexical form (stems and
# time words, `grimoire.streams.model.lexicon`) with term counts to match.
STORE_FORMAT = "3"


def hash_tag(agent_id: str) -> str:
    """The agent's Redis Cluster hash tag: every key of its state holds it."""
    return f"{{{agent_id}}}"


@dataclass(frozen=True, slots=True)
class Keyspace:
    prefix: str

    def __post_init__(self) -> None:
        if "{" in self.prefix or "}" in self.prefix:
            # A brace in the prefix would become every key's hash tag.
            raise ValueError(f"a key prefix holds no braces: {self.prefix!r}")

    # -- the memory index and its documents --------------------------------------
    @property
    def index_name(self) -> str:
        """The RediSearch index over memory hashes (on a cluster, each master's
        index carries a hash tag of a slot it owns: `cluster_index_name`)."""
        return f"{self.prefix}-memory"

    def cluster_index_name(self, slot_tag: str) -> str:
        """The memory index of one cluster master: RediSearch treats an index name
        as a key, so each master's name must hash to a slot that master owns."""
        return f"{self.index_name}{{{slot_tag}}}"

    @property
    def memory_prefix(self) -> str:
        """The index's document prefix: every memory hash starts with it."""
        return f"{self.prefix}:mem"

    @property
    def memory_pattern(self) -> str:
        """SCAN pattern matching every memory hash of the deployment."""
        return f"{self.memory_prefix}:*"

    @property
    def deployment_pattern(self) -> str:
        """SCAN pattern matching every key of the deployment."""
        return f"{self.prefix}:*"

    def memory(self, agent_id: str, memory_id: str) -> str:
        return f"{self.memory_prefix}:{{{agent_id}}}:{memory_id}"

    def agent_memory_pattern(self, agent_id: str) -> str:
        """SCAN pattern matching every memory hash of one agent."""
        return glob_escape(self.memory(agent_id, "")) + "*"

    def memory_id_of(self, key: str | bytes) -> str:
        """The memory id a memory hash's key names (inverse of `memory`)."""
        name = key.decode() if isinstance(key, bytes) else key
        return name.removeprefix(f"{self.memory_prefix}:").partition("}:")[2]

    def usage(self, agent_id: str, memory_id: str) -> str:
        """A memory's usage counters, apart from its hash so recall's writes do
        not touch the indexed document."""
        return f"{self.prefix}:use:{{{agent_id}}}:{memory_id}"

    def tombstone(self, agent_id: str, memory_id: str) -> str:
        """What replaced a compacted memory."""
        return f"{self.prefix}:tomb:{{{agent_id}}}:{memory_id}"

    def decayed(self, agent_id: str, memory_id: str) -> str:
        """The decay band a memory was last seen in."""
        return f"{self.prefix}:decayed:{{{agent_id}}}:{memory_id}"

    # -- deployment-wide ----------------------------------------------------------
    @property
    def vector_space(self) -> str:
        """The embedding space the index's vectors live in (claimed once)."""
        return f"{self.prefix}:vector-space"

    @property
    def store_format(self) -> str:
        """STRING: the key layout the prefix was written in (`STORE_FORMAT`)."""
        return f"{self.prefix}:store-format"

    @property
    def legacy_markers(self) -> tuple[str, ...]:
        """Keys only a store of format 1 (no hash tags) has: its watermark ZSET and
        field-state HASH, written with the first event it stored."""
        return (f"{self.prefix}:watermarks", f"{self.prefix}:field")

    @property
    def agents(self) -> str:
        """ZSET agent -> latest event time: the list of known agents (the block
        timer's, the metrics'). Derived from the agents' watermarks, written beside
        their transactions, never inside one (`grimoire.tables.transaction`)."""
        return f"{self.prefix}:agents"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}:metrics"

    @property
    def applied_sources(self) -> str:
        """HASH "agent id|topic|partition" -> the highest source offset the fold
        applied of that agent's inputs (a re-journaled input is applied once).
        Moved after each run, by a script over this key alone."""
        return f"{self.prefix}:applied-sources"

    @property
    def journal_applied(self) -> str:
        """HASH journal partition -> the last journal offset of a batch the fold
        finished. Written after the batch's own writes, so an append-only file that
        lost its last second (Redis killed) lost this mark's latest moves too, and
        the worker folds the gap again from the journal (`Runtime.catch_up`)."""
        return f"{self.prefix}:journal-applied"

    def outbox_agents(self, journal_partition: int) -> str:
        """SET of the agents of a journal partition that may have events in their
        outbox (added before the transaction that queues them: see `outbox`)."""
        return f"{self.prefix}:outbox-agents:{journal_partition}"

    # -- per agent: the fold's bookkeeping ----------------------------------------
    def watermark(self, agent_id: str) -> str:
        """ZSET of one member (`WATERMARK_MEMBER`) scored with the agent's latest
        event time: ZADD GT keeps the maximum, so an old batch never moves it back."""
        return f"{self.prefix}:watermark:{{{agent_id}}}"

    def field_state(self, agent_id: str) -> str:
        """STRING: the agent's field state JSON."""
        return f"{self.prefix}:field:{{{agent_id}}}"

    def state_vector(self, agent_id: str) -> str:
        """HASH (key, vector): the agent's latest state vector, written with the field
        state it belongs to (tables/codec/state_vector.py)."""
        return f"{self.prefix}:state-vector:{{{agent_id}}}"

    def contrarian_window(self, agent_id: str) -> str:
        """ZSET of one member: the last anti-rumination window a recall served."""
        return f"{self.prefix}:contrarian-window:{{{agent_id}}}"

    def outbox(self, agent_id: str) -> str:
        """LIST of events the fold committed for the agent and has not yet seen the
        broker acknowledge (written in the transaction of the state they describe;
        published, then trimmed)."""
        return f"{self.prefix}:outbox:{{{agent_id}}}"

    def agent_config(self, agent_id: str) -> str:
        """STRING: the agent's runtime configuration (JSON of its non-default
        settings), set by `configure` commands at their place in its journal."""
        return f"{self.prefix}:config:{{{agent_id}}}"

    def pending_outcomes(self, agent_id: str) -> str:
        """HASH memory id -> outcomes that named it before it was written."""
        return f"{self.prefix}:pending-outcomes:{{{agent_id}}}"

    # -- the key store: outside the fold ------------------------------------------
    # Per-agent journal keys and sequence counters. They are not memory state: a
    # wipe of the memory state (rebuild, replay) must keep them, or the journal it
    # replays becomes unreadable; only forgetting an agent destroys its keys. They
    # live under their own segment so a wipe recognises them (`is_keystore_key`),
    # and may live in another Redis altogether (`GRIMOIRE_KEYSTORE_URL`). Their
    # names carry no hash tag and did not change with the store format: a store of
    # format 1 is upgraded by replaying its journal (`grimoire replay --wipe`), which
    # needs these keys as they were. No script or transaction spans two of them.
    @property
    def keystore_prefix(self) -> str:
        return f"{self.prefix}:keystore"

    @property
    def keystore_pattern(self) -> str:
        """SCAN pattern matching every key-store key of the deployment."""
        return f"{self.keystore_prefix}:*"

    def is_keystore_key(self, key: str | bytes) -> bool:
        """Whether a key (as SCAN returns it) belongs to the key store."""
        name = key.decode() if isinstance(key, bytes) else key
        return name.startswith(f"{self.keystore_prefix}:")

    def agent_keys(self, agent_id: str) -> str:
        """HASH of an agent's journal keys: `current` -> key id, `k:<key id>` -> secret."""
        return f"{self.keystore_prefix}:agent:{agent_id}"

    @property
    def default_config(self) -> str:
        """STRING: the deployment's default agent configuration (JSON of its
        non-default settings), journaled as a new agent's first entry."""
        return f"{self.keystore_prefix}:default-config"

    @property
    def journal_secret(self) -> str:
        """STRING: the deployment's secret that agents' journal names are made with
        (`streams.journal.entry.journal_name`), created once."""
        return f"{self.keystore_prefix}:journal-secret"

    @property
    def journal_names(self) -> str:
        """HASH journal name -> agent id, for each agent with a key (forget removes
        it with the keys: the journal then names the agent nowhere readable)."""
        return f"{self.keystore_prefix}:journal-names"

    @property
    def keystore_forgets(self) -> str:
        """STRING: how many agents this key store has forgotten (INCR by each), so
        every worker's key cache sees a forget run elsewhere (`CachedKeyStore.refresh`)."""
        return f"{self.keystore_prefix}:forgets"

    @property
    def journal_sequences(self) -> str:
        """HASH agent -> the last journal sequence number handed out."""
        return f"{self.keystore_prefix}:journal-seq"

    # Tenant API keys sit in the key store too: a wipe or replay of memory state
    # must not lock every tenant out (and they are no decision of the fold).
    def api_key(self, key_id: str) -> str:
        """HASH of one API key: its secret's digest, scope, label, revoked flag."""
        return f"{self.keystore_prefix}:api-key:{key_id}"

    @property
    def api_key_index(self) -> str:
        """SET of every API key id."""
        return f"{self.keystore_prefix}:api-keys"

    # -- per agent: write path ----------------------------------------------------
    def decided(self, agent_id: str) -> str:
        """Source events already decided (a redelivery changes nothing)."""
        return f"{self.prefix}:decided:{{{agent_id}}}"

    def stats(self, agent_id: str) -> str:
        return f"{self.prefix}:stats:{{{agent_id}}}"

    def applied_usage(self, agent_id: str) -> str:
        """ZSET of the journal sequence numbers of the agent's usage entries applied
        (score = member), the most recent ones only: a usage entry re-read after a
        crash counts nothing twice."""
        return f"{self.prefix}:usage-applied:{{{agent_id}}}"

    def applied_outcomes(self, agent_id: str) -> str:
        return f"{self.prefix}:outcomes:{{{agent_id}}}"

    def applied_imports(self, agent_id: str) -> str:
        """SET of the import chunks applied to the agent (`<import id>:<index>`): a
        re-sent chunk changes nothing (journal bookkeeping, outside the state digest)."""
        return f"{self.prefix}:imported:{{{agent_id}}}"

    # -- per agent: the derivation index (what derives from what) ----------------
    def derived_from(self, agent_id: str, source_id: str) -> str:
        """HASH `role|derived id` -> weight: what derives from a source (an input
        event id or a memory id)."""
        return f"{self.prefix}:deriv:{{{agent_id}}}:from:{source_id}"

    def derivation_sources(self, agent_id: str, derived_id: str) -> str:
        """HASH `role|source id` -> weight: what a memory derives from."""
        return f"{self.prefix}:deriv:{{{agent_id}}}:of:{derived_id}"

    def derivation_pattern(self, agent_id: str) -> str:
        """SCAN pattern of every derivation-index key of an agent."""
        return glob_escape(f"{self.prefix}:deriv:{{{agent_id}}}:") + "*"

    # -- per agent: bi-temporal facts ----------------------------------------------
    def facts(self, agent_id: str) -> str:
        """HASH fact id -> one version of a fact (JSON)."""
        return f"{self.prefix}:facts:{{{agent_id}}}"

    def fact_pairs(self, agent_id: str) -> str:
        """HASH `subject\x1fpredicate` -> the ids of that relation's versions (JSON)."""
        return f"{self.prefix}:facts-pair:{{{agent_id}}}"

    def fact_entities(self, agent_id: str) -> str:
        """HASH entity name -> the ids of the versions it is subject or object of."""
        return f"{self.prefix}:facts-entity:{{{agent_id}}}"

    def fact_links(self, agent_id: str) -> str:
        """HASH `entity:<name>` -> [linked entity key, fact id] pairs of its active
        entity facts (JSON): what recall's walk follows."""
        return f"{self.prefix}:facts-links:{{{agent_id}}}"

    # -- per agent: learning from outcomes ----------------------------------------
    def run_recalls(self, agent_id: str) -> str:
        """HASH run id -> what the run's recalls returned (memory id -> the rerank
        factor values that ranked it), until the run's outcome is learned from."""
        return f"{self.prefix}:run-recalls:{{{agent_id}}}"

    def ended_runs(self, agent_id: str) -> str:
        """HASH run id -> the outcome it ended with (quality, time, block): a member
        of the run written later is credited as it is written."""
        return f"{self.prefix}:ended-runs:{{{agent_id}}}"

    def learned_weights(self, agent_id: str) -> str:
        """STRING: the agent's learned rerank weights (JSON), once it learned any."""
        return f"{self.prefix}:learned-weights:{{{agent_id}}}"

    def causal_edges(self, agent_id: str) -> str:
        """HASH `cause<US>effect` -> the edge's weight, evidence and last block."""
        return f"{self.prefix}:causal:{{{agent_id}}}"

    def causal_effects(self, agent_id: str) -> str:
        """HASH cause -> its effects (US-joined, sorted): the graph's out-adjacency."""
        return f"{self.prefix}:causal-out:{{{agent_id}}}"

    def causal_causes(self, agent_id: str) -> str:
        """HASH effect -> its causes (US-joined, sorted): the in-adjacency."""
        return f"{self.prefix}:causal-in:{{{agent_id}}}"

    # -- per agent: graph ---------------------------------------------------------
    def nexus(self, agent_id: str, nexus_key: str) -> str:
        """ZSET of the agent's memories carrying one nexus key."""
        return f"{self.prefix}:nexus:{{{agent_id}}}:{nexus_key}"

    def hyperedge(self, agent_id: str, edge_id: str) -> str:
        return f"{self.prefix}:hyper:{{{agent_id}}}:{edge_id}"

    def nodes(self, agent_id: str) -> str:
        """HASH memory id -> packed walk node."""
        return f"{self.prefix}:nodes:{{{agent_id}}}"

    def terms(self, agent_id: str) -> str:
        """HASH term -> how many of the agent's memories hold it."""
        return f"{self.prefix}:terms:{{{agent_id}}}"

    def actors(self, agent_id: str) -> str:
        """SET of the actors the agent's memories name, as a query would name them
        (`grimoire.streams.recall.named.actor_name`)."""
        return f"{self.prefix}:actors:{{{agent_id}}}"

    # -- per agent: maintenance ---------------------------------------------------
    def decay_schedule(self, agent_id: str) -> str:
        return f"{self.prefix}:decay:{{{agent_id}}}"

    def decay_seeded(self, agent_id: str) -> str:
        return f"{self.prefix}:decay-seeded:{{{agent_id}}}"

    def compaction_plan(self, agent_id: str, plan_id: str) -> str:
        return f"{self.prefix}:compact:plan:{{{agent_id}}}:{plan_id}"

    def compaction_cursor(self, agent_id: str) -> str:
        return f"{self.prefix}:compact:cursor:{{{agent_id}}}"

    def compaction_pending(self, agent_id: str) -> str:
        return f"{self.prefix}:compact:pending:{{{agent_id}}}"

    def compaction_outbox(self, agent_id: str, plan_id: str) -> str:
        return f"{self.prefix}:compact:outbox:{{{agent_id}}}:{plan_id}"

    def curator(self, agent_id: str) -> str:
        return f"{self.prefix}:curator:{{{agent_id}}}"

    def curator_entries(self, agent_id: str) -> str:
        return f"{self.prefix}:curator:{{{agent_id}}}:entries"

    def curator_due(self, agent_id: str) -> str:
        """ZSET curated entry id -> event time (ms) of its next curator look
        (+inf: none until something changes it; 0: at the next cycle)."""
        return f"{self.prefix}:curator:{{{agent_id}}}:due"

    def curator_signatures(self, agent_id: str) -> str:
        """ZSET (all scores 0) of `kind|signature|memory id`: the curated entries
        distilled from each situation, found by lexicographic range."""
        return f"{self.prefix}:curator:{{{agent_id}}}:signatures"

    def curator_playbook(self, agent_id: str) -> str:
        """SET of the heuristic ids in the agent's playbook."""
        return f"{self.prefix}:curator:{{{agent_id}}}:playbook"

    def playbook(self, agent_id: str) -> str:
        return f"{self.prefix}:playbook:{{{agent_id}}}"

    def maintenance_ledger(self, agent_id: str) -> str:
        return f"{self.prefix}:maint:{{{agent_id}}}"

    def maintenance_lease(self, agent_id: str) -> str:
        return f"{self.prefix}:maint:lease:{{{agent_id}}}"

    def maintenance_log(self, agent_id: str) -> str:
        return f"{self.prefix}:maint:log:{{{agent_id}}}"

    # -- clades: named sets of agents that share knowledge ----------------------------
    # The registry is the deployment's, admin-managed, in the key store (kept by a
    # wipe, like tenant keys): the sequencer reads it to journal where a publish goes.
    @property
    def clade_names(self) -> str:
        """SET of the deployment's clade names."""
        return f"{self.keystore_prefix}:clades"

    def clade_members(self, clade: str) -> str:
        """SET of a clade's member agent ids."""
        return f"{self.keystore_prefix}:clade:{clade}:members"

    def agent_clades(self, agent_id: str) -> str:
        """SET of the clades an agent belongs to (the registry's reverse index:
        membership is not a fold of the agent's journal, so not its state)."""
        return f"{self.keystore_prefix}:agent-clades:{agent_id}"

    def clade_published(self, agent_id: str) -> str:
        """HASH memory id -> JSON {routes: {clade: [recipients]}}: what the agent
        published, and to whom each copy went through which clade (its `unpublish`,
        retraction and forgetting withdraw the copies from exactly those)."""
        return f"{self.prefix}:clade-published:{{{agent_id}}}"

    # -- per agent: the witness chain ----------------------------------------------
    def witness(self, agent_id: str) -> str:
        """STREAM of the agent's witness records (entry id `<seq>-0`), oldest first."""
        return f"{self.prefix}:witness:{{{agent_id}}}"

    def witness_due(self, agent_id: str) -> str:
        """STRING (JSON): what the witness record of the agent's last outcome or fact
        entry says, written in the transaction of its effects, so a worker killed
        between the two leaves the record to the retry (`WitnessDue`)."""
        return f"{self.prefix}:witness-due:{{{agent_id}}}"

    # -- SCAN patterns of an agent's open-ended key families -------------------------
    # Glob characters in the prefix or the agent id are escaped. The hash tag's
    # closing brace ends the agent id, so a pattern of agent `a` never matches the
    # keys of an agent `a:x` (or `ab`).
    def nexus_pattern(self, agent_id: str) -> str:
        return glob_escape(self.nexus(agent_id, "")) + "*"

    def hyperedge_pattern(self, agent_id: str) -> str:
        return glob_escape(self.hyperedge(agent_id, "")) + "*"

    def compaction_plan_pattern(self, agent_id: str) -> str:
        return glob_escape(self.compaction_plan(agent_id, "")) + "*"

    def compaction_outbox_pattern(self, agent_id: str) -> str:
        return glob_escape(self.compaction_outbox(agent_id, "")) + "*"


def glob_escape(literal: str) -> str:
    """`literal` as a SCAN MATCH pattern that matches only itself."""
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in literal)
