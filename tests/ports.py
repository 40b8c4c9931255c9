"""Free loopback ports for tests that start `scripts/run.sh` (it listens on PORT, its
simulators on SIMULATOR_PORT and the next two, its development identity provider and LMS
simulator on the two after them)."""

from __future__ import annotations

import random
import socket


def free_block(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range (so a port
    the OS picks for another test's outgoing connection cannot take one of them meanwhile)."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20000, 32000)
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError("no free ports")


def run_script_ports() -> dict[str, str]:
    """PORT and SIMULATOR_PORT for run.sh, all six ports it uses free."""
    first = free_block(6)
    return {"PORT": str(first), "SIMULATOR_PORT": str(first + 1)}
