"""A throwaway local Redis Cluster: three masters from the system ``redis-server`` (7.0+) on free
loopback ports, slots split by ``redis-cli --cluster create``, every wait bounded, torn down after."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (held open together, so no two are the same)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


class LocalRedisCluster:
    """``masters`` redis-server processes with ``--cluster-enabled yes`` (no persistence, no replicas)."""

    def __init__(self, masters: int = 3) -> None:
        ports = _free_ports(2 * masters)
        self.ports = ports[:masters]
        self.bus_ports = ports[masters:]  # cluster-port: the bus is not port + 10000 (may be taken)
        self.dir = Path(tempfile.mkdtemp(prefix="cg-redis-cluster-"))
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def cli(self, *args: str, timeout: float = 120.0) -> str:
        cli = shutil.which("redis-cli")
        assert cli, "redis-cli is not installed (run scripts/ensure-services)"
        done = subprocess.run([cli, *args], capture_output=True, timeout=timeout, check=True, text=True)
        return done.stdout

    def _spawn(self, port: int, bus: int | None) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (run scripts/ensure-services)"
        node_dir = self.dir / str(port)
        node_dir.mkdir()
        cluster = [] if bus is None else ["--cluster-enabled", "yes", "--cluster-port", str(bus)]
        cluster += [] if bus is None else ["--cluster-config-file", str(node_dir / "nodes.conf")]
        settings = ["--save", "", "--appendonly", "no", "--dir", str(node_dir)]
        self.procs.append(
            subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", *cluster, *settings],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    def start_single(self) -> str:
        """Instead of a cluster, start one plain node (cluster mode off, otherwise the same settings)
        on the first port: the like-for-like baseline of benchmarks. Returns its ``redis://`` URL."""
        self._spawn(self.ports[0], None)
        self._wait(lambda: "PONG" in self._ping(self.ports[0]), "the node to answer")
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        for port, bus in zip(self.ports, self.bus_ports, strict=True):
            self._spawn(port, bus)
        for port in self.ports:
            self._wait(lambda port=port: "PONG" in self._ping(port), f"node {port} to answer")
        nodes = [f"127.0.0.1:{port}" for port in self.ports]
        self.cli("--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes")
        for port in self.ports:
            self._wait(lambda port=port: "cluster_state:ok" in self._info(port), f"node {port} to agree")

    def _ping(self, port: int) -> str:
        try:
            return self.cli("-p", str(port), "ping", timeout=5)
        except subprocess.SubprocessError:
            return ""

    def _info(self, port: int) -> str:
        return self.cli("-p", str(port), "cluster", "info", timeout=5)

    @staticmethod
    def _wait(check: object, what: str, timeout: float = 30.0) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:g} s for {what}")
            time.sleep(0.05)

    def masters(self) -> dict[str, list[tuple[int, int]]]:
        """``{"127.0.0.1:port": [(first_slot, last_slot), ...]}`` as the cluster reports it."""
        out: dict[str, list[tuple[int, int]]] = {}
        for line in self.cli("-p", str(self.ports[0]), "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" not in fields[2]:
                continue
            address = fields[1].split("@", 1)[0]
            ranges = out.setdefault(address, [])
            for item in fields[8:]:
                if not item.startswith("["):
                    first, _, last = item.partition("-")
                    ranges.append((int(first), int(last or first)))
        return out

    def node_ids(self) -> dict[str, str]:
        """``{"127.0.0.1:port": node id}`` of the masters (for ``--cluster reshard``)."""
        out = {}
        for line in self.cli("-p", str(self.ports[0]), "cluster", "nodes").splitlines():
            fields = line.split()
            if "master" in fields[2]:
                out[fields[1].split("@", 1)[0]] = fields[0]
        return out

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
