"""Issue 11, finding 8: a connection may announce a frame of up to 100 MiB and then send nothing
more. Buffers grow as bytes arrive and all connections share a bounded budget, so 40 such
connections cost the proxy next to nothing: started under a 2 GiB address-space limit
(`prlimit --as`) it stays up, a real client produces and consumes through it meanwhile, and its
resident memory stays far below the limit."""

import socket
import struct
import threading
from pathlib import Path

from sec_support import assert_alive, client_round_trip, proc_status, running_proxy

ADDRESS_SPACE = 2 * 1024 * 1024 * 1024
ANNOUNCED = 100 * 1024 * 1024  # listener.max_request_frame_bytes: the largest frame a client may send
CONNECTIONS = 40
RSS_BOUND_KB = 1024 * 1024  # 1 GiB, half the address space


def address_space_limit(pid: int) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max address space"):
            return line.split()[3]
    raise AssertionError(f"/proc/{pid}/limits has no address-space line")


def test_forty_connections_announcing_100_mib_frames_neither_kill_nor_bloat_the_proxy(destination, workdir):
    with running_proxy(destination, workdir, wrapper=["prlimit", f"--as={ADDRESS_SPACE}", "--"]) as proxy:
        assert address_space_limit(proxy.pid) == str(ADDRESS_SPACE), "precondition: the proxy runs under a 2 GiB address-space limit"
        peak = [proc_status(proxy.pid, "VmRSS")]
        sampling = threading.Event()

        def sample():
            while not sampling.wait(0.05):
                try:
                    peak.append(proc_status(proxy.pid, "VmRSS"))
                except (OSError, AssertionError):
                    return

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        socks = []
        try:
            for i in range(CONNECTIONS):
                s = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
                # The length prefix of a 100 MiB Produce frame, then only its first header bytes.
                s.sendall(struct.pack(">ihhi", ANNOUNCED, 0, 7, i) + b"\x00\x03abc")
                socks.append(s)
                assert_alive(proxy, f"after {i + 1} connections each announcing a {ANNOUNCED >> 20} MiB frame", watch_s=0.05)
            assert_alive(proxy, f"with {CONNECTIONS} connections holding announced {ANNOUNCED >> 20} MiB frames", watch_s=1.0)
            client_round_trip(proxy.bootstrap, f"while {CONNECTIONS} connections announce {ANNOUNCED >> 20} MiB frames")
            assert_alive(proxy, "after the client round trip")
        finally:
            sampling.set()
            sampler.join(5)
            for s in socks:
                s.close()
        assert max(peak) < RSS_BOUND_KB, (f"the proxy's resident memory reached {max(peak) // 1024} MiB with {CONNECTIONS} announced "
                                          f"{ANNOUNCED >> 20} MiB frames (bound {RSS_BOUND_KB // 1024} MiB)")
