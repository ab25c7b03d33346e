"""Operations of a history on the mirror and the destination side, through the proxy's admin REST
API (``/v1``, the KIP-1279 operations) and process control.

``MirrorSide`` owns the seed's cluster mirror: created through ``POST /v1/mirrors``, topics
started, paused and resumed, and at the end stopped and the mirror deleted. A mirror that sets
``shift_prefix_from`` cannot be created that way — CreateClusterMirror (``POST /v1/mirrors``, the
Kafka RPC) knows no key for it and refuses unknown keys (``control::settings::KNOWN_KEYS``), nor
can IncrementalAlterConfigs set it — so such a mirror is declared in the config file of a proxy
of its own (``declared_config``; an ``include`` pattern no topic matches, since a declared mirror
must name something), and its topics are started through ``/v1`` like the others'. It also owns the
faults: the proxy killed with SIGKILL and started again (same ports and state topic), and the
destination broker leading a mirrored partition killed with SIGKILL and started again later (the
history says when; the runner makes sure it is back before comparing). ``catch_up`` waits, bounded,
until the destination (read through the proxy) has everything the source has, open transactions
included, with the same last stable offsets.
"""

from __future__ import annotations

import json
import signal
import time

from confluent_kafka import KafkaException

from mirror import call_retrying

from .kafka_io import TP, Admin, partition_counts, wait_until, watermarks

CATCH_UP_S = 90
# Topic configs never copied to the destination: the defaults of the engine (cluster-local
# settings) plus everything that makes a broker delete or compact on its own, which would race
# with the comparison (the source's cleaner and retention are what the test exercises).
CONFIG_EXCLUDE = ["min.insync.replicas", "unclean.leader.election.enable", "leader.replication.throttled.replicas",
                  "follower.replication.throttled.replicas", "remote.storage.enable", "local.retention.ms",
                  "local.retention.bytes", r"confluent\..*", "cleanup.policy", r"segment\..*", r"retention\..*",
                  "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms", "delete.retention.ms"]


# How long a started topic of a shifting mirror may take to be prepared (its shifts decided, the
# destination topic created and recorded) before the runner stops waiting for it (see
# ``Run.note_start``).
PREPARED_S = 30


class MirrorSide:
    def __init__(self, proxy, destination, source_bootstrap: str, mirror: str, names: list[str], log, hedge: bool = False,
                 declared: bool = False):
        self.proxy = proxy
        # Declared in the proxy's config file (``declared_config``) instead of created by REST.
        self.declared = declared
        # A second Fetch in flight whenever a partition is caught up (mirror.fetch.hedge.min.rtt.ms
        # = 0): every answer to an older offset is cut to the partition's position.
        self.hedge = hedge
        self.destination = destination  # harness KafkaCluster (3 brokers)
        self.source_bootstrap = source_bootstrap
        self.mirror = mirror
        self.names = names
        self.log = log
        self.started: set[int] = set()
        self.paused: set[int] = set()
        self.down: int | None = None  # destination broker killed and not started again yet
        self.restarted: list[int] = []

    # -- REST -------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        """A REST call, sent again while answered retriably (``mirror.call_retrying``), each retry
        logged in the history."""
        status, r, _ = call_retrying(self.proxy, method, path, body, log=self.log)
        return status, r

    def _topic_op(self, action: str, topic: int) -> str:
        name = self.names[topic]
        status, r = self.call("POST", f"/v1/mirrors/{self.mirror}/{action}", {"topics": [name]})
        assert status == 200 and [x["error_code"] for x in r.get("results", [])] == [0], f"{action} {name}: HTTP {status} {r}"
        # The answer said NONE for the topic; the mirror must now say so too (a request-level
        # error the REST answer does not carry would otherwise pass unnoticed).
        if action == "start":
            def listed():
                status, listing = self.call("GET", "/v1/mirrors")
                return status == 200 and any(m["name"] == self.mirror and name in m["topics"] for m in listing.get("mirrors", []))
            wait_until(f"{name} listed by mirror {self.mirror} after start answered HTTP 200 with error_code 0", listed, 15, 0.1,
                       lambda: str(self.call("GET", "/v1/mirrors")))
        else:
            want = "paused" if action == "pause" else "mirroring"

            def desired():
                status, d = self.call("GET", f"/v1/mirrors/{self.mirror}")
                return [t.get("desired") for t in d.get("topics", []) if t["topic"] == name] == [want]
            wait_until(f"{name} described with desired state {want} after {action} answered OK", desired, 10, 0.1, self.describe)
        return "ok"

    def declared_config(self, state_topic: str, shift_prefix_from: int) -> str:
        """The config file of a proxy whose only mirror is this one, declared with what ``create``
        sends through REST plus ``shift_prefix_from`` (which REST cannot carry)."""
        q = json.dumps  # a JSON string is a TOML basic string
        servers = ", ".join(q(s) for s in self.source_bootstrap.split(","))
        lines = ["[engine]", "enabled = true", f"state_topic = {q(state_topic)}", "",
                 "[[mirrors]]", f"name = {q(self.mirror)}", f"source_bootstrap_servers = [{servers}]",
                 # A declared mirror must name a topic or a pattern; its topics are started by REST.
                 f"include = [{q('kmpdiff-matches-no-topic-' + self.mirror)}]",
                 f"topic_config_exclude = [{', '.join(q(x) for x in CONFIG_EXCLUDE)}]",
                 "group_offset_sync_interval_ms = 0", "topic_config_sync_interval_ms = 0",
                 f"shift_prefix_from = {int(shift_prefix_from)}"]
        if self.hedge:
            lines.append("fetch_hedge_min_rtt_ms = 0")
        return "\n".join(lines) + "\n"

    def create(self) -> None:
        self.log(f"mirror {self.mirror}: second Fetch in flight when caught up: {'on' if self.hedge else 'off'}")
        if self.declared:
            # Declared in the proxy's config file: known once the engine has recorded it.
            wait_until(f"declared mirror {self.mirror} known to its proxy", lambda: self.call("GET", f"/v1/mirrors/{self.mirror}")[0] == 200, 30)
            self.log(f"mirror {self.mirror}: declared in the config file of its own proxy (pid {self.proxy.proc.pid}, log {self.proxy.log_path})")
            return
        configs = {"bootstrap.servers": self.source_bootstrap, "mirror.topic.properties.exclude": ",".join(CONFIG_EXCLUDE),
                   "mirror.group.offset.sync.interval.ms": "0", "mirror.topic.config.sync.interval.ms": "0"}
        if self.hedge:
            configs["mirror.fetch.hedge.min.rtt.ms"] = "0"
        status, r = self.call("POST", "/v1/mirrors", {"name": self.mirror, "configs": configs})
        assert status == 201 and r.get("error_code") == 0, f"create mirror {self.mirror}: HTTP {status} {r}"

    def prepared(self, topic: int, partitions: int) -> bool:
        """Whether the mirror has prepared ``topic`` (shifts decided, destination topic created
        and recorded): describe lists its partitions 0..partitions-1 (partition tasks start only
        after the topic record is written)."""
        status, d = self.call("GET", f"/v1/mirrors/{self.mirror}")
        if status != 200:
            return False
        listed = {p["partition"] for t in d.get("topics", []) if t["topic"] == self.names[topic] for p in t.get("partitions", [])}
        return set(range(partitions)) <= listed

    def wait_prepared(self, topic: int, partitions: int, timeout: float) -> bool:
        deadline = time.time() + timeout
        while not self.prepared(topic, partitions):
            if time.time() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def start_again(self, topics: list[int]) -> str:
        """StartMirrorTopics again for ``topics`` after a restart of a declared mirror's proxy: the
        restart takes the definition from the config file, so a topic started through REST but not
        recorded yet (not prepared) is no longer the mirror's. Returns what each answer said
        (NONE: forgotten, or not taken up again yet, and started now; already mirrored: kept)."""
        out = []
        for t in topics:
            name = self.names[t]
            status, r = self.call("POST", f"/v1/mirrors/{self.mirror}/start", {"topics": [name]})
            results = r.get("results", []) if status == 200 else []
            assert status == 200 and len(results) == 1 and (results[0]["error_code"] == 0 or "already mirrored" in str(results[0].get("message"))), \
                f"start {name} again after the restart: HTTP {status} {r}"
            out.append(f"{name}: " + ("answered NONE (forgotten by the restart, or not taken up again yet): started" if results[0]["error_code"] == 0 else "kept"))
        return "; ".join(out)

    def start(self, op: dict) -> str:
        self.started.add(op["topic"])
        return self._topic_op("start", op["topic"])

    def pause(self, op: dict) -> str:
        self.paused.add(op["topic"])
        return self._topic_op("pause", op["topic"])

    def resume(self, op: dict) -> str:
        self.paused.discard(op["topic"])
        return self._topic_op("resume", op["topic"])

    def nudge(self) -> None:
        """Re-runs the mirror's topic discovery now (StartMirrorTopics with no topics): new source
        partitions are picked up at once instead of after the 10 s refresh interval."""
        status, r = self.call("POST", f"/v1/mirrors/{self.mirror}/start", {"topics": []})
        assert status == 200, f"start (no topics) on {self.mirror}: HTTP {status} {r}"

    def describe(self) -> str:
        status, r = self.call("GET", f"/v1/mirrors/{self.mirror}")
        if status != 200:
            return f"HTTP {status} {r}"
        lines = []
        for t in r.get("topics", []):
            for p in sorted(t.get("partitions", []), key=lambda p: p["partition"]):
                lines.append(f"  {t['topic']}/{p['partition']}: desired {t.get('desired')} " +
                             json.dumps({k: v for k, v in p.items() if k not in ("partition",)}, sort_keys=True))
        return "\n".join(lines) or json.dumps(r)

    def stop_and_delete(self) -> None:
        status, r = self.call("POST", f"/v1/mirrors/{self.mirror}/stop", {"topics": self.names})
        assert status == 200, f"stop {self.mirror}: HTTP {status} {r}"
        status, r = self.call("DELETE", f"/v1/mirrors/{self.mirror}")
        assert status == 200, f"delete {self.mirror}: HTTP {status} {r}"

    # -- faults -----------------------------------------------------------------------------

    def kill_proxy(self, op: dict) -> str:
        self.proxy.stop(signal.SIGKILL)
        self.proxy.start()
        # /readyz can answer before the engine has loaded the stored mirrors (issue #10, race (b)):
        # wait until the mirror is known again so the next operation is not refused for that.
        wait_until(f"mirror {self.mirror} known after the restart", lambda: self.call("GET", f"/v1/mirrors/{self.mirror}")[0] == 200, 30)
        return f"proxy restarted (pid {self.proxy.proc.pid})"

    def kill_dest_leader(self, op: dict) -> str:
        name, p = self.names[op["topic"]], op["partition"]
        admin = Admin(self.destination.bootstrap)
        wait_until(f"destination partition {name}/{p} created by the mirror", lambda: partition_counts(self.destination.bootstrap, [name]).get(name, 0) > p, 30)
        leader = wait_until(f"a leader for destination {name}/{p}", lambda: max(admin.leader(name, p), 0), 30)
        self.destination.kill_broker(leader, signal.SIGKILL)
        self.down = leader
        return f"destination broker {leader} (leader of {name}/{p}) killed"

    def restart_dest_broker(self, op: dict | None = None) -> str:
        assert self.down is not None, "no destination broker is down"
        node, self.down = self.down, None
        self.destination.start_broker(node, wait=False)  # readiness is awaited before comparing
        self.restarted.append(node)
        return f"destination broker {node} starting"

    def ensure_brokers(self) -> None:
        """Every destination broker back and registered (after a history or a failure)."""
        if self.down is not None:
            self.restart_dest_broker()
        if self.restarted:
            self.destination.wait_ready()
            self.restarted.clear()

    def ensure_proxy(self) -> None:
        if not self.proxy.alive():
            self.proxy.start()

    # -- convergence -------------------------------------------------------------------------

    def lag(self, topics: list[int]) -> dict[TP, tuple]:
        """Partitions of ``topics`` where the destination (through the proxy) differs from the
        source: (source log start, high watermark, last stable offset, and the same of the
        destination). Open transactions are copied too, so both ends must match."""
        names = [self.names[t] for t in topics]
        src_counts = partition_counts(self.source_bootstrap, names)
        dst_counts = partition_counts(self.proxy.bootstrap, names)
        tps = [(n, p) for n in names for p in range(src_counts[n])]
        src = watermarks(self.source_bootstrap, tps)
        src_stable = watermarks(self.source_bootstrap, tps, "read_committed")
        present = [tp for tp in tps if tp[1] < dst_counts.get(tp[0], 0)]
        dst = watermarks(self.proxy.bootstrap, present)
        dst_stable = watermarks(self.proxy.bootstrap, present, "read_committed")
        out = {}
        for tp in tps:
            s = (src[tp][0], src[tp][1], src_stable[tp][1])
            d = (dst[tp][0], dst[tp][1], dst_stable[tp][1]) if tp in dst else ("missing",) * 3
            if s != d:
                out[tp] = s + d
        return out

    def catch_up(self, topics: list[int] | None = None, timeout: float = CATCH_UP_S) -> str:
        topics = sorted(self.started - self.paused) if topics is None else topics
        if not topics:
            return "nothing running"
        behind: dict = {}

        def done():
            nonlocal behind
            try:
                behind = self.lag(topics)
            except KafkaException as e:  # e.g. a killed leader not yet replaced: keep polling
                behind = {("(error)", -1): (str(e),)}
            return not behind

        wait_until("the destination to have what the source has (log starts, ends and last stable offsets equal, through the proxy)", done, timeout, 0.3,
                   lambda: "(source log start, end, last stable offset, destination log start, end, last stable offset):\n" +
                   "\n".join(f"  {tp}: {v}" for tp, v in sorted(behind.items())) + f"\nmirror {self.mirror}:\n{self.describe()}")
        return f"caught up: {', '.join(self.names[t] for t in topics)}"
