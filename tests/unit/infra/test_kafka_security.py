"""Kafka SASL/TLS and Redis credentials pass from configuration to every client.

No broker here: the clients are built (aiokafka checks the combination when it is
constructed) and what they were given is read back. The local broker (tansu 0.6.0)
cannot take part: it has no SASL/PLAIN, its SCRAM users can only be created by an
authenticated client (impossible on its in-memory storage), and its `--cert` flag
leaves the listener in plaintext (docs/configuration.md, "Kafka and Redis security").
"""

from __future__ import annotations

import datetime
import logging
import ssl
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from pydantic import SecretStr

from grimoire.infra.app import create_app, faust_credentials
from grimoire.infra.http import lag as lag_module
from grimoire.infra.http.lag import JournalLagProbe
from grimoire.infra.local.worker_process import settings_env
from grimoire.infra.settings import Settings, redact_url
from grimoire.tables.redis_client import create_redis
from grimoire.topics import client as client_module
from grimoire.topics import declarations
from grimoire.topics.client import GrimoireClient
from grimoire.topics.declarations import ensure_topics
from grimoire.topics.security import KafkaSecurity, KafkaSecurityError
from tests.support.settings import unit_settings

PASSWORD = "pa55-w0rd/with:odd@chars"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A self-signed certificate (standing in for the CA) and its key."""
    folder = tmp_path_factory.mktemp("tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grimoire-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path = folder / "cert.pem"
    key_path = folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {"ca": cert_path, "cert": cert_path, "key": key_path}


def _sasl(protocol: str = "SASL_PLAINTEXT", **extra: Any) -> KafkaSecurity:
    return KafkaSecurity(
        security_protocol=protocol,  # type: ignore[arg-type]
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="svc-grimoire",
        sasl_password=PASSWORD,
        **extra,
    )


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"security_protocol": "SASL_SSL"}, "SASL_SSL needs sasl_mechanism"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"},
            "needs sasl_username",
        ),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "u",
            },
            "needs sasl_password",
        ),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "GSSAPI",
                "sasl_username": "u",
                "sasl_password": "p",
            },
            "sasl_mechanism 'GSSAPI' is not one of",
        ),
        ({"security_protocol": "TLS"}, "security_protocol 'TLS' is not one of"),
        ({"security_protocol": "SSL", "sasl_username": "u"}, "sasl_username given but"),
        ({"sasl_password": "p"}, "sasl_password given but security_protocol is PLAINTEXT"),
        ({"security_protocol": "SSL", "ssl_cafile": Path("/no/such/ca.pem")}, "ssl_cafile"),
    ],
)
def test_settings_that_cannot_connect_are_refused_with_the_reason(
    kwargs: dict[str, Any], needle: str
) -> None:
    with pytest.raises(KafkaSecurityError, match=needle) as caught:
        KafkaSecurity(**kwargs)
    assert isinstance(caught.value, ValueError)  # pydantic reports it as a value error


def test_a_refusal_never_quotes_the_password() -> None:
    with pytest.raises(KafkaSecurityError) as caught:
        KafkaSecurity(security_protocol="SSL", sasl_password=PASSWORD)
    assert PASSWORD not in str(caught.value)


def test_tls_files_need_a_tls_protocol_and_a_key_needs_its_certificate(
    tls_files: dict[str, Path],
) -> None:
    with pytest.raises(KafkaSecurityError, match="SSL or SASL_SSL uses them"):
        _sasl("SASL_PLAINTEXT", ssl_cafile=tls_files["ca"])
    with pytest.raises(KafkaSecurityError, match="ssl_keyfile given without ssl_certfile"):
        KafkaSecurity(security_protocol="SSL", ssl_keyfile=tls_files["key"])


def test_the_password_never_shows_in_repr() -> None:
    security = _sasl()
    assert PASSWORD not in repr(security)
    assert "svc-grimoire" in repr(security)


# -- aiokafka ----------------------------------------------------------------------------


def test_plaintext_is_the_default_and_adds_nothing_else() -> None:
    assert KafkaSecurity().aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}


def test_sasl_plaintext_kwargs() -> None:
    assert _sasl().aiokafka_kwargs() == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "svc-grimoire",
        "sasl_plain_password": PASSWORD,
    }


def test_ssl_kwargs_verify_against_the_given_authority(tls_files: dict[str, Path]) -> None:
    security = KafkaSecurity(
        security_protocol="SSL",
        ssl_cafile=tls_files["ca"],
        ssl_certfile=tls_files["cert"],
        ssl_keyfile=tls_files["key"],
    )
    kwargs = security.aiokafka_kwargs()
    assert set(kwargs) == {"security_protocol", "ssl_context"}
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert any(ca.get("subject") for ca in context.get_ca_certs())  # our CA, loaded


def test_ssl_without_a_ca_file_uses_the_system_authorities_and_can_skip_the_name() -> None:
    context = KafkaSecurity(security_protocol="SSL", ssl_check_hostname=False).ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still checked
    assert context.check_hostname is False


def test_sasl_ssl_kwargs_carry_both(tls_files: dict[str, Path]) -> None:
    kwargs = _sasl("SASL_SSL", ssl_cafile=tls_files["ca"]).aiokafka_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["sasl_plain_password"] == PASSWORD


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
async def test_aiokafka_accepts_every_protocol(protocol: str, tls_files: dict[str, Path]) -> None:
    if protocol.startswith("SASL"):
        tls = {"ssl_cafile": tls_files["ca"]} if protocol == "SASL_SSL" else {}
        security = _sasl(protocol, **tls)
    else:
        tls = {"ssl_cafile": tls_files["ca"]} if protocol == "SSL" else {}
        security = KafkaSecurity(security_protocol=protocol, **tls)  # type: ignore[arg-type]
    for cls in (AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient):
        made = cls(bootstrap_servers="127.0.0.1:1", **security.aiokafka_kwargs())
        inner = getattr(made, "_client", None) or made.client  # type: ignore[union-attr]
        assert inner._security_protocol == protocol
        if protocol.startswith("SASL"):
            assert inner._sasl_mechanism == "SCRAM-SHA-512"
            assert inner._sasl_plain_username == "svc-grimoire"


# -- every client the project makes --------------------------------------------------------


class _Recorder:
    """Stands in for an aiokafka class: records its keyword arguments."""

    made: list[dict[str, Any]]

    def __init__(self, *topics: str, **kwargs: Any) -> None:
        type(self).made.append(kwargs)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def list_topics(self) -> list[str]:
        return []

    async def create_topics(self, topics: list[Any]) -> None:
        return None

    def assign(self, partitions: list[Any]) -> None:
        return None

    async def seek_to_end(self, *partitions: Any) -> None:
        return None

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(partitions, 0)

    async def beginning_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(partitions, 0)

    def seek(self, partition: Any, offset: int) -> None:
        return None

    def pause(self, *partitions: Any) -> None:
        return None

    def resume(self, *partitions: Any) -> None:
        return None

    async def position(self, partition: Any) -> int:
        return 0

    def __aiter__(self) -> _Recorder:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration


def _recorder() -> type[_Recorder]:
    return type("Recorder", (_Recorder,), {"made": []})


async def test_the_sdk_client_secures_its_producer_consumer_and_admin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    producer, consumer, admin = _recorder(), _recorder(), _recorder()
    monkeypatch.setattr(client_module, "AIOKafkaProducer", producer)
    monkeypatch.setattr(client_module, "AIOKafkaConsumer", consumer)
    monkeypatch.setattr(declarations, "AIOKafkaAdminClient", admin)
    async with GrimoireClient("broker:9093", "gm", security=_sasl()):
        pass
    for made in (producer.made, consumer.made, admin.made):
        assert len(made) == 1
        assert made[0]["security_protocol"] == "SASL_PLAINTEXT"
        assert made[0]["sasl_plain_password"] == PASSWORD


async def test_ensure_topics_without_security_stays_plaintext(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = _recorder()
    monkeypatch.setattr(declarations, "AIOKafkaAdminClient", admin)
    await ensure_topics("broker:9092", {"t": 1})
    assert admin.made == [{"bootstrap_servers": "broker:9092", "security_protocol": "PLAINTEXT"}]


async def test_the_lag_probe_secures_its_admin_and_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin, consumer = _recorder(), _recorder()
    monkeypatch.setattr(lag_module, "AIOKafkaAdminClient", admin)
    monkeypatch.setattr(lag_module, "AIOKafkaConsumer", consumer)
    probe = JournalLagProbe("broker:9093", "grimoire", "gm.journal", 2, security=_sasl())
    await probe._start()
    await probe.close()
    assert admin.made[0]["sasl_mechanism"] == "SCRAM-SHA-512"
    assert consumer.made[0]["sasl_plain_username"] == "svc-grimoire"


async def test_the_http_api_builds_its_clients_from_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from grimoire.infra.http import server

    seen: dict[str, Any] = {}

    def client(*args: Any, **kwargs: Any) -> Any:
        seen["client"] = kwargs.get("security")
        return GrimoireClient(*args, **kwargs)

    def probe(*args: Any, **kwargs: Any) -> Any:
        seen["lag"] = kwargs.get("security")
        return JournalLagProbe(*args, **kwargs)

    monkeypatch.setattr(server, "GrimoireClient", client)
    monkeypatch.setattr(server, "JournalLagProbe", probe)
    settings = unit_settings(**_sasl_settings())
    server.build_app(settings)
    assert seen["client"] == settings.kafka_security == seen["lag"]


# -- Faust ----------------------------------------------------------------------------------


def test_faust_credentials_for_each_protocol(tls_files: dict[str, Path]) -> None:
    assert faust_credentials(KafkaSecurity()) is None
    plain = faust_credentials(_sasl())
    assert isinstance(plain, faust.SASLCredentials)
    assert plain.protocol.value == "SASL_PLAINTEXT" and plain.ssl_context is None
    assert plain.mechanism.value == "SCRAM-SHA-512"
    assert (plain.username, plain.password) == ("svc-grimoire", PASSWORD)
    over_tls = faust_credentials(_sasl("SASL_SSL", ssl_cafile=tls_files["ca"]))
    assert isinstance(over_tls, faust.SASLCredentials)
    assert over_tls.protocol.value == "SASL_SSL"
    assert isinstance(over_tls.ssl_context, ssl.SSLContext)
    tls = faust_credentials(KafkaSecurity(security_protocol="SSL", ssl_cafile=tls_files["ca"]))
    assert isinstance(tls, faust.SSLCredentials)
    assert tls.protocol.value == "SSL"


def _sasl_settings() -> dict[str, object]:
    return {
        "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "PLAIN",
        "kafka_sasl_username": "svc-grimoire",
        "kafka_sasl_password": PASSWORD,
    }


async def test_the_worker_consumer_and_producer_authenticate() -> None:
    app = create_app(unit_settings(**_sasl_settings()))
    assert app.conf.broker[0].scheme == "kafka"
    consumer = app.consumer._thread._create_worker_consumer(app.transport)
    assert consumer._client._security_protocol == "SASL_PLAINTEXT"
    assert consumer._client._sasl_mechanism == "PLAIN"
    assert consumer._client._sasl_plain_password == PASSWORD
    auth = app.producer._settings_auth()
    assert auth["security_protocol"] == "SASL_PLAINTEXT"
    assert auth["sasl_plain_username"] == "svc-grimoire"


async def test_a_plaintext_worker_has_no_credentials() -> None:
    app = create_app(unit_settings())
    assert app.conf.broker_credentials is None


# -- settings --------------------------------------------------------------------------------


def test_settings_from_environment_variables(
    monkeypatch: pytest.MonkeyPatch, tls_files: dict[str, Path]
) -> None:
    for name, value in {
        "GRIMOIRE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "GRIMOIRE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "GRIMOIRE_KAFKA_SASL_USERNAME": "svc-grimoire",
        "GRIMOIRE_KAFKA_SASL_PASSWORD": PASSWORD,
        "GRIMOIRE_KAFKA_SSL_CAFILE": str(tls_files["ca"]),
        "GRIMOIRE_KAFKA_SSL_CHECK_HOSTNAME": "false",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert isinstance(settings.broker.sasl_password, SecretStr)
    security = settings.kafka_security
    assert security == KafkaSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="svc-grimoire",
        sasl_password=PASSWORD,
        ssl_cafile=tls_files["ca"],
        ssl_check_hostname=False,
    )
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings)


def test_settings_that_do_not_fit_fail_at_load_without_echoing_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GRIMOIRE_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GRIMOIRE_KAFKA_SASL_PASSWORD", PASSWORD)
    monkeypatch.setenv("GRIMOIRE_REDIS_URL", "redis://app:redis-secret@cache:6379/0")
    with pytest.raises(ValueError, match="SASL_SSL needs sasl_mechanism") as caught:
        Settings(_env_file=None)
    assert PASSWORD not in str(caught.value)
    assert "redis-secret" not in str(caught.value)


def test_settings_env_hands_the_child_the_secret_itself(tls_files: dict[str, Path]) -> None:
    overrides = _sasl_settings() | {
        "kafka_security_protocol": "SASL_SSL",
        "kafka_ssl_cafile": tls_files["ca"],
        "redis_url": "redis://app:redis-secret@cache:6379/0",
    }
    settings = unit_settings(**overrides)
    env = settings_env(settings)
    assert env["GRIMOIRE_KAFKA_SASL_PASSWORD"] == PASSWORD
    assert env["GRIMOIRE_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["GRIMOIRE_KAFKA_SSL_CAFILE"] == str(tls_files["ca"])
    child_env = {k: v for k, v in env.items() if k.startswith("GRIMOIRE_")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in child_env.items():
            patch.setenv(name, value)
        child = Settings(_env_file=None)
    assert child.kafka_security == settings.kafka_security
    assert child.redis.url == settings.redis.url


# -- Redis: an ACL user, TLS, and URLs in logs ---------------------------------------------


async def test_redis_acl_user_and_tls_options_come_from_the_url() -> None:
    url = (
        "rediss://app:p%40ss%3Aword@cache.internal:6380/2"
        "?ssl_ca_certs=/etc/grimoire/ca.pem&ssl_cert_reqs=required"
        "&ssl_certfile=/etc/grimoire/client.pem&ssl_keyfile=/etc/grimoire/client.key"
    )
    client = create_redis(url, 2)
    try:
        connection = client.connection_pool.make_connection()
        assert (connection.username, connection.password) == ("app", "p@ss:word")
        assert (connection.host, connection.port, connection.db) == ("cache.internal", 6380, 2)
        context = connection.ssl_context  # type: ignore[attr-defined]
        assert context.ca_certs == "/etc/grimoire/ca.pem"
        assert context.certfile == "/etc/grimoire/client.pem"
        assert context.keyfile == "/etc/grimoire/client.key"
        assert context.cert_reqs == ssl.CERT_REQUIRED
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://app:s3cret@cache:6379/0", "redis://app:***@cache:6379/0"),
        (
            "rediss://:s3cret@cache/1?ssl_ca_certs=/ca.pem",
            "rediss://:***@cache/1?ssl_ca_certs=/ca.pem",
        ),
        ("redis://cache/0?password=s3cret&db=2", "redis://cache/0?password=***&db=2"),
        ("unix:///run/redis.sock?password=s3cret", "unix:///run/redis.sock?password=***"),
    ],
)
def test_a_url_with_a_password_is_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_logged_settings_mask_the_redis_passwords(caplog: pytest.LogCaptureFixture) -> None:
    settings = unit_settings(
        redis_url="redis://app:redis-secret@cache:6379/0",
        keystore_url="rediss://keys:keystore-secret@vault:6380/0",
        **_sasl_settings(),
    )
    logger = logging.getLogger("grimoire.test.kafka_security")
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("starting with %s", settings)
        logger.info("settings %r", settings)
    text = caplog.text
    for secret in ("redis-secret", "keystore-secret", PASSWORD):
        assert secret not in text
    assert "redis://app:***@cache:6379/0" in text
