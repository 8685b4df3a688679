"""How one node of a multi-node run meets the others: torchrun's rendezvous on the gang leader's c10d store.

The leader (node 0, fleet.gangs) picks the endpoint; every node starts torchrun with the same endpoint and run
id, its own node rank and the address its peers reach it on (--local-addr; the hostname may not resolve to it,
as inside a network namespace or a pod). Gloo and NCCL are pinned to the interface that holds that address.
"""

from __future__ import annotations

import argparse
import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Rendezvous:
    nodes: int
    node_rank: int
    endpoint: str  # host:port of the c10d store, on node 0
    run_id: str  # the same on every node of one attempt (job id and fence)
    local_address: str  # this node's address, as its peers reach it

    def arguments(self) -> list[str]:
        """The flags that carry the rendezvous to `python -m executor.training` (read back by from_arguments)."""
        return ["--nodes", str(self.nodes), "--node-rank", str(self.node_rank), "--rendezvous", self.endpoint,
                "--rendezvous-id", self.run_id, "--local-address", self.local_address]

    def torchrun_arguments(self) -> list[str]:
        # torchrun's static rendezvous: the c10d TCPStore on node 0 at the endpoint, and each node's rank as the
        # gang gave it. (The dynamic c10d backend ranks nodes by sorted address, so global rank 0 — progress, the
        # checkpoint seal, the export — could land on a member instead of the host whose worker holds the job.)
        host, _, port = self.endpoint.rpartition(":")
        return [f"--nnodes={self.nodes}", f"--node-rank={self.node_rank}", "--rdzv-backend=static",
                f"--master-addr={host}", f"--master-port={port}", f"--rdzv-id={self.run_id}",
                f"--local-addr={self.local_address}"]

    def environment(self) -> dict[str, str]:
        """Pin the collectives to the interface of local_address (else they bind what the hostname resolves to)."""
        interface = interface_of(self.local_address)
        return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface} if interface else {}

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The flags of `arguments`, hidden: only a fleet worker passes them."""
        parser.add_argument("--nodes", type=int, default=1, help=argparse.SUPPRESS)
        parser.add_argument("--node-rank", type=int, default=0, help=argparse.SUPPRESS)
        parser.add_argument("--rendezvous", default="", help=argparse.SUPPRESS)
        parser.add_argument("--rendezvous-id", default="", help=argparse.SUPPRESS)
        parser.add_argument("--local-address", default="", help=argparse.SUPPRESS)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> Rendezvous | None:
        if not args.rendezvous:
            return None
        return cls(args.nodes, args.node_rank, args.rendezvous, args.rendezvous_id, args.local_address)


def interface_of(address: str) -> str:
    """The network interface that holds `address` ("" when none does)."""
    import psutil  # only a multi-node run needs it, and only a fleet worker (the 'queue' extra) starts one

    wanted = ipaddress.ip_address(address)
    for name, addresses in psutil.net_if_addrs().items():
        for a in addresses:
            try:
                if ipaddress.ip_address(a.address.split("%")[0]) == wanted:
                    return name
            except ValueError:
                continue  # a MAC address
    return ""
