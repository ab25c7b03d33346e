"""Free listening ports for brokers, proxies and relays, chosen below the kernel's ephemeral range
(re-exported by tests/kmp_common.py; the harness's own relays use them too)."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections take their local port from it)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Every port handed out in this process, never handed out again: a port is only free while its
# owner is down, and owners go down on purpose (a proxy or broker restarted on the same ports).
# Without this, two picks of one proxy (bootstrap and admin port, checked free one after the
# other but not held) once came out equal, and the proxy failed to bind its admin listener
# ("Address already in use") — about one run in four of the full suite, by the numbers.
_issued: set[int] = set()


def free_port() -> int:
    """A free listening port outside the ephemeral range (see :func:`free_port_block`)."""
    return free_port_block(1)


def free_port_block(size: int) -> int:
    """A base port such that base..base+size-1 are all free.

    The block lies below the kernel's ephemeral range: a port from that range that is free now can be
    taken by any outgoing connection (the proxy's or a broker's) while its listener is down, so a broker
    or proxy restarted on it would fail to bind (seen under load: a destination broker killed and restarted
    by a test exited with "Address already in use" on its controller port).
    """
    high = _ephemeral_low() - size
    assert high > 10000, f"the ephemeral range starts at {_ephemeral_low()}: no room for a block of {size} below it"
    for _ in range(200):
        base = random.randrange(10000, high)
        block = range(base, base + size)
        if any(p in _issued for p in block):
            continue
        socks = []
        try:
            for p in block:
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            _issued.update(block)
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port block below the ephemeral range")

