"""The dev overlay's pods, run here as the manifests configure them: the README's round
trip without a cluster.

Each pod's containers get exactly what Kubernetes would give them: the rendered
ConfigMaps and the Secrets k8s/secrets.py makes from a real `zeromem auth export`, as
files where the pod mounts them (under a temp directory) and as environment variables,
with `$(VAR)` expanded in args and a StatefulSet pod's ordinal label. What differs is only
where things are: mount paths move under the temp directory, and service names and ports
become 127.0.0.1 and free ports. nats-server and Valkey are the binaries the project's
tests run; the zeromem processes run from this checkout. Then an agent credential puts a
memory and gets it back through NATS, as in README "Deploying on Kubernetes".
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.test_manifests import _load
from zeromem.auth.authority import Authority
from zeromem.embedded.servers import find_nats_server, find_redis_server, free_port

check = _load("check")
k8s_secrets = _load("secrets")


class Pods:
    """Materialises the pods of one rendered overlay under ``root``."""

    def __init__(self, objects: list[dict[str, Any]], secrets: list[dict[str, Any]], root: Path):
        self.objects = objects
        self.root = root
        self.config_maps = {
            o["metadata"]["name"]: {k: v.encode() for k, v in o["data"].items()}
            for o in objects
            if o["kind"] == "ConfigMap"
        }
        self.secrets = {
            s["metadata"]["name"]: {k: base64.b64decode(v) for k, v in s["data"].items()}
            for s in secrets
        }
        self.ports = {
            "zeromem-nats:4222": free_port(),
            "zeromem-redis:6379": free_port(),
        }
        # Mount path -> where it lies here; filled as pods are materialised.
        self.mounts: dict[str, Path] = {}

    def relocate(self, text: str) -> str:
        """Mount paths and service addresses as they are here (one pass: a relocated path
        is not relocated again)."""
        places = {m: str(here) for m, here in self.mounts.items()}
        places |= {address: f"127.0.0.1:{port}" for address, port in self.ports.items()}
        pattern = "|".join(re.escape(p) for p in sorted(places, key=len, reverse=True))
        return re.sub(pattern, lambda m: places[m[0]], text)

    def _files(self, source: dict[str, Any], data: dict[str, bytes]) -> dict[str, bytes]:
        items = source.get("items")
        return {i["path"]: data[i["key"]] for i in items} if items else dict(data)

    def materialise(self, workload: str) -> tuple[dict[str, Any], dict[str, str]]:
        """(the container, its environment) of ``workload``'s first pod."""
        obj = next(
            o
            for o in self.objects
            if o["metadata"]["name"] == workload and "template" in o.get("spec", {})
        )
        spec = obj["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        pod = f"{workload}-0" if obj["kind"] == "StatefulSet" else f"{workload}-abc12"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            here = self.root / pod / mount["mountPath"].lstrip("/")
            here.mkdir(parents=True, exist_ok=True)
            self.mounts[mount["mountPath"]] = here
            volume = volumes.get(mount["name"], {})
            files: dict[str, bytes] = {}
            if "configMap" in volume:
                files = self._files(
                    volume["configMap"], self.config_maps[volume["configMap"]["name"]]
                )
            if "secret" in volume:
                files = self._files(volume["secret"], self.secrets[volume["secret"]["secretName"]])
            for source in volume.get("projected", {}).get("sources", []):
                kind = "configMap" if "configMap" in source else "secret"
                store = self.config_maps if kind == "configMap" else self.secrets
                files |= self._files(source[kind], store[source[kind]["name"]])
            for path, content in files.items():
                (here / path).parent.mkdir(parents=True, exist_ok=True)
                (here / path).write_bytes(content)
        env: dict[str, str] = {}
        for env_from in container.get("envFrom", []):
            data = self.config_maps[env_from["configMapRef"]["name"]]
            env |= {k: v.decode() for k, v in data.items()}
        labels = {"apps.kubernetes.io/pod-index": "0"}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], item["value"])
                continue
            source = item["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[item["name"]] = self.secrets[ref["name"]][ref["key"]].decode()
            elif source["fieldRef"]["fieldPath"] == "metadata.name":
                env[item["name"]] = pod
            else:
                label = re.fullmatch(r"metadata\.labels\['(.+)'\]", source["fieldRef"]["fieldPath"])
                assert label, source
                env[item["name"]] = labels[label[1]]
        return container, {k: self.relocate(v) for k, v in env.items()}

    def relocate_files(self, mount: str) -> None:
        """Rewrite the files under a mount the same way (configs naming other mounts)."""
        for path in self.mounts[mount].rglob("*"):
            if path.is_file():
                path.write_text(self.relocate(path.read_text()))


@dataclass
class Running:
    pods: Pods
    tmp_path: Path
    processes: list[subprocess.Popen[bytes]]
    mcp_url: str
    mcp_token: str
    # workload -> (its container, the metrics port it listens on here)
    probed: dict[str, tuple[dict[str, Any], int]]


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], a) for a in args]


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    export, tokens, token = check.export_authority(tmp_path)
    objects = check.render(check.OVERLAYS / "dev")
    pods = Pods(objects, k8s_secrets.secrets(export, tokens)["items"], tmp_path / "pods")
    processes: list[subprocess.Popen[bytes]] = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, command: list[str], env: dict[str, str]) -> None:
        base = {
            k: v for k, v in os.environ.items() if not k.startswith(("ZEROMEM_", "NATS_", "REDIS_"))
        }
        log = (logs / f"{name}.log").open("wb")
        processes.append(
            subprocess.Popen(command, env=base | env, stdout=log, stderr=subprocess.STDOUT)
        )

    try:
        # NATS: its config names its volume (/data) and its listen addresses.
        container, env = pods.materialise("zeromem-nats")
        pods.ports["0.0.0.0:8222"] = free_port()
        pods.relocate_files("/etc/nats")
        for conf in pods.mounts["/etc/nats"].rglob("*.conf"):
            text = re.sub(
                r"(?m)^port: 4222$", f"port: {pods.ports['zeromem-nats:4222']}", conf.read_text()
            )
            conf.write_text(re.sub(r'(?m)^host: "?0\.0\.0\.0"?$', "host: 127.0.0.1", text))
        command = expand(container["command"], env)
        start("nats", [find_nats_server(), *[pods.relocate(a) for a in command[1:]]], env)
        # Valkey: port, volume and ACL file; the rest of redis.conf as rendered.
        container, env = pods.materialise("zeromem-redis")
        conf = pods.mounts["/etc/redis/conf"] / "redis.conf"
        text = pods.relocate(conf.read_text())
        text = text.replace("port 6379", f"port {pods.ports['zeromem-redis:6379']}")
        conf.write_text(text.replace("bind * -::*", "bind 127.0.0.1"))
        start("redis", [find_redis_server(), str(conf)], env)
        _wait_for_ports(pods.ports["zeromem-nats:4222"], pods.ports["zeromem-redis:6379"])
        probed: dict[str, tuple[dict[str, Any], int]] = {}
        for workload in ("zeromem-worker", "zeromem-serve"):
            container, env = pods.materialise(workload)
            env["ZEROMEM_METRICS_PORT"] = str(free_port())
            probed[workload] = (container, int(env["ZEROMEM_METRICS_PORT"]))
            argv = [sys.executable, "-m", "zeromem.cli.main", *expand(container["args"], env)]
            start(workload, argv, env)
        # The MCP server: its token file names the credentials where the pod mounts them.
        container, env = pods.materialise("zeromem-mcp")
        env["ZEROMEM_METRICS_PORT"] = str(free_port())
        probed["zeromem-mcp"] = (container, int(env["ZEROMEM_METRICS_PORT"]))
        pods.relocate_files("/etc/zeromem/mcp")
        mcp_port = free_port()
        args = expand(container["args"], env)
        args[args.index("--port") + 1] = str(mcp_port)
        args[args.index("--host") + 1] = "127.0.0.1"
        args = [pods.relocate(a) for a in args]
        start("zeromem-mcp", [sys.executable, "-m", "zeromem.cli.main", *args], env)
        yield Running(pods, tmp_path, processes, f"http://127.0.0.1:{mcp_port}/mcp", token, probed)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in sorted(logs.glob("*.log")):
            sys.stdout.write(f"--- {log.name}\n{log.read_text()[-3000:]}\n")


def _wait_for_ports(*ports: int, timeout: float = 20.0) -> None:
    import socket

    deadline = time.monotonic() + timeout
    for port in ports:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nothing listens on {port}") from None
                time.sleep(0.1)


@pytest.mark.timeout(120)
def test_the_dev_pods_configured_as_rendered_do_a_round_trip(running: Running) -> None:
    pods, tmp_path, processes = running.pods, running.tmp_path, running.processes
    authority = Authority.load(tmp_path / "auth")
    creds = authority.issue_agent("acme", "cli").write(tmp_path / "cli.creds")
    client_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ZEROMEM_", "NATS_", "REDIS_"))
    }
    client_env |= {
        "ZEROMEM_NATS_URL": f"nats://127.0.0.1:{pods.ports['zeromem-nats:4222']}",
        "ZEROMEM_CREDS": str(creds),
        "ZEROMEM_REDIS_URL": "redis://unused:6379/0",  # as README: clients never use it
        "ZEROMEM_DATA_DIR": str(tmp_path / "client"),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "zeromem.cli.main", *args],
            env=client_env,
            capture_output=True,
            text=True,
            timeout=30,
        )

    # The worker provisions the streams and takes its shards' leases: retry until it has.
    deadline = time.monotonic() + 60
    while True:
        put = cli("put", "user:u1:pref_lang", '"Python"')
        if put.returncode == 0 or time.monotonic() > deadline:
            break
        assert all(p.poll() is None for p in processes), put.stderr
        time.sleep(1)
    assert put.returncode == 0, put.stdout + put.stderr
    assert put.stdout.startswith("applied user:u1:pref_lang version 1"), put.stdout
    got = cli("get", "user:u1:pref_lang", "--json")
    assert got.returncode == 0, got.stderr
    assert '"Python"' in got.stdout

    # The MCP server reads it back for the agent its bearer token names (acme/claude).
    read = mcp_tool_call(
        running.mcp_url,
        running.mcp_token,
        "memory_read",
        {"namespace": "user", "owner": "u1", "name": "pref_lang"},
    )
    assert "Python" in json.dumps(read), read

    # Each probe the manifests give the worker, the read services and the MCP server
    # answers 200 here.
    import httpx

    for workload, (container, port) in running.probed.items():
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            get = container[probe]["httpGet"]
            assert get["port"] == "metrics"
            (metrics,) = [p for p in container["ports"] if p["name"] == "metrics"]
            assert metrics["containerPort"] == 9464
            answer = httpx.get(f"http://127.0.0.1:{port}{get['path']}", timeout=5)
            assert answer.status_code == 200, (workload, probe, answer.text)
    assert all(p.poll() is None for p in processes)


def mcp_tool_call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """initialize, initialized, tools/call over streamable HTTP; the call's result."""
    import httpx

    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {token}",
        "MCP-Protocol-Version": "2025-06-18",
    }

    def reply(response: httpx.Response) -> Any:
        assert response.status_code == 200, (response.status_code, response.text)
        if response.headers["content-type"].startswith("text/event-stream"):
            data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
            return json.loads(data[-1])
        return response.json()

    with httpx.Client(timeout=10) as http:
        deadline = time.monotonic() + 30
        while True:
            try:
                init = http.post(
                    url,
                    headers=headers,
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-06-18",
                            "capabilities": {},
                            "clientInfo": {"name": "k8s-test", "version": "0"},
                        },
                    },
                )
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        reply(init)
        session = init.headers.get("mcp-session-id")
        if session:
            headers["mcp-session-id"] = session
        http.post(
            url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        call = http.post(
            url,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            },
        )
        return reply(call)["result"]
