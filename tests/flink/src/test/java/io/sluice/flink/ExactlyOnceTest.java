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
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
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
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Flink's KafkaSource -> map -> KafkaSink (EXACTLY_ONCE, checkpoints every 300 ms) on a local
 * MiniCluster against a real `sluice`: a task failure injected mid-stream restarts the job from
 * its last checkpoint, and the output read read_committed holds every input exactly once.
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
                "--listeners", "PLAINTEXT://127.0.0.1:" + port, "--group-initial-rebalance-delay-ms", "0");
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

    static Map<String, Integer> read(String topic, String isolation) {
        Properties cp = new Properties();
        cp.put("bootstrap.servers", bootstrap);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("isolation.level", isolation);
        cp.put("enable.auto.commit", "false");
        Map<String, Integer> counts = new HashMap<>();
        try (KafkaConsumer<String, String> c = new KafkaConsumer<>(cp)) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
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
