package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Kafka Streams with exactly_once_v2 against Sluice: a word count whose JVMs are killed with
 * SIGKILL mid-stream; the final counts, read read_committed, must be exact (a duplicate or a
 * lost update would show as a wrong count).
 */
class StreamsTest {
    static final String[] WORDS = {"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
        "india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"};
    static Broker broker;
    static Admin admin;
    /** Where the test's clients and Streams JVMs connect: `broker`, or the three-broker cluster. */
    static String bootstrap;

    @BeforeAll
    static void up() throws Exception {
        broker = Broker.shared();
        bootstrap = broker.bootstrap();
        admin = Clients.admin(bootstrap);
    }

    @AfterAll
    static void down() throws Exception {
        admin.close();
        broker.close();
    }

    /** A Streams JVM of its own, so that it can be killed with SIGKILL. */
    static final class App {
        final Process proc;

        App(String appId, String in, String out, Path stateDir, Path log) throws Exception {
            String java = ProcessHandle.current().info().command().orElse("java");
            String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
            ProcessBuilder pb = new ProcessBuilder(java, "-Xmx256m", "-cp", cp,
                    "-Dwc.guarantee=" + System.getProperty("wc.guarantee", "exactly_once_v2"),
                    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", WordCountApp.class.getName(),
                    bootstrap, appId, in, out, stateDir.toString());
            pb.redirectErrorStream(true);
            pb.redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
            proc = pb.start();
        }

        void kill9() throws InterruptedException {
            proc.destroyForcibly();
            proc.waitFor();
        }
    }

    /** Writes `lines` lines to `in` over about `seconds` seconds; returns the expected counts. */
    static Thread feed(String in, int lines, int seconds, Map<String, Long> expected,
            AtomicReference<Throwable> failure) {
        for (int i = 0; i < lines; i++) {
            for (String w : line(i).split(" ")) {
                expected.merge(w, 1L, Long::sum);
            }
        }
        Thread t = new Thread(() -> {
            try (KafkaProducer<String, String> p = Clients.producer(bootstrap, Map.of())) {
                for (int i = 0; i < lines; i++) {
                    p.send(new ProducerRecord<>(in, "line-" + i, line(i)));
                    if (i % 50 == 49) {
                        Thread.sleep(seconds * 1000L * 50 / lines);
                    }
                }
                p.flush();
            } catch (Throwable e) {
                failure.set(e);
            }
        });
        t.start();
        return t;
    }

    static String line(int i) {
        return WORDS[i % WORDS.length] + " " + WORDS[(i * 7 + 3) % WORDS.length] + " "
                + WORDS[(i * 13 + 5) % WORDS.length];
    }

    /** The latest committed count of every word, read until it equals `expected` or time runs out. */
    static Map<String, Long> finalCounts(String out, Map<String, Long> expected, Duration timeout) throws Exception {
        Map<String, Long> latest = new TreeMap<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            latest.clear();
            List<ConsumerRecord<String, String>> recs = Clients.readAll(bootstrap, out, "read_committed", 1,
                    Duration.ofSeconds(20), Duration.ofMillis(500));
            for (ConsumerRecord<String, String> r : recs) {
                latest.put(r.key(), Long.parseLong(r.value()));
            }
            if (latest.equals(new TreeMap<>(expected))) {
                return latest;
            }
            Thread.sleep(1000);
        }
        return latest;
    }

    /** Waits until the output's end offsets (read_uncommitted) grew by `records`. */
    static void awaitOutputGrowth(String out, long records, Duration timeout) throws Exception {
        long start = outputEnd(out);
        long deadline = System.nanoTime() + timeout.toNanos();
        while (outputEnd(out) < start + records) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("the Streams application made no progress");
            }
            Thread.sleep(20);
        }
    }

    static long outputEnd(String out) throws Exception {
        Map<TopicPartition, OffsetSpec> q = new HashMap<>();
        for (int p = 0; p < 2; p++) {
            q.put(new TopicPartition(out, p), OffsetSpec.latest());
        }
        return admin.listOffsets(q).all().get().values().stream().mapToLong(o -> o.offset()).sum();
    }

    void run(int instances, int killsOfTheFirst, boolean restartKilled) throws Exception {
        String appId = Clients.unique("wc");
        String in = appId + "-in";
        String out = appId + "-out";
        Clients.createTopic(admin, in, 4);
        Clients.createTopic(admin, out, 2);
        Path dir = Files.createTempDirectory("sluice-streams-");
        Path logDir = Path.of("target", "streams-logs").toAbsolutePath();
        Files.createDirectories(logDir);
        List<App> apps = new ArrayList<>();
        try {
            for (int i = 0; i < instances; i++) {
                apps.add(new App(appId, in, out, dir.resolve("state-" + i), logDir.resolve(appId + "-" + i + ".log")));
            }
            Map<String, Long> expected = new HashMap<>();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            Thread feeder = feed(in, 9000, 30, expected, failure);
            for (int k = 0; k < killsOfTheFirst; k++) {
                // kill while the instance is processing: once the output (uncommitted included)
                // has grown since it started
                awaitOutputGrowth(out, 200, Duration.ofSeconds(60));
                apps.get(0).kill9();
                if (restartKilled) {
                    apps.set(0, new App(appId, in, out, dir.resolve("state-0"),
                            logDir.resolve(appId + "-0.log")));
                }
            }
            feeder.join();
            assertEquals(null, failure.get());
            Map<String, Long> got = finalCounts(out, expected, Duration.ofSeconds(150));
            assertEquals(new TreeMap<>(expected), got, "final counts (read_committed)");
            // Streams made its internal topics: a compacted changelog, and a repartition topic
            // it purges with DeleteRecords once records are consumed
            ConfigResource changelog = new ConfigResource(ConfigResource.Type.TOPIC, appId + "-counts-changelog");
            assertEquals("compact", admin.describeConfigs(List.of(changelog)).all().get().get(changelog)
                    .get("cleanup.policy").value());
            String repartition = appId + "-by-word-repartition";
            int parts = admin.describeTopics(List.of(repartition)).allTopicNames().get().get(repartition)
                    .partitions().size();
            long purged = 0;
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (purged == 0 && System.nanoTime() < deadline) {
                Map<TopicPartition, OffsetSpec> q = new HashMap<>();
                for (int p = 0; p < parts; p++) {
                    q.put(new TopicPartition(repartition, p), OffsetSpec.earliest());
                }
                purged = admin.listOffsets(q).all().get().values().stream().mapToLong(o -> o.offset()).sum();
                Thread.sleep(500);
            }
            assertTrue(purged > 0, "the repartition topic was purged (DeleteRecords)");
        } finally {
            for (App a : apps) {
                a.kill9();
            }
            Broker.deleteTree(dir.toFile());
        }
        assertTrue(new File(logDir.toFile(), appId + "-0.log").exists());
    }

    @Test
    void oneInstanceKilledTwiceMidStreamCountsExactly() throws Exception {
        run(1, 2, true);
    }

    @Test
    void twoInstancesShareTheWorkAndOneIsKilled() throws Exception {
        run(2, 1, false);
    }

    /** The long profile (-Dsluice.long=true): both cases on three brokers, replication factor 3. */
    @Test
    void onThreeBrokers() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Boolean.getBoolean("sluice.long"), "long profile only");
        org.junit.jupiter.api.Assumptions.assumeTrue(Broker.EXTERNAL == null, "needs brokers of its own");
        List<Broker> cluster = Broker.cluster(3);
        String single = bootstrap;
        Admin singleAdmin = admin;
        try {
            bootstrap = Broker.bootstrapOf(cluster);
            admin = Clients.admin(bootstrap);
            run(1, 2, true);
            run(2, 1, false);
        } finally {
            admin.close();
            bootstrap = single;
            admin = singleAdmin;
            for (Broker b : cluster) {
                b.close();
            }
        }
    }
}
