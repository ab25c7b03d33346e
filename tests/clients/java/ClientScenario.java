// The Java client scenario run through the proxy (and directly, for comparison) by
// tests/integration/test_java_client.py. Runs with Kafka's own jars on the classpath:
//   java -cp "<kafka libs>/*" ClientScenario.java <bootstrap> <prefix> <compression> <classic|consumer> [txn]
// Prints "OK" and a summary on success; any failed check throws and exits non-zero.
// Environment (both optional; tests/tls): KMP_CLIENT_PROPS names a .properties file merged into
// every client's properties (security.protocol, ssl.*, sasl.*); KMP_REPLICATION_FACTOR (default
// 3) is the replication factor of the topics it creates (1 for single-broker clusters).
import java.io.FileInputStream;
import java.time.Duration;
import java.util.*;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.*;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.*;

public class ClientScenario {
    static final int RECORDS = 300;
    static final int PARTITIONS = 3;
    static final short REPLICATION = Short.parseShort(System.getenv().getOrDefault("KMP_REPLICATION_FACTOR", "3"));

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], prefix = args[1], compression = args[2], groupProtocol = args[3];
        boolean txn = args.length > 4 && args[4].equals("txn");
        String topic = prefix + "-topic", group = prefix + "-group";
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        String extraProps = System.getenv("KMP_CLIENT_PROPS");
        if (extraProps != null && !extraProps.isEmpty()) {
            Properties extra = new Properties();
            try (FileInputStream in = new FileInputStream(extraProps)) {
                extra.load(in);
            }
            common.putAll(extra);
        }
        long t0 = System.currentTimeMillis();

        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, REPLICATION))).all().get();
            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config cfg = null;
            for (long until = System.currentTimeMillis() + 15_000; cfg == null; ) {
                try {
                    cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
                } catch (java.util.concurrent.ExecutionException e) {
                    // The new topic may not have reached every broker's metadata yet (same direct).
                    if (!(e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException)
                        || System.currentTimeMillis() > until) throw e;
                    Thread.sleep(200);
                }
            }
            check(cfg.get("cleanup.policy") != null && cfg.get("cleanup.policy").value().equals("delete"),
                  "describeConfigs returns cleanup.policy=delete, got " + cfg.get("cleanup.policy"));

            Properties pp = (Properties) common.clone();
            pp.put("compression.type", compression);
            pp.put("acks", "all");
            try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                for (int i = 0; i < RECORDS; i++) acks.add(p.send(new ProducerRecord<>(topic, "k" + i, prefix + "-" + i)));
                p.flush();
                for (Future<RecordMetadata> f : acks) f.get();
            }

            Set<String> seen = new HashSet<>();
            boolean rebalanced = false;
            try (Consumer<String, String> c1 = consumer(common, group, groupProtocol);
                 Consumer<String, String> c2 = consumer(common, group, groupProtocol)) {
                c1.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + 60_000;
                while (seen.size() < 100 && System.currentTimeMillis() < deadline)
                    for (ConsumerRecord<String, String> r : c1.poll(Duration.ofMillis(200))) seen.add(r.value());
                check(seen.size() >= 100, "first member consumed " + seen.size() + " records within 60s");
                c1.commitSync();
                c2.subscribe(List.of(topic));
                deadline = System.currentTimeMillis() + 90_000;
                while ((seen.size() < RECORDS || !rebalanced) && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : c1.poll(Duration.ofMillis(100))) seen.add(r.value());
                    for (ConsumerRecord<String, String> r : c2.poll(Duration.ofMillis(100))) seen.add(r.value());
                    rebalanced = !c2.assignment().isEmpty() && c1.assignment().size() < PARTITIONS;
                }
                check(rebalanced, "second member got partitions through a rebalance (c1=" + c1.assignment() + ", c2=" + c2.assignment() + ")");
                check(seen.size() == RECORDS, "group consumed all " + RECORDS + " records, got " + seen.size());
                // Settle: a member that lost a partition in the rebalance may not have committed
                // what it read; poll and commit until the committed offsets reach the end.
                deadline = System.currentTimeMillis() + 60_000;
                while (System.currentTimeMillis() < deadline && !committedAtEnd(admin, group, topic)) {
                    for (Consumer<String, String> c : List.of(c1, c2)) {
                        c.poll(Duration.ofMillis(100));
                        try { c.commitSync(); } catch (KafkaException e) { /* rebalance in progress: next round */ }
                    }
                }
            }

            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            var ends = endOffsets(admin, topic);
            long sum = 0;
            for (var e : ends.entrySet()) {
                OffsetAndMetadata c = committed.get(e.getKey());
                check(c != null && c.offset() == e.getValue().offset(),
                      "committed offset of " + e.getKey() + " is " + c + ", end offset " + e.getValue().offset());
                sum += c.offset();
            }
            check(sum == RECORDS, "committed offsets add up to " + RECORDS + ", got " + sum);

            String txnSummary = "";
            if (txn) txnSummary = transactions(admin, common, prefix);
            System.out.println("OK records=" + RECORDS + " rebalanced=" + rebalanced + txnSummary
                               + " ms=" + (System.currentTimeMillis() - t0));
        }
    }

    static Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> endOffsets(Admin admin, String topic) throws Exception {
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (int i = 0; i < PARTITIONS; i++) latest.put(new TopicPartition(topic, i), OffsetSpec.latest());
        return admin.listOffsets(latest).all().get();
    }

    static boolean committedAtEnd(Admin admin, String group, String topic) throws Exception {
        var committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
        for (var e : endOffsets(admin, topic).entrySet()) {
            OffsetAndMetadata c = committed.get(e.getKey());
            if (c == null || c.offset() != e.getValue().offset()) return false;
        }
        return true;
    }

    static Consumer<String, String> consumer(Properties common, String group, String protocol) {
        Properties cp = (Properties) common.clone();
        cp.put("group.id", group);
        cp.put("group.protocol", protocol);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        return new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer());
    }

    static String transactions(Admin admin, Properties common, String prefix) throws Exception {
        String topic = prefix + "-txn";
        admin.createTopics(List.of(new NewTopic(topic, 2, REPLICATION))).all().get();
        Properties pp = (Properties) common.clone();
        pp.put("transactional.id", prefix + "-tx");
        try (Producer<String, String> p = new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, i % 2, null, "committed-" + i));
            p.commitTransaction();
            p.beginTransaction();
            for (int i = 0; i < 10; i++) p.send(new ProducerRecord<>(topic, i % 2, null, "aborted-" + i));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            for (int i = 10; i < 15; i++) p.send(new ProducerRecord<>(topic, i % 2, null, "committed-" + i));
            p.commitTransaction();
        }
        List<String> committed = readAll(common, topic, "read_committed");
        List<String> all = readAll(common, topic, "read_uncommitted");
        check(committed.size() == 15 && committed.stream().allMatch(v -> v.startsWith("committed-")),
              "read_committed sees exactly the 15 committed records, got " + committed);
        check(all.size() == 25, "read_uncommitted sees committed and aborted records (25), got " + all.size());
        return " txn_committed=" + committed.size() + " txn_uncommitted=" + all.size();
    }

    static List<String> readAll(Properties common, String topic, String isolation) {
        Properties cp = (Properties) common.clone();
        cp.put("isolation.level", isolation);
        List<String> out = new ArrayList<>();
        try (Consumer<String, String> c = new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            c.assign(tps);
            c.seekToBeginning(tps);
            // Read up to the log end, not the current LSO: commitTransaction() returns before the
            // markers are written, so a read_committed LSO can still be short of the last commit.
            Map<TopicPartition, Long> end;
            Properties ru = (Properties) common.clone();
            ru.put("isolation.level", "read_uncommitted");
            try (Consumer<String, String> probe = new KafkaConsumer<>(ru, new StringDeserializer(), new StringDeserializer())) {
                end = probe.endOffsets(tps);
            }
            long deadline = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < deadline && tps.stream().anyMatch(tp -> c.position(tp) < end.get(tp)))
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) out.add(r.value());
        }
        return out;
    }
}
