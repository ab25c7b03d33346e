"""Kafka's own command-line tools through the proxy: kafka-topics, console producer/consumer,
producer/consumer perf tests, kafka-consumer-groups and kafka-configs."""

import subprocess

import pytest

from conftest import unique


def tool(classpath: str, main: str, *args: str, stdin: str | None = None, timeout: int = 180) -> str:
    out = subprocess.run(["java", "-cp", classpath, main, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{main} {' '.join(args)} failed (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def test_kafka_cli_tools_work_through_proxy(proxy, kafka_classpath):
    bs, cp = proxy.bootstrap, kafka_classpath
    topic, group = unique("tools"), unique("tools-group")
    tool(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "3", "--replication-factor", "3")
    described = tool(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--describe", "--topic", topic)
    assert described.count("Leader:") == 3, f"three partitions with leaders:\n{described}"

    lines = "".join(f"line-{i}\n" for i in range(500))
    tool(cp, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bs, "--topic", topic,
         "--producer-property", "compression.type=gzip", stdin=lines)
    consumed = tool(cp, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bs, "--topic", topic,
                    "--from-beginning", "--max-messages", "500", "--group", group)
    assert sorted(consumed.split()) == sorted(lines.split()), "console consumer reads back what the console producer wrote"

    groups = tool(cp, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bs,
                  "--describe", "--group", group)
    rows = [line.split() for line in groups.splitlines() if topic in line]
    committed = sum(int(r[3]) for r in rows if r[3].isdigit())
    assert committed == 500, f"the group's committed offsets cover the 500 records:\n{groups}"

    tool(cp, "kafka.admin.ConfigCommand", "--bootstrap-server", bs, "--alter", "--entity-type", "topics",
         "--entity-name", topic, "--add-config", "retention.ms=3600000")
    configs = tool(cp, "kafka.admin.ConfigCommand", "--bootstrap-server", bs, "--describe",
                   "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms=3600000" in configs, configs


@pytest.mark.long  # the perf tools through the proxy; test_kafka_cli_tools_work_through_proxy stays in the quick tier
def test_kafka_perf_tools_run_through_proxy(proxy, kafka_classpath):
    bs, cp = proxy.bootstrap, kafka_classpath
    topic = unique("perf")
    tool(cp, "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bs, "--create", "--topic", topic,
         "--partitions", "3", "--replication-factor", "3")
    produced = tool(cp, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "20000",
                    "--record-size", "1024", "--throughput", "-1", "--producer-props", f"bootstrap.servers={bs}", "acks=all",
                    "compression.type=lz4")
    assert "20000 records sent" in produced, produced
    consumed = tool(cp, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bs, "--topic", topic,
                    "--messages", "20000", "--timeout", "60000")
    data = consumed.strip().splitlines()[-1].split(",")
    assert int(data[4].strip()) >= 20000, f"consumer perf read all records: {consumed}"
