"""Free listening ports for brokers, proxies and relays, chosen below the kernel's ephemeral range
(re-exported by tests/kmp_common.py; the harness's own relays use them too)."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (outgoing connections take their local port from it)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports are handed out in one ascending sweep from a random start (wrapping at the top), so no
# port is handed out twice until the sweep has gone round: a port is only free while its owner is
# down, and owners go down on purpose (a proxy or broker restarted on the same ports). Without
# this, two picks of one proxy (bootstrap and admin port, each checked free but not held) once
# came out equal and the proxy failed to bind its admin listener ("Address already in use").
# Random picks that merely avoid earlier ones fragment the range until no block of 101 fits.
#
# KMP_PORT_RANGE=LOW-HIGH narrows the sweep: tests/run.sh runs two pytest processes at once (the
# plain suites and the TLS suite) and gives each its own half, so that one process cannot take a
# port the other has just checked free.
_cursor: int | None = None


def _range(size: int) -> tuple[int, int]:
    """The lowest and highest base port a block of ``size`` may start at."""
    low, high = 10000, _ephemeral_low()
    spec = os.environ.get("KMP_PORT_RANGE")
    if spec:
        try:
            a, b = (int(x) for x in spec.split("-"))
        except ValueError:
            raise SystemExit(f"KMP_PORT_RANGE must be LOW-HIGH, not {spec!r}") from None
        low, high = max(low, a), min(high, b)
    return low, high - size


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
    global _cursor
    low, high = _range(size)
    assert high > low, f"ports {low}..{high + size} (below the ephemeral range, within KMP_PORT_RANGE): no room for a block of {size}"
    if _cursor is None:
        _cursor = random.randrange(low, high)
    for _ in range((high - low) // size + 1):
        base = _cursor if _cursor <= high else low
        _cursor = base + size
        socks = []
        try:
            for p in range(base, base + size):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port block below the ephemeral range")

