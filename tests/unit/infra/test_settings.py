"""infra/settings.py: the settings live in groups by concern, and every flat
`GRIMOIRE_*` name deployments set still reaches its field, from the environment,
the .env file and the flat keywords in code, through the one table `FLAT_NAMES`."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from grimoire.infra.settings import (
    ENV_PREFIX,
    FLAT_NAMES,
    RecallSettings,
    Settings,
    SettingsGroup,
    WalkSettings,
)
from tests.support.settings import unit_settings

#: One consistent set of Kafka security variables: a SASL or SSL setting alone does
#: not load (Settings checks they fit together), so each is read beside the others.
#: The file settings are filled in with real files by `_kafka_values`.
KAFKA = {
    "kafka_security_protocol": "SASL_SSL",
    "kafka_sasl_mechanism": "SCRAM-SHA-512",
    "kafka_sasl_username": "svc-grimoire",
    "kafka_sasl_password": "kafka-secret",
    "kafka_ssl_check_hostname": "false",
}
KAFKA_FILES = ("kafka_ssl_cafile", "kafka_ssl_certfile", "kafka_ssl_keyfile")

#: Strings with a rule of their own: a valid value other than the default.
CONSTRAINED_STRINGS = {"knn_hybrid_policy": "ADHOC_BF", "worker_roles": "recall"}


@pytest.fixture(autouse=True)
def _no_grimoire_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A variable the developer's shell happens to set would change what is read.
    for name in FLAT_NAMES:
        monkeypatch.delenv(f"{ENV_PREFIX}{name.upper()}", raising=False)


def _field(path: str) -> Any:
    """The pydantic FieldInfo at a dotted place in the groups."""
    model: type[BaseModel] = Settings
    *groups, leaf = path.split(".")
    for group in groups:
        annotation = model.model_fields[group].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation
    return model.model_fields[leaf]


def _at(settings: Settings, path: str) -> Any:
    value: Any = settings
    for name in path.split("."):
        value = getattr(value, name)
    return value


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[str]:
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _leaves(annotation, (*prefix, name))
        else:
            yield ".".join((*prefix, name))


def _without_none(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (only,) = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return only
    return annotation


def _kafka_values(folder: Path) -> dict[str, str]:
    values = dict(KAFKA)
    for name in KAFKA_FILES:
        path = folder / f"{name}.pem"
        path.write_text("not checked until a client connects\n")
        values[name] = str(path)
    return values


def _other_value(name: str) -> tuple[str, Any]:
    """A valid raw value for the flat name `name` other than its default, and the
    value its field should then hold."""
    field = _field(FLAT_NAMES[name])
    default = field.default
    kind = _without_none(field.annotation)
    if name in CONSTRAINED_STRINGS:
        return CONSTRAINED_STRINGS[name], CONSTRAINED_STRINGS[name]
    if typing.get_origin(kind) is typing.Literal:
        choice = next(option for option in typing.get_args(kind) if option != default)
        return choice, choice
    if kind is bool:
        return str(not default).lower(), not default
    if kind is int:
        return str(default + 1), default + 1
    if kind is float:
        value = default / 2 if default else 0.5
        return repr(value), value
    if kind is Path:
        return f"/var/lib/grimoire/{name}", Path(f"/var/lib/grimoire/{name}")
    if kind is str:
        return f"value-of-{name}", f"value-of-{name}"
    raise AssertionError(f"{name}: no test value for {kind!r}")


@pytest.mark.parametrize("name", sorted(FLAT_NAMES))
def test_every_flat_name_reads_from_the_environment_into_its_group(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if name.startswith("kafka_"):
        values = _kafka_values(tmp_path)
        for other, raw in values.items():
            monkeypatch.setenv(f"{ENV_PREFIX}{other.upper()}", raw)
        raw = values[name]
        expected: Any = Path(raw) if name in KAFKA_FILES else raw
        if name == "kafka_ssl_check_hostname":
            expected = False
    else:
        raw, expected = _other_value(name)
        monkeypatch.setenv(f"{ENV_PREFIX}{name.upper()}", raw)
    settings = Settings(_env_file=None)
    value = _at(settings, FLAT_NAMES[name])
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    assert value == expected
    assert value != _field(FLAT_NAMES[name]).default  # read, not defaulted
    assert settings.flat_values()[name] == _at(settings, FLAT_NAMES[name])


def test_the_env_file_is_read_and_the_environment_wins_over_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("GRIMOIRE_WALK_MAX_HOPS=4\nGRIMOIRE_TOPIC_PREFIX=from-file\n")
    monkeypatch.setenv("GRIMOIRE_TOPIC_PREFIX", "from-env")
    settings = Settings(_env_file=env_file)
    assert settings.recall.walk.max_hops == 4
    assert settings.broker.topic_prefix == "from-env"


def test_the_table_names_every_field_once() -> None:
    """A field added to a group without a flat name (or two names for one field)
    fails here: the environment could not set it."""
    places = list(FLAT_NAMES.values())
    assert len(places) == len(set(places))
    assert sorted(places) == sorted(_leaves(Settings))
    for name in FLAT_NAMES:
        assert name == name.lower() and name.isidentifier(), name


def test_every_group_is_a_frozen_settings_group() -> None:
    groups = {path.rsplit(".", 1)[0] for path in FLAT_NAMES.values()}
    settings = unit_settings()
    for group in groups:
        model = _at(settings, group)
        assert isinstance(model, SettingsGroup), group
        with pytest.raises(ValidationError):
            model.__setattr__(next(iter(type(model).model_fields)), None)
    with pytest.raises(ValidationError):
        settings.__setattr__("recall", RecallSettings())


def test_flat_and_nested_keywords_reach_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIMOIRE_RECALL_ENTITY_K", "7")
    flat = unit_settings(recall_entity_k=3, redis_url="redis://cache:6379/1")
    assert flat.recall.entity_k == 3  # a keyword given in code beats the environment
    assert flat.redis.url == "redis://cache:6379/1"
    assert flat.broker.topic_prefix == "unit"
    nested = unit_settings(recall={"walk": {"max_hops": 1}})
    assert nested.recall.walk.max_hops == 1
    assert nested.recall.entity_k == 7  # the rest of the group from the environment
    whole = unit_settings(recall=RecallSettings(walk=WalkSettings(num_walkers=2)))
    assert whole.recall.walk.num_walkers == 2 and whole.recall.entity_k == 20


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"walk_max_hops": "not-a-number-xyzzy"}, "walk_max_hops"),
        ({"recall_max_reply_bytes": 10**9}, "recall_max_reply_bytes"),
        ({"worker_roles": "teleport"}, "worker_roles"),
        ({"recall": {"walk": {"max_hops": -1}}}, "walk_max_hops"),
        ({"recall": {"no_such_field": 1}}, "recall.no_such_field"),
        ({"no_such_setting": 1}, "no_such_setting"),
    ],
)
def test_a_bad_value_is_refused_by_its_flat_name_without_its_input(
    values: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError) as built:
        unit_settings(**values)
    with pytest.raises(ValidationError) as changed:
        unit_settings().with_values(**values)
    for caught in (built, changed):
        message = str(caught.value)
        assert named in message
        assert "xyzzy" not in message and "input_value" not in message


def test_with_values_changes_only_what_it_names_and_validates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = unit_settings(walk_max_hops=3, staging_purge="kafka")
    monkeypatch.setenv("GRIMOIRE_STAGING_PURGE", "s3")  # not read again
    changed = base.with_values(topic_prefix="other", recall={"walk": {"num_walkers": 1}})
    assert changed.broker.topic_prefix == "other"
    assert (changed.recall.walk.num_walkers, changed.recall.walk.max_hops) == (1, 3)
    assert changed.staging.purge == "kafka"
    assert base.broker.topic_prefix == "unit" and base.recall.walk.num_walkers == 8
    assert changed.with_values(worker_roles="recall, ingest").worker.roles == "ingest,recall"
    with pytest.raises(ValidationError, match="kafka_sasl_mechanism"):
        base.with_values(kafka_sasl_mechanism="ROT13")
    with pytest.raises(ValueError, match="SASL_SSL needs sasl_mechanism"):
        base.with_values(kafka_security_protocol="SASL_SSL")


def test_flat_values_rebuild_the_same_settings() -> None:
    settings = unit_settings(rrf_k=11, http_kafka_api_key="gmk_x.y", embed_lanes=2)
    assert Settings(_env_file=None, **settings.flat_values()) == settings


def test_repr_masks_the_redis_passwords() -> None:
    settings = unit_settings(
        redis_url="redis://app:redis-secret@cache:6379/0",
        keystore_url="rediss://keys:keystore-secret@vault:6380/0",
    )
    for shown in (repr(settings), str(settings), repr(settings.redis)):
        assert "redis-secret" not in shown and "keystore-secret" not in shown
        assert "app:***@cache" in shown and "keys:***@vault" in shown
    assert settings.redis.url == "redis://app:redis-secret@cache:6379/0"
