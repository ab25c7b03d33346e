// What a Java kafka-clients application sees of a shifted mirror partition (docs/mirroring.md
// "Shifted prefixes"); run by tests/integration/test_mirror_offset_shift_clients.py with Kafka's
// own jars on the classpath, against the source and through the proxy, the outputs compared:
//
//   ShiftCheck consume <bootstrap> <topic> <partitions> <read_committed|read_uncommitted> <ts,ts,...>
//     assign() every partition; prints "B <p> <beginningOffsets>", "E <p> <endOffsets>",
//     "T <p> <ts> <offsetsForTimes offset|->" per timestamp, then seekToBeginning and polls until
//     every position reached its end offset (or 60 s): "R <p> <offset> <timestamp> <key hex|-|_>
//     <value hex|-|_> <header count>" per record, then "P <p> <position()>".
//   ShiftCheck commit <bootstrap> <group> <classic|consumer> <topic> <p:offset,...>
//     assign() (no membership), commitSync of exactly those offsets, then committed() back:
//     "C <p> <offset|-1>" per partition.
//   ShiftCheck seek <bootstrap> <topic> <partition> <offset> <earliest|latest|none>
//     assign() the partition, seek(<offset>) and poll with auto.offset.reset as given: "F <offset
//     of the first record>", or "P <position()>" when the position reached the end offset with no
//     record (or after 30 s), or "X <exception
//     class>" (an out-of-range position with reset none).
//   ShiftCheck produce <bootstrap> <topic> <partition> <n> <tag>
//     an idempotent producer (acks=all) sends <n> records one at a time: "O <RecordMetadata.offset()>".
//   ShiftCheck txn <bootstrap> <transactional id> <group> <topic> <partition> <from> <n> <tag>
//     consume-transform-produce: a read_committed consumer (group <group>, assign()) reads <n>
//     records from offset <from>; a transactional producer writes one record per record read to
//     the same partition, sendOffsetsToTransaction(<last read + 1>, consumer.groupMetadata()) and
//     commits. Prints "I <offset>" per record read, "O <offset>" per record written, "X <offset
//     committed in the transaction>", then "C <committed() read back>".
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ShiftCheck {
    static String hex(byte[] b) {
        if (b == null) return "-";
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.length() == 0 ? "_" : s.toString();
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group, String protocol, String isolation) {
        return consumer(bootstrap, group, protocol, isolation, "none");
    }

    static KafkaConsumer<byte[], byte[]> consumer(String bootstrap, String group, String protocol, String isolation, String reset) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", isolation);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", reset);  // none (the default here): an out-of-range position fails, never silently resets
        if (group != null) {
            c.put("group.id", group);
            c.put("group.protocol", protocol);
        }
        return new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], bootstrap = args[1];
        switch (mode) {
            case "consume" -> consume(bootstrap, args[2], Integer.parseInt(args[3]), args[4], args[5]);
            case "commit" -> commit(bootstrap, args[2], args[3], args[4], args[5]);
            case "seek" -> seek(bootstrap, args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]), args[5]);
            case "produce" -> produce(bootstrap, args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]), args[5]);
            case "txn" -> txn(bootstrap, args[2], args[3], args[4], Integer.parseInt(args[5]), Long.parseLong(args[6]),
                              Integer.parseInt(args[7]), args[8]);
            default -> throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static void consume(String bootstrap, String topic, int partitions, String isolation, String stamps) {
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, null, null, isolation)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < partitions; i++) tps.add(new TopicPartition(topic, i));
            consumer.assign(tps);
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps), end = consumer.endOffsets(tps);
            for (TopicPartition tp : tps) {
                System.out.println("B " + tp.partition() + " " + begin.get(tp));
                System.out.println("E " + tp.partition() + " " + end.get(tp));
            }
            if (!stamps.equals("-")) {
                for (String s : stamps.split(",")) {
                    long ts = Long.parseLong(s);
                    Map<TopicPartition, Long> query = new HashMap<>();
                    for (TopicPartition tp : tps) query.put(tp, ts);
                    Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query);
                    for (TopicPartition tp : tps) {
                        OffsetAndTimestamp o = found.get(tp);
                        System.out.println("T " + tp.partition() + " " + ts + " " + (o == null ? "-" : Long.toString(o.offset())));
                    }
                }
            }
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 60_000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done = done && consumer.position(tp) >= end.get(tp);
                if (done) break;
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    System.out.println("R " + r.partition() + " " + r.offset() + " " + r.timestamp() + " " + hex(r.key()) + " "
                                       + hex(r.value()) + " " + r.headers().toArray().length);
                }
            }
            for (TopicPartition tp : tps) System.out.println("P " + tp.partition() + " " + consumer.position(tp));
        }
    }

    static void seek(String bootstrap, String topic, int partition, long offset, String reset) {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, null, null, "read_uncommitted", reset)) {
            consumer.assign(List.of(tp));
            long end = consumer.endOffsets(List.of(tp)).get(tp);
            consumer.seek(tp, offset);
            long deadline = System.currentTimeMillis() + 30_000;
            try {
                boolean found = false;
                while (!found && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                    if (!records.isEmpty()) {
                        System.out.println("F " + records.iterator().next().offset());
                        found = true;
                    } else if (consumer.position(tp) >= end) {
                        break;  // nothing left to read there
                    }
                }
                // Where a poll leaves the position depends on how the broker cut its answer (one
                // segment per fetch): shown only when no record came (a reset to the end).
                if (!found) System.out.println("P " + consumer.position(tp));
            } catch (org.apache.kafka.common.KafkaException e) {
                System.out.println("X " + e.getClass().getSimpleName());
            }
        }
    }

    static void commit(String bootstrap, String group, String protocol, String topic, String specs) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (String spec : specs.split(",")) {
            String[] f = spec.split(":");
            offsets.put(new TopicPartition(topic, Integer.parseInt(f[0])), new OffsetAndMetadata(Long.parseLong(f[1]), "shift-check"));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, protocol, "read_committed")) {
            consumer.assign(offsets.keySet());
            consumer.commitSync(offsets);
            Map<TopicPartition, OffsetAndMetadata> back = consumer.committed(offsets.keySet());
            List<TopicPartition> sorted = new ArrayList<>(offsets.keySet());
            sorted.sort(Comparator.comparingInt(TopicPartition::partition));
            for (TopicPartition tp : sorted) {
                OffsetAndMetadata o = back.get(tp);
                System.out.println("C " + tp.partition() + " " + (o == null ? -1 : o.offset()));
            }
        }
    }

    static void produce(String bootstrap, String topic, int partition, int n, String tag) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("enable.idempotence", "true");
        p.put("acks", "all");
        p.put("delivery.timeout.ms", "60000");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < n; i++) {
                RecordMetadata md = producer.send(new ProducerRecord<>(topic, partition, (tag + "-" + i).getBytes(), ("v-" + tag + "-" + i).getBytes())).get();
                System.out.println("O " + md.offset());
            }
        }
    }

    static void txn(String bootstrap, String txid, String group, String topic, int partition, long from, int n, String tag) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txid);
        p.put("delivery.timeout.ms", "60000");
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(bootstrap, group, "classic", "read_committed");
             KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer())) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, from);
            List<ConsumerRecord<byte[], byte[]>> read = new ArrayList<>();
            long deadline = System.currentTimeMillis() + 60_000;
            while (read.size() < n && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (read.size() < n) read.add(r);
                }
            }
            if (read.size() < n) throw new IllegalStateException("read " + read.size() + " of " + n + " records from " + from);
            producer.initTransactions();
            producer.beginTransaction();
            List<java.util.concurrent.Future<RecordMetadata>> sent = new ArrayList<>();
            for (ConsumerRecord<byte[], byte[]> r : read) {
                System.out.println("I " + r.offset());
                sent.add(producer.send(new ProducerRecord<>(topic, partition, (tag + "-" + r.offset()).getBytes(), ("from-" + r.offset()).getBytes())));
            }
            long next = read.get(read.size() - 1).offset() + 1;
            producer.sendOffsetsToTransaction(Map.of(tp, new OffsetAndMetadata(next, "txn")), consumer.groupMetadata());
            producer.commitTransaction();
            for (java.util.concurrent.Future<RecordMetadata> f : sent) System.out.println("O " + f.get().offset());
            System.out.println("X " + next);
            OffsetAndMetadata back = consumer.committed(Set.of(tp)).get(tp);
            System.out.println("C " + (back == null ? -1 : back.offset()));
        }
    }
}
