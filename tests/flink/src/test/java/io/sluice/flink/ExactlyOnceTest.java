package io.sluice.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.serialization.SimpleStringSchema;
import org.apache.flink.api.connector.sink2.Committer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaCommittable;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.sink.internal.FlinkKafkaInternalProducer;
import org.apache.flink.connector.kafka.sink.internal.KafkaCommitter;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Flink's KafkaSource -> map -> KafkaSink (EXACTLY_ONCE, checkpoints every 300 ms) on a local
 * MiniCluster against a real `sluice`: a task failure injected mid-stream restarts the job from
 * its last checkpoint, and the output read read_committed holds every input exactly once; and
 * the known hole of Kafka's semantics (a job down longer than the transaction timeout) shown.
 */
class ExactlyOnceTest {
    static Process broker;
    static Path dataDir;
    static String bootstrap;

    @BeforeAll
    static void up() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"))) {
            port = s.getLocalPort();
        }
        dataDir = Files.createTempDirectory("sluice-flink-");
        String bin = System.getenv().getOrDefault("TEST_SLUICE_BIN",
                Path.of("..", "..", "target", "debug", "sluice").toAbsolutePath().normalize().toString());
        Path log = Path.of("target", "broker.log").toAbsolutePath();
        Files.createDirectories(log.getParent());
        ProcessBuilder pb = new ProcessBuilder(bin, "--log-dirs", dataDir.resolve("data").toString(),
                "--listeners", "PLAINTEXT://127.0.0.1:" + port, "--group-initial-rebalance-delay-ms", "0",
                // timed-out transactions are aborted within half a second (Kafka: 10 s)
                "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500");
        pb.environment().keySet().removeIf(k -> k.startsWith("SLUICE_"));
        pb.redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        broker = pb.start();
        bootstrap = "127.0.0.1:" + port;
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                break;
            } catch (IOException e) {
                if (System.nanoTime() > deadline || !broker.isAlive()) {
                    throw new IllegalStateException("broker did not start: " + Files.readString(log));
                }
                Thread.sleep(50);
            }
        }
    }

    @AfterAll
    static void down() throws Exception {
        if (broker != null) {
            broker.destroyForcibly().waitFor();
        }
    }

    /** Fails the task once, after `FAIL_AFTER` records, so the job restarts from a checkpoint. */
    static final AtomicBoolean FAILED = new AtomicBoolean();
    static final AtomicInteger SEEN = new AtomicInteger();
    static final int RECORDS = 4000;
    static final int FAIL_AFTER = 2500;

    static final class FailOnce implements MapFunction<String, String> {
        private static final long serialVersionUID = 1L;

        @Override
        public String map(String v) throws Exception {
            if (SEEN.incrementAndGet() >= FAIL_AFTER && FAILED.compareAndSet(false, true)) {
                throw new RuntimeException("injected task failure");
            }
            Thread.sleep(1); // a few checkpoints happen before the failure
            return "out-" + v;
        }
    }

    @Test
    void aTaskFailureMidStreamLeavesEveryRecordExactlyOnce() throws Exception {
        String id = UUID.randomUUID().toString().substring(0, 8);
        String in = "flink-in-" + id;
        String out = "flink-out-" + id;
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(in, 2, (short) 1), new NewTopic(out, 2, (short) 1))).all().get();
        }
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("acks", "all");
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp)) {
            for (int i = 0; i < RECORDS; i++) {
                p.send(new ProducerRecord<>(in, i % 2, null, "v" + i));
            }
            p.flush();
        }

        Configuration conf = new Configuration();
        conf.setString("restart-strategy.type", "fixed-delay");
        conf.setString("restart-strategy.fixed-delay.attempts", "3");
        conf.setString("restart-strategy.fixed-delay.delay", "500 ms");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(2);
        env.enableCheckpointing(300);
        KafkaSource<String> source = KafkaSource.<String>builder()
                .setBootstrapServers(bootstrap)
                .setTopics(in)
                .setGroupId("flink-" + id)
                .setStartingOffsets(OffsetsInitializer.earliest())
                .setBounded(OffsetsInitializer.latest())
                .setValueOnlyDeserializer(new SimpleStringSchema())
                .setProperty("isolation.level", "read_committed")
                .build();
        KafkaSink<String> sink = KafkaSink.<String>builder()
                .setBootstrapServers(bootstrap)
                .setRecordSerializer(KafkaRecordSerializationSchema.builder()
                        .setTopic(out)
                        .setValueSerializationSchema(new SimpleStringSchema())
                        .build())
                // -Dflink.guarantee=AT_LEAST_ONCE shows that this test catches duplicates
                .setDeliveryGuarantee(DeliveryGuarantee.valueOf(System.getProperty("flink.guarantee", "EXACTLY_ONCE")))
                .setTransactionalIdPrefix("flink-" + id)
                .setProperty("transaction.timeout.ms", "60000")
                .build();
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "sluice-in")
                .map(new FailOnce())
                .sinkTo(sink);
        env.execute("sluice exactly-once " + id);
        assertTrue(FAILED.get(), "the injected failure happened");

        Map<String, Integer> committed = read(out, "read_committed");
        assertEquals(RECORDS, committed.size(), "every input in the output");
        List<String> twice = new ArrayList<>();
        committed.forEach((k, n) -> {
            if (n != 1) {
                twice.add(k + "x" + n);
            }
        });
        assertTrue(twice.isEmpty(), "read_committed output exactly once: " + twice);
        for (int i = 0; i < RECORDS; i++) {
            assertTrue(committed.containsKey("out-v" + i), "out-v" + i);
        }
        int uncommitted = read(out, "read_uncommitted").values().stream().mapToInt(Integer::intValue).sum();
        assertTrue(uncommitted >= RECORDS, "read_uncommitted sees at least as much: " + uncommitted);
    }

    /**
     * What Kafka's semantics give when the job is down longer than the transaction timeout.
     * Flink's sink pre-commits a transaction at each checkpoint (flushes it, and stores its
     * producer id and epoch in the checkpoint) and commits it only once the checkpoint is
     * complete; after a failure, the job's {@link KafkaCommitter} resumes the stored
     * transaction and commits it. Here a pre-committed transaction's producer goes away (the
     * job fails) and the committer runs as a restored job runs it: within the timeout the
     * data is committed, every record once; after the timeout the coordinator has aborted the
     * transaction, the commit is refused, the committer drops it (Flink logs a warning), and
     * the checkpoint's data is lost — the loss Flink's documentation warns of, and what
     * KIP-939's prepared transactions (issue 21) remove. Kafka behaves the same.
     */
    @Test
    void aPrecommittedTransactionIsCommittedOnRecoveryWithinItsTimeoutAndLostAfterIt() throws Exception {
        String id = UUID.randomUUID().toString().substring(0, 8);
        String out = "flink-timeout-" + id;
        Properties ap = new Properties();
        ap.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(ap)) {
            admin.createTopics(List.of(new NewTopic(out, 1, (short) 1))).all().get();
            // within the timeout: the restored committer commits the checkpoint's transaction
            KafkaCommittable quick = precommitted(out, "quick-" + id, "in-time", 2000);
            assertEquals(List.of(), commitAsRestored(quick, "quick-" + id), "committed on recovery");
            assertEquals(100, count(read(out, "read_committed"), "in-time"), "every record once");

            // down longer than transaction.timeout.ms (2 s): the coordinator aborts it first
            KafkaCommittable late = precommitted(out, "late-" + id, "too-late", 2000);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (!admin.describeTransactions(List.of(late.getTransactionalId())).all().get()
                    .get(late.getTransactionalId()).state().toString().equals("CompleteAbort")) {
                assertTrue(System.nanoTime() < deadline, "the timed-out transaction was aborted");
                Thread.sleep(200);
            }
            List<Throwable> failed = commitAsRestored(late, "late-" + id);
            assertEquals(1, failed.size(), "the commit of the aborted transaction is refused");
            System.err.println("commit after the timeout: " + failed.get(0));
            assertEquals(0, count(read(out, "read_committed"), "too-late"),
                    "the checkpoint's data is lost (Kafka semantics until KIP-939)");
            assertEquals(100, count(read(out, "read_uncommitted"), "too-late"),
                    "it was written, and aborted");
        }
    }

    /** A transaction as Flink's sink leaves it at a checkpoint: 100 records, flushed, open. */
    static KafkaCommittable precommitted(String topic, String prefix, String tag, int timeoutMs) {
        Properties pp = sinkProducerConfig();
        pp.put("transaction.timeout.ms", Integer.toString(timeoutMs));
        FlinkKafkaInternalProducer<byte[], byte[]> p = new FlinkKafkaInternalProducer<>(pp, prefix + "-0-1");
        p.initTransactions();
        p.beginTransaction();
        for (int i = 0; i < 100; i++) {
            p.send(new ProducerRecord<>(topic, null, (tag + "-" + i).getBytes()));
        }
        p.flush(); // as the sink's writer does at a checkpoint
        p.precommitTransaction();
        KafkaCommittable c = new KafkaCommittable(p.getProducerId(), p.getEpoch(), p.getTransactionalId(), null);
        p.close(Duration.ZERO); // the job fails: nothing more is sent for this transaction
        return c;
    }

    static Properties sinkProducerConfig() {
        Properties pp = new Properties();
        pp.put("bootstrap.servers", bootstrap);
        pp.put("key.serializer", ByteArraySerializer.class.getName());
        pp.put("value.serializer", ByteArraySerializer.class.getName());
        return pp;
    }

    /** Runs Flink's committer on `c` as a restored job does; returns the failures it signals. */
    static List<Throwable> commitAsRestored(KafkaCommittable c, String prefix) throws Exception {
        List<Throwable> failed = new ArrayList<>();
        Committer.CommitRequest<KafkaCommittable> request = new Committer.CommitRequest<>() {
            public KafkaCommittable getCommittable() {
                return c;
            }

            public int getNumberOfRetries() {
                return 0;
            }

            public void signalFailedWithKnownReason(Throwable t) {
                failed.add(t);
            }

            public void signalFailedWithUnknownReason(Throwable t) {
                failed.add(t);
            }

            public void retryLater() {
                failed.add(new IllegalStateException("retry asked"));
            }

            public void updateAndRetryLater(KafkaCommittable k) {
                failed.add(new IllegalStateException("retry asked"));
            }

            public void signalAlreadyCommitted() {}
        };
        try (KafkaCommitter committer = new KafkaCommitter(sinkProducerConfig(), prefix, 0, 2, false,
                FlinkKafkaInternalProducer::new)) {
            committer.commit(List.of(request));
        }
        return failed;
    }

    static int count(Map<String, Integer> values, String tag) {
        return values.entrySet().stream().filter(e -> e.getKey().startsWith(tag + "-"))
                .mapToInt(Map.Entry::getValue).sum();
    }

    static Map<String, Integer> read(String topic, String isolation) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("isolation.level", isolation);
        cp.put("enable.auto.commit", "false");
        Map<String, Integer> counts = new HashMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = new ArrayList<>();
            c.partitionsFor(topic).forEach(pi -> tps.add(new TopicPartition(topic, pi.partition())));
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                    counts.merge(r.value(), 1, Integer::sum);
                }
                boolean done = true;
                for (TopicPartition tp : tps) {
                    done &= c.position(tp) >= end.get(tp);
                }
                if (done) {
                    break;
                }
            }
        }
        return counts;
    }
}
