"""The local TLS terminator's pieces that need no process: the throwaway CA and
server certificate, stunnel's configuration, and the broker command pointed at
the TLS port (infra/local/tls.py). Starting stunnel in front of a real broker is
tests/integration/test_kafka_tls.py."""

from __future__ import annotations

import ipaddress
import shutil
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.verification import PolicyBuilder, Store

from grimoire.infra.exceptions import ServiceError
from grimoire.infra.local import tls as tls_module
from grimoire.infra.local.services import ServicePorts
from grimoire.infra.local.tls import (
    TlsLocalServices,
    TlsTerminator,
    make_tls_files,
    stunnel_binary,
)


def _verify(ca_path: Path, cert_path: Path, name: x509.GeneralName) -> None:
    ca = x509.load_pem_x509_certificate(ca_path.read_bytes())
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    verifier = PolicyBuilder().store(Store([ca])).build_server_verifier(name)
    verifier.verify(cert, [])


def test_the_server_certificate_chains_to_the_ca_for_its_names(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls", names=("localhost", "kafka"))
    for name in (
        x509.DNSName("localhost"),
        x509.DNSName("kafka"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ):
        _verify(files.ca, files.cert, name)
    with pytest.raises(x509.verification.VerificationError):
        _verify(files.ca, files.cert, x509.DNSName("elsewhere.example"))
    # The pair loads as a server's would (stunnel reads the same files).
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(files.cert, files.key)


def test_only_the_key_is_private_and_the_ca_key_is_never_written(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path)
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert stat.S_IMODE(files.ca.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ca.pem", "server.key", "server.pem"]
    keys = [p for p in tmp_path.iterdir() if b"PRIVATE KEY" in p.read_bytes()]
    assert keys == [files.key]


def test_files_are_reused_while_they_fit_and_made_again_when_not(tmp_path: Path) -> None:
    first = make_tls_files(tmp_path)
    ca = first.ca.read_bytes()
    assert make_tls_files(tmp_path).ca.read_bytes() == ca  # a restart keeps its CA

    # A name the certificate lacks: a new pair.
    assert make_tls_files(tmp_path, names=("localhost", "kafka")).ca.read_bytes() != ca

    # A certificate of another CA beside this CA: a new pair.
    other = make_tls_files(tmp_path / "other")
    shutil.copy(other.cert, tmp_path / "server.pem")
    remade = make_tls_files(tmp_path, names=("localhost", "kafka"))
    _verify(remade.ca, remade.cert, x509.DNSName("kafka"))


def test_a_certificate_near_its_end_is_made_again(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path, valid_days=1)  # under a day left once made
    before = files.cert.read_bytes()
    assert make_tls_files(tmp_path).cert.read_bytes() != before


def test_stunnel_missing_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tls_module.shutil, "which", lambda name: None)
    with pytest.raises(ServiceError, match="make stunnel"):
        stunnel_binary()


def test_the_terminator_listens_on_loopback_and_forwards_to_the_broker(tmp_path: Path) -> None:
    files = make_tls_files(tmp_path / "tls")
    terminator = TlsTerminator(tmp_path, 19493, 19492, files)
    lines = terminator.config_text().splitlines()
    assert "accept = 127.0.0.1:19493" in lines
    assert "connect = 127.0.0.1:19492" in lines
    assert f"cert = {files.cert}" in lines and f"key = {files.key}" in lines
    assert "sslVersionMin = TLSv1.2" in lines
    # Kept in the foreground: the pid we started is the one we stop.
    assert "foreground = yes" in lines
    assert terminator.pid() is None  # no pid file: nothing of ours runs
    with pytest.raises(ServiceError, match="both 19492"):
        TlsTerminator(tmp_path, 19492, 19492, files)


def test_the_broker_listens_on_its_port_and_advertises_the_tls_port(tmp_path: Path) -> None:
    services = TlsLocalServices(
        tmp_path, ServicePorts(kafka=19492, redis=16492), kafka_tls_port=19493
    )
    make_tls_files(services.tls_dir)
    command = services._command(services._kafka)
    assert command[command.index("--listener-url") + 1] == "tcp://127.0.0.1:19492"
    assert command[command.index("--advertised-listener-url") + 1] == "tcp://127.0.0.1:19493"
    assert services.kafka_tls_bootstrap == "127.0.0.1:19493"
    security = services.kafka_security
    assert (
        security.security_protocol == "SSL" and security.ssl_cafile == tmp_path / "tls" / "ca.pem"
    )


@pytest.mark.parametrize("taken", ["kafka", "redis"])
def test_the_tls_port_must_be_its_own(tmp_path: Path, taken: str) -> None:
    ports = ServicePorts(kafka=19492, redis=16492)
    with pytest.raises(ServiceError, match="TLS port"):
        TlsLocalServices(tmp_path, ports, kafka_tls_port=getattr(ports, taken))


def test_the_tls_port_must_not_be_a_cluster_masters(tmp_path: Path) -> None:
    ports = ServicePorts(kafka=19492, redis=16492)
    with pytest.raises(ServiceError, match="TLS port 16494"):
        TlsLocalServices(tmp_path, ports, kafka_tls_port=16494, redis_cluster_masters=3)
