"""The TLS settings against a real nats-server that requires TLS (operator mode too):
the services' connection and the SDK's both go through with the CA given, and a client
without TLS is refused."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import subprocess
from pathlib import Path

import nats
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.eventually import eventually
from zeromem.auth.authority import Authority
from zeromem.bus import connect_nats, provision
from zeromem.embedded import free_port
from zeromem.embedded.servers import find_nats_server
from zeromem.sdk import MemoryClient
from zeromem.settings import BusSettings, Settings


def _certificates(root: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key) files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zeromem test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = root / "ca.pem", root / "server.pem", root / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


async def test_nats_over_tls_with_the_configured_ca(tmp_path: Path, authority: Authority) -> None:
    ca, cert, key = _certificates(tmp_path)
    port = free_port()
    config = tmp_path / "nats.conf"
    config.write_text(
        authority.nats_config(
            host="127.0.0.1",
            port=port,
            store_dir=tmp_path / "js",
            resolver_dir=tmp_path / "acc",
            extra=f'tls {{ cert_file: "{cert}", key_file: "{key}" }}',
        )
    )
    server = await asyncio.create_subprocess_exec(
        find_nats_server(), "-c", str(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        url = f"tls://127.0.0.1:{port}"
        settings = Settings(
            auth_dir=str(authority.directory),
            bus=BusSettings(
                nats_url=url,
                nats_tls_ca=str(ca),
                nats_creds=str(authority.service_creds_path("admin")),
            ),
        )
        nc = await eventually(
            lambda: connect_nats(settings, "tls-test"), retry_on=(Exception,), interval=0.1
        )
        await provision(nc.jetstream(), settings)  # the JetStream API, over TLS
        await nc.close()
        as_agent = settings.with_(bus={"nats_creds": ""})  # an agent's credential, minted
        async with await MemoryClient.connect(
            url, tenant="acme", agent="tls", settings=as_agent
        ) as client:
            receipt = await client.put("user:u1:k", 1, wait="stored")
            assert receipt.status == "stored"
        with pytest.raises(Exception):  # noqa: B017  (a plain-text client: refused)
            await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=2)
    finally:
        server.terminate()
        await server.wait()
