"""Bulk-copy time and CPU of kafka-mirror-proxy builds against each other, in one run: a 1-broker
source holding RECORDS 1 KiB records in 8 partitions (ProducerPerformance, lz4) is mirrored into a
1-broker destination by each build in turn, 3 rotating rounds, the destination topic deleted
between copies. Prints each round and the medians (copy seconds, copy CPU seconds, the
destination broker's CPU seconds during the copy, peak RSS).

    python3 bench/copy_cpu_bench.py 524288 before=/path/to/old/kafka-mirror-proxy new=target/release/kafka-mirror-proxy

For MirrorMaker 2 and the lag phase use bench/mirror_bench.py; this one only compares builds."""
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for p in ("bench", "tests", "tests/harness"):
    sys.path.insert(0, str(REPO / p))
import mirror_bench as mb  # noqa: E402
from conftest import free_port, free_port_block  # noqa: E402
from kafka_cluster import KafkaCluster, classpath  # noqa: E402
from bench_workdir import bench_workdir  # noqa: E402

records = int(sys.argv[1])
builds = dict(a.split("=", 1) for a in sys.argv[2:])
work = bench_workdir("kmp-copy-cpu-")
src = KafkaCluster("al-src", 1, free_port_block(101), work).start()
dst = KafkaCluster("al-dst", 1, free_port_block(101), work).start()
cp = classpath()
res: dict[str, list] = {k: [] for k in builds}
try:
    mb.create_topic(cp, src.bootstrap, mb.TOPIC, 8)
    mb.producer_perf(cp, src.bootstrap, mb.TOPIC, records)
    expected = mb.watermarks(src.bootstrap, mb.TOPIC, 8)
    (dst_pid,) = dst.pids().values()
    n = 0
    for rnd in range(3):
        for name, binary in builds.items():
            if n:
                mb.delete_topic(cp, dst.bootstrap, mb.TOPIC, 8)
            cfg = work / f"p{n}.toml"
            cfg.write_text(f'[engine]\nstate_topic = "__kmp_state_{n}"\n[[mirrors]]\nname = "bench"\nsource_bootstrap_servers = ["{src.bootstrap}"]\ntopics = ["{mb.TOPIC}"]\n')
            argv = [binary, "run", "--upstream", dst.bootstrap, "--listen", f"127.0.0.1:{free_port()}", "--node-port-base", str(free_port_block(4) - 1),
                    "--admin-listen", f"127.0.0.1:{free_port()}", "--config", str(cfg), "--log", "warn"]
            started = time.time()
            proc = subprocess.Popen(argv, stdout=open(work / f"p{n}.log", "wb"), stderr=subprocess.STDOUT)
            r = mb.copy_run(proc, started, src.bootstrap, dst.bootstrap, 8, expected, dst_pid=dst_pid)
            rss = int([l for l in open(f"/proc/{proc.pid}/status") if l.startswith("VmHWM")][0].split()[1]) // 1024
            proc.terminate()
            proc.wait(60)
            res[name].append((r["copy_s"], r["copy_cpu_s"], rss, r["dst_cpu_s"]))
            print(f"round {rnd} {name}: copy {r['copy_s']:.2f} s, copy CPU {r['copy_cpu_s']:.2f} s, destination broker CPU {r['dst_cpu_s']:.2f} s, "
                  f"peak RSS {rss} MiB, identical {r['identical']}", flush=True)
            n += 1
finally:
    src.stop()
    dst.stop()
mbytes = records * 1024 / 1e6
for name, rs in res.items():
    cs = sorted(x[0] for x in rs)
    cc = sorted(x[1] for x in rs)
    bc = sorted(x[3] for x in rs)
    print(f"{name}: median copy {cs[1]:.2f} s ({mbytes / cs[1]:.0f} MB/s), median copy CPU {cc[1]:.2f} s ({mbytes / cc[1]:.0f} MB per CPU-s), "
          f"median destination broker CPU {bc[1]:.2f} s, peak RSS {[x[2] for x in rs]}")
