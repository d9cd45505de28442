"""TLS for the local broker: a throwaway certificate authority and a TLS terminator
(Debian's stunnel) in front of tansu, both on 127.0.0.1.

tansu 0.6.0 cannot encrypt its own listener: its `--cert` and `--key` flags are
accepted (one at a time: it refuses both together) and the listener stays
plaintext whatever the URL's scheme (docs/operations.md, "Kafka TLS and SASL").
So stunnel accepts TLS on the TLS port and forwards plaintext to tansu on its own
loopback port, and tansu *advertises* the TLS port: a client bootstraps through
TLS and every connection it opens after reading the metadata goes there too.

Files, under the services' state directory::

    <state>/tls/ca.pem, server.pem, server.key   (the CA's own key is never written)
    <state>/stunnel-<tls port>.conf
    <state>/run/stunnel-<tls port>.pid
    <state>/log/stunnel-<tls port>.log

`TlsLocalServices` is `LocalServices` with the terminator in front of its broker:
clients use `kafka_tls_bootstrap` and `kafka_security` (SSL, verified against the
CA file); the plaintext port stays on loopback for nothing but the terminator.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaClient
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from grimoire.infra.exceptions import ServiceError
from grimoire.infra.local.services import (
    HOST,
    LocalServices,
    ServicePorts,
    log_tail,
    port_open,
    run_coroutine,
)
from grimoire.topics.security import KafkaSecurity

__all__ = [
    "TlsFiles",
    "TlsLocalServices",
    "TlsTerminator",
    "make_tls_files",
    "stunnel_binary",
    "tls_handshake",
]

logger = logging.getLogger(__name__)


# Debian's stunnel4 package installs both names (stunnel is a link to stunnel4).
_STUNNEL_NAMES = ("stunnel4", "stunnel")
# A certificate this close to its end is made again rather than reused.
_RENEW_BEFORE = datetime.timedelta(days=1)


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # what clients verify the broker against (GRIMOIRE_KAFKA_SSL_CAFILE)
    cert: Path  # the server certificate, signed by the CA
    key: Path  # the server key (0600)


def _files_in(directory: Path) -> TlsFiles:
    return TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")


def _reusable(files: TlsFiles, names: Sequence[str], addresses: Sequence[str]) -> bool:
    """The files are all there, the server certificate is issued by this CA, names what
    is asked for and is not near its end."""
    if not all(path.is_file() for path in (files.ca, files.cert, files.key)):
        return False
    try:
        ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        cert.verify_directly_issued_by(ca)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    wanted = {*names, *(ipaddress.ip_address(a) for a in addresses)}
    present = {*san.get_values_for_type(x509.DNSName), *san.get_values_for_type(x509.IPAddress)}
    fresh = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > _RENEW_BEFORE
    return wanted <= present and fresh


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_tls_files(
    directory: Path,
    *,
    names: Sequence[str] = ("localhost",),
    addresses: Sequence[str] = (HOST,),
    valid_days: int = 30,
) -> TlsFiles:
    """A CA and a server certificate for `names` and `addresses` in `directory`, or
    the ones already there while they still fit: a restarted broker keeps its CA, so
    clients configured with the CA file go on connecting. The CA's key signs the
    server certificate in memory and is dropped: nothing else can ever be issued
    under this CA."""
    directory = Path(directory)
    files = _files_in(directory)
    if _reusable(files, names, addresses):
        return files
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    # Backdated a little: a clock a few seconds behind must not see a future certificate.
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Grimoire local Kafka CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(address)) for address in addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "grimoire-kafka")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    # The key first, created 0600, so it is never readable by others, not even briefly.
    _write(files.key, _pem_key(key), mode=0o600)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), mode=0o644)
    _write(files.ca, ca.public_bytes(serialization.Encoding.PEM), mode=0o644)
    logger.info("made a local CA and server certificate in %s", directory)
    return files


def _write(path: Path, data: bytes, *, mode: int) -> None:
    # Written aside and renamed: a reader never sees half a file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(tmp, mode)  # the umask may have taken bits off
    os.replace(tmp, path)


def stunnel_binary() -> str:
    """The stunnel program on PATH; a ServiceError that says how to get it otherwise."""
    for name in _STUNNEL_NAMES:
        found = shutil.which(name)
        if found:
            return found
    raise ServiceError(
        "stunnel is not installed: `make stunnel` (or `apt-get install stunnel4`) installs it"
    )


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def tls_handshake(port: int, cafile: Path, *, timeout: float = 2.0) -> str:
    """One TLS handshake with 127.0.0.1:`port`, verified against `cafile` (the
    certificate must name 127.0.0.1); the protocol version agreed."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((HOST, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        return tls.version() or ""


class TlsTerminator:
    """stunnel accepting TLS on 127.0.0.1:`listen_port` and forwarding plaintext to
    127.0.0.1:`backend_port`. Started in a session of its own (it outlives the caller
    like the services do), known by a pid file; `stop` ends only the process it
    started (its command line names this terminator's configuration file)."""

    def __init__(
        self,
        state_dir: Path,
        listen_port: int,
        backend_port: int,
        files: TlsFiles,
        *,
        binary: str | None = None,
        ready_timeout: float = 10.0,
        stop_timeout: float = 5.0,
    ) -> None:
        if listen_port == backend_port:
            raise ServiceError(f"the TLS port and the broker's port are both {listen_port}")
        self.state_dir = Path(state_dir).resolve()
        self.listen_port = listen_port
        self.backend_port = backend_port
        self.files = files
        self._binary = binary
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        return self.state_dir / f"stunnel-{self.listen_port}.conf"

    @property
    def pid_path(self) -> Path:
        return self.state_dir / "run" / f"stunnel-{self.listen_port}.pid"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "log" / f"stunnel-{self.listen_port}.log"

    def config_text(self) -> str:
        # foreground: the process is the one we started (its pid is ours to stop), and it
        # logs to stderr, which goes to the log file; no pid file of its own.
        return "\n".join(
            (
                "foreground = yes",
                "pid =",
                "syslog = no",
                "debug = notice",
                "[kafka]",
                f"accept = {HOST}:{self.listen_port}",
                f"connect = {HOST}:{self.backend_port}",
                f"cert = {self.files.cert}",
                f"key = {self.files.key}",
                "sslVersionMin = TLSv1.2",
                "",
            )
        )

    def pid(self) -> int | None:
        """The pid of this terminator's running stunnel, or None."""
        try:
            pid = int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None
        if self._child is not None and self._child.pid == pid and self._child.poll() is not None:
            return None  # ours, exited (a zombie until reaped)
        return pid if _alive(pid) and self._is_ours(pid) else None

    def _is_ours(self, pid: int) -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return str(self.config_path).encode() in argv

    def start(self) -> bool:
        """Start stunnel unless this terminator's is running; True if it was started.
        Returns once a TLS handshake verified against the CA file succeeds."""
        if self.pid() is not None:
            return False
        self.pid_path.unlink(missing_ok=True)
        if port_open(self.listen_port):
            raise ServiceError(
                f"{HOST}:{self.listen_port} (kafka TLS) is in use by a process this tool did "
                "not start; stop it or choose another TLS port"
            )
        binary = self._binary or stunnel_binary()
        for directory in (self.pid_path.parent, self.log_path.parent):
            directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        with self.log_path.open("wb") as log:
            child = subprocess.Popen(
                [binary, str(self.config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=True,
            )
        self._child = child
        self.pid_path.write_text(f"{child.pid}\n")
        logger.info(
            "started stunnel pid %d: TLS on %s:%d -> %s:%d (log %s)",
            child.pid, HOST, self.listen_port, HOST, self.backend_port, self.log_path,
        )  # fmt: skip
        try:
            self._wait_ready(child)
        except BaseException:
            self.stop()
            raise
        return True

    def _wait_ready(self, child: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "port not open"
        while True:
            if child.poll() is not None:
                raise ServiceError(
                    f"stunnel exited with {child.returncode} during startup; log "
                    f"({self.log_path}):\n{log_tail(self.log_path)}"
                )
            try:
                # The handshake is stunnel's alone (it connects to the broker only after
                # it), so this is ready whether or not the broker is up yet.
                tls_handshake(self.listen_port, self.files.ca, timeout=1.0)
                return
            except (OSError, ssl.SSLError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ServiceError(
                    f"stunnel on {HOST}:{self.listen_port} not ready after "
                    f"{self.ready_timeout:.0f}s ({last}); log ({self.log_path}):\n"
                    f"{log_tail(self.log_path)}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            logger.info("stopping stunnel pid %d", pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                if not self._wait_exit(pid, self.stop_timeout):
                    logger.warning("stunnel pid %d ignored SIGTERM; sending SIGKILL", pid)
                    os.kill(pid, signal.SIGKILL)
                    self._wait_exit(pid, 5.0)
        if self._child is not None and self._child.poll() is not None:
            self._child = None
        self.pid_path.unlink(missing_ok=True)

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self._child is not None and self._child.pid == pid:
                if self._child.poll() is not None:  # reaps it: no zombie left behind
                    return True
            elif not _alive(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def status(self) -> str:
        pid = self.pid()
        address = f"{HOST}:{self.listen_port} -> {HOST}:{self.backend_port}"
        if pid is not None:
            return f"running pid {pid} on {address}"
        if port_open(self.listen_port):
            return f"stopped ({HOST}:{self.listen_port} is in use by another process)"
        return "stopped"


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


async def _advertised_brokers(
    bootstrap: str, security: KafkaSecurity, timeout: float
) -> set[tuple[str, int]]:
    client = AIOKafkaClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=int(timeout * 1000),
        **security.aiokafka_kwargs(),
    )
    try:
        await client.bootstrap()
        metadata = await client.fetch_all_metadata()
        return {(broker.host, broker.port) for broker in metadata.brokers()}
    finally:
        await client.close()


class TlsLocalServices(LocalServices):
    """`LocalServices` whose broker is reached through a TLS terminator on
    `kafka_tls_port`: tansu listens in plaintext on `ports.kafka` (loopback), and
    advertises the TLS port, so clients connect through TLS only."""

    def __init__(
        self,
        state_dir: Path,
        ports: ServicePorts,
        wheel_cache: Path | None = None,
        *,
        kafka_tls_port: int,
        **options: Any,
    ) -> None:
        super().__init__(state_dir, ports, wheel_cache, **options)
        redis_ports = range(ports.redis, ports.redis + max(1, self.redis_cluster_masters))
        if kafka_tls_port == ports.kafka or kafka_tls_port in redis_ports:
            raise ServiceError(f"the TLS port {kafka_tls_port} is taken by another service")
        self.kafka_tls_port = kafka_tls_port
        self.tls_dir = self.state_dir / "tls"
        self.terminator = TlsTerminator(
            self.state_dir, kafka_tls_port, ports.kafka, _files_in(self.tls_dir)
        )

    @property
    def tls_files(self) -> TlsFiles:
        return self.terminator.files

    @property
    def kafka_tls_bootstrap(self) -> str:
        return f"{HOST}:{self.kafka_tls_port}"

    @property
    def kafka_security(self) -> KafkaSecurity:
        """What a client needs: TLS, the broker verified against the local CA."""
        return KafkaSecurity(security_protocol="SSL", ssl_cafile=self.tls_files.ca)

    def up(self) -> bool:
        """The certificates (made once, reused while they fit), the terminator, then
        the broker and Redis; True if anything was started."""
        served = _read_or_none(self.tls_files.cert)
        self.terminator.files = make_tls_files(self.tls_dir)
        if served != self.tls_files.cert.read_bytes():
            # New files (the old ones expiring): a running stunnel still serves the old pair.
            self.terminator.stop()
        # First, so the broker's readiness probe can go through it.
        started = self.terminator.start()
        try:
            return super().up() or started
        except BaseException:
            if started:
                self.terminator.stop()
            raise

    def down(self) -> None:
        super().down()
        self.terminator.stop()

    def status(self) -> dict[str, str]:
        return {**super().status(), "kafka-tls": self.terminator.status()}

    def _command(self, svc: Any) -> list[str]:
        command = super()._command(svc)
        if svc.name != "kafka":
            return command
        try:
            at = command.index("--advertised-listener-url") + 1
        except ValueError:
            raise ServiceError(
                "the broker's command has no --advertised-listener-url to point at the "
                f"TLS port: {command}"
            ) from None
        command[at] = f"tcp://{self.kafka_tls_bootstrap}"
        return command

    def _probe(self, svc: Any, timeout: float) -> None:
        if svc.name != "kafka":
            super()._probe(svc, timeout)
            return
        # Through the terminator: the plaintext port's metadata names the TLS port, which
        # a plaintext client could not use anyway.
        security = self.kafka_security
        brokers = run_coroutine(
            lambda: _advertised_brokers(self.kafka_tls_bootstrap, security, timeout)
        )
        if brokers != {(HOST, self.kafka_tls_port)}:
            raise ServiceError(
                f"the broker advertises {sorted(brokers)}, not the TLS port "
                f"{self.kafka_tls_bootstrap}: clients would leave TLS after bootstrap"
            )
