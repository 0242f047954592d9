"""A NATS JetStream cluster of child processes on this machine: the test fixtures' way to
run streams with three replicas and kill a node under load (issue 17). A single
``NatsServer`` stays the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zeromem.embedded.servers import ClusterRoutes, NatsServer, free_port


class NatsCluster:
    """``size`` nats-server nodes routed to each other, each with its own JetStream store
    under ``data_dir/node-N``; ``url`` names them all (``nats://a,nats://b,...``)."""

    def __init__(
        self, data_dir: Path, size: int = 3, authority: Any = None, name: str = "zeromem"
    ) -> None:
        route_ports = tuple(free_port() for _ in range(size))
        self.nodes = [
            NatsServer(
                Path(data_dir) / f"node-{i}",
                authority=authority,
                server_name=f"{name}-{i}",
                cluster=ClusterRoutes(name, route_ports[i], route_ports),
            )
            for i in range(size)
        ]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def start(self) -> NatsCluster:
        for node in self.nodes:
            node.start()
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
