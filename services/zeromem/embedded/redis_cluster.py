"""A Redis Cluster (or Valkey cluster) of child processes on this machine: the fixtures'
way to run the store on several masters, with replicas where a scenario kills a master
(issue 17). The same server binary as the single embedded Redis (``find_redis_server``),
each node on a free port with its own data directory, append-only file and node table.

The cluster is formed over the nodes' own commands, not ``redis-cli --cluster``: the
masters share the 16384 slots in equal ranges (CLUSTER ADDSLOTSRANGE), meet each other
(CLUSTER MEET), and each replica follows its master (CLUSTER REPLICATE). With an ACL
(``auth.redis_acl``) every node loads the same users, and a replica logs in to its master
as the admin user (``masteruser``), since the default user cannot log in.
"""

from __future__ import annotations

import time
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from zeromem.embedded.servers import RedisServer, ServerStartError, free_port
from zeromem.store.keys import SLOTS

# How long a master may be unreachable before its replica takes over (and a lone master
# is marked failed): short, so a fault scenario sees the failover within seconds.
NODE_TIMEOUT_MS = 2000


class RedisClusterNodes:
    """``masters`` nodes sharing the slots, each with ``replicas`` replicas, under
    ``data_dir/node-N``. ``admin`` is the (user, password) that forms the cluster and the
    replicas log in with when the nodes run an ACL; None for open nodes."""

    def __init__(
        self,
        data_dir: Path,
        *,
        masters: int = 3,
        replicas: int = 0,
        acl: str = "",
        admin: tuple[str, str] | None = None,
    ) -> None:
        if masters < 1:
            raise ValueError("a cluster needs at least one master")
        self.data_dir = Path(data_dir)
        self.masters_count = masters
        self.admin = admin
        replica_auth: tuple[str, ...] = ()
        if admin is not None:
            replica_auth = ("--masteruser", admin[0], "--masterauth", admin[1])
        count = masters * (1 + replicas)
        self.bus_ports = [free_port() for _ in range(count)]
        self.nodes = [
            RedisServer(
                self.data_dir / f"node-{i}",
                free_port(),
                acl=acl,
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(self.data_dir / f"node-{i}" / "nodes.conf"),
                    # the cluster bus on a free port of its own (by default port + 10000,
                    # past 65535 for a high free port)
                    "--cluster-port",
                    str(self.bus_ports[i]),
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    # a replica may take over however long it was cut off (a test kills its
                    # master at any moment)
                    "--cluster-replica-validity-factor",
                    "0",
                    *replica_auth,
                ),
            )
            for i in range(count)
        ]
        # node i < masters is a master; the others follow master (i - masters) % masters
        self.replicas_of = {
            m: [r for r in range(masters, len(self.nodes)) if (r - masters) % masters == m]
            for m in range(masters)
        }

    @property
    def url(self) -> str:
        """``redis+cluster://`` to the first node (the client finds the others)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def client(self, node: int) -> Redis:
        user, password = self.admin or (None, None)
        return Redis(
            host="127.0.0.1",
            port=self.nodes[node].port,
            username=user,
            password=password,
            socket_timeout=5,
        )

    def start(self, timeout: float = 30.0) -> RedisClusterNodes:
        fresh = not (self.data_dir / "node-0" / "nodes.conf").exists()
        for node in self.nodes:
            node.start()
        if fresh:
            self._form()
        self.wait_ok(timeout)
        return self

    def _form(self) -> None:
        per = SLOTS // self.masters_count
        for m in range(self.masters_count):
            last = SLOTS - 1 if m == self.masters_count - 1 else (m + 1) * per - 1
            with self.client(m) as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", m * per, last)
        with self.client(0) as first:
            for node, bus in zip(self.nodes[1:], self.bus_ports[1:], strict=True):
                first.execute_command("CLUSTER", "MEET", "127.0.0.1", node.port, bus)
        ids = {}
        for m in range(self.masters_count):
            with self.client(m) as c:
                ids[m] = c.execute_command("CLUSTER", "MYID").decode()
        for m, replicas in self.replicas_of.items():
            for r in replicas:
                self._until(lambda r=r, m=m: self._knows(r, ids[m]), 15.0, "node table")
                with self.client(r) as c:
                    c.execute_command("CLUSTER", "REPLICATE", ids[m])

    def _knows(self, node: int, node_id: str) -> bool:
        with self.client(node) as c:
            return node_id in c.execute_command("CLUSTER", "NODES").decode()

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every running node says the cluster is ok and every replica is in sync."""
        self._until(self._all_ok, timeout, "cluster_state:ok on every node")

    def _all_ok(self) -> bool:
        for i, node in enumerate(self.nodes):
            if not node.running:
                continue
            with self.client(i) as c:
                info = c.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return False
                if f"cluster_known_nodes:{len(self.nodes)}" not in info:
                    return False
                role = c.execute_command("ROLE")
                if role[0] == b"slave" and role[3] != b"connected":
                    return False
        return True

    @staticmethod
    def _until(check: object, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if check():  # type: ignore[operator]
                    return
            except RedisError as exc:
                last = exc
            time.sleep(0.05)
        raise ServerStartError(f"Redis Cluster: no {what} after {timeout:g} s ({last})")

    def master_of_slot(self, slot: int) -> int:
        """The index of the node serving ``slot`` as master right now."""
        for i, node in enumerate(self.nodes):
            if not node.running:
                continue
            with self.client(i) as c:
                for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        port = int(master[1])
                        return next(j for j, n in enumerate(self.nodes) if n.port == port)
        raise LookupError(f"no running node knows slot {slot}")

    def replica_of(self, master: int) -> int:
        """The index of a replica following node ``master`` right now."""
        with self.client(master) as c:
            role = c.execute_command("ROLE")
        ports = [int(r[1]) for r in role[2]] if role[0] == b"master" else []
        for i, node in enumerate(self.nodes):
            if node.port in ports:
                return i
        raise LookupError(f"node {master} has no replica")

    def replication_offset(self, node: int) -> int:
        """How far into its master's replication stream node ``node`` is (a master: how
        far it has written)."""
        with self.client(node) as c:
            return int(c.info("replication")["master_repl_offset"])

    def cut_replicas(self, master: int) -> None:
        """Close node ``master``'s connections to its replicas (each will connect again
        once it can): what the master writes meanwhile does not reach them."""
        with self.client(master) as c:
            c.execute_command("CLIENT", "KILL", "TYPE", "replica")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
