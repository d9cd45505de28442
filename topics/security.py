"""How a Kafka client authenticates and encrypts: SASL and TLS, as aiokafka takes them.

One value, built from configuration (`GRIMOIRE_KAFKA_*`, infra/settings.py) or by an
SDK user, handed to every client the project creates: the SDK's producer and
consumer, the admin client that creates topics, the worker's Faust app (mapped to
Faust's credentials in infra/app.py), the replay and lag readers.

Light like the rest of `topics`: aiokafka and the standard library only.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from aiokafka.helpers import create_ssl_context

from grimoire.streams.exceptions import GrimoireError

__all__ = [
    "KafkaSecurity",
    "KafkaSecurityError",
    "SaslMechanism",
    "SecurityProtocol",
]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_PROTOCOLS: frozenset[str] = frozenset(get_args(SecurityProtocol))
_MECHANISMS: frozenset[str] = frozenset(get_args(SaslMechanism))


class KafkaSecurityError(GrimoireError, ValueError):
    """The Kafka security settings do not make a usable connection."""


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """PLAINTEXT (the default) needs nothing else. SASL_* needs a mechanism, a user
    name and a password; SSL and SASL_SSL verify the broker against `ssl_cafile`
    (else the system's certificate authorities) and present `ssl_certfile` /
    `ssl_keyfile` where the broker wants client certificates (mutual TLS).

    Settings that the protocol would not use are refused rather than ignored: a
    password set beside `SSL`, or a CA file beside `SASL_PLAINTEXT`, is almost
    always a protocol chosen wrongly, and would otherwise connect without them.
    """

    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    sasl_username: str | None = None
    # Kept out of repr: a logged or printed value never shows it.
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_check_hostname: bool = True

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise KafkaSecurityError("Kafka security settings: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        protocol = self.security_protocol
        if protocol not in _PROTOCOLS:
            return [f"security_protocol {protocol!r} is not one of {sorted(_PROTOCOLS)}"]
        found: list[str] = []
        if self.uses_sasl:
            if self.sasl_mechanism is None:
                found.append(f"{protocol} needs sasl_mechanism (one of {sorted(_MECHANISMS)})")
            elif self.sasl_mechanism not in _MECHANISMS:
                found.append(
                    f"sasl_mechanism {self.sasl_mechanism!r} is not one of {sorted(_MECHANISMS)}"
                )
            if not self.sasl_username:
                found.append(f"{protocol} needs sasl_username")
            if not self.sasl_password:
                found.append(f"{protocol} needs sasl_password")
        else:
            given = [
                name
                for name in ("sasl_mechanism", "sasl_username", "sasl_password")
                if getattr(self, name) is not None
            ]
            if given:
                found.append(
                    f"{', '.join(given)} given but security_protocol is {protocol}"
                    " (SASL_PLAINTEXT or SASL_SSL uses them)"
                )
        files = {
            "ssl_cafile": self.ssl_cafile,
            "ssl_certfile": self.ssl_certfile,
            "ssl_keyfile": self.ssl_keyfile,
        }
        if self.uses_tls:
            for name, path in files.items():
                if path is not None and not Path(path).is_file():
                    found.append(f"{name} {str(path)!r} is not a readable file")
            if self.ssl_keyfile is not None and self.ssl_certfile is None:
                found.append("ssl_keyfile given without ssl_certfile")
        else:
            given = [name for name, path in files.items() if path is not None]
            if given:
                found.append(
                    f"{', '.join(given)} given but security_protocol is {protocol}"
                    " (SSL or SASL_SSL uses them)"
                )
        return found

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """A fresh client context for SSL and SASL_SSL (None otherwise). Fresh on
        every call: a context is not shared between clients that may run on
        different event loops (Faust's consumer thread)."""
        if not self.uses_tls:
            return None
        context: ssl.SSLContext = create_ssl_context(
            cafile=self.ssl_cafile, certfile=self.ssl_certfile, keyfile=self.ssl_keyfile
        )
        if not self.ssl_check_hostname:
            # Still verifies the chain; only the name in the certificate is not
            # matched (brokers reached by an address their certificate lacks).
            context.check_hostname = False
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for AIOKafkaProducer, AIOKafkaConsumer and
        AIOKafkaAdminClient (aiokafka takes the SCRAM credentials under the
        `sasl_plain_*` names too)."""
        kwargs: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.uses_tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
            kwargs["sasl_plain_username"] = self.sasl_username
            kwargs["sasl_plain_password"] = self.sasl_password
        return kwargs
