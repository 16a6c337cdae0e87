package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Consumer groups, classic and KIP-848, and the consume-transform-produce loop. */
class GroupsTest {
    static Broker broker;
    static Admin admin;

    @BeforeAll
    static void up() throws Exception {
        broker = Broker.shared();
        admin = Clients.admin(broker.bootstrap());
    }

    @AfterAll
    static void down() throws Exception {
        admin.close();
        broker.close();
    }

    static void produce(String topic, int n, int partitions) throws Exception {
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), Map.of())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, i % partitions, "k" + i, "v" + i));
            }
            p.flush();
        }
    }

    /**
     * Two members of one group share a four-partition topic: each partition goes to exactly one,
     * every record is read once, committed offsets are the end offsets, and the group is
     * described with its protocol type.
     */
    @ParameterizedTest
    @ValueSource(strings = {"classic", "consumer"})
    void twoMembersShareATopicAndCommit(String protocol) throws Exception {
        String topic = Clients.unique("grp");
        String group = Clients.unique("g-" + protocol);
        Clients.createTopic(admin, topic, 4);
        int n = 2000;
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch bothAssigned = new CountDownLatch(2);
        Map<Integer, Set<TopicPartition>> owned = new ConcurrentHashMap<>();
        List<Thread> members = new ArrayList<>();
        for (int m = 0; m < 2; m++) {
            final int id = m;
            Thread t = new Thread(() -> {
                try (KafkaConsumer<String, String> c = Clients.consumer(broker.bootstrap(), Map.of(
                        ConsumerConfig.GROUP_ID_CONFIG, group,
                        ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol,
                        ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "50"))) {
                    c.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                        @Override
                        public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                            owned.computeIfAbsent(id, k -> ConcurrentHashMap.newKeySet()).removeAll(parts);
                        }

                        @Override
                        public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                            owned.computeIfAbsent(id, k -> ConcurrentHashMap.newKeySet()).addAll(parts);
                            if (!parts.isEmpty()) {
                                bothAssigned.countDown();
                            }
                        }
                    });
                    while (!stop.get()) {
                        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                            seen.merge(r.value(), 1, Integer::sum);
                        }
                        c.commitSync();
                    }
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                }
            });
            t.start();
            members.add(t);
        }
        // the records are written once both members own partitions, so the work is shared
        assertTrue(bothAssigned.await(60, java.util.concurrent.TimeUnit.SECONDS), "both members assigned: " + owned);
        produce(topic, n, 4);
        long deadline = System.nanoTime() + 90_000_000_000L;
        while (seen.size() < n && System.nanoTime() < deadline && failure.get() == null) {
            Thread.sleep(100);
        }
        // while both are still members: describe the group
        ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
        stop.set(true);
        for (Thread t : members) {
            t.join(30_000);
        }
        if (failure.get() != null) {
            throw new AssertionError("a member failed", failure.get());
        }
        assertEquals(n, seen.size(), "records read");
        assertTrue(seen.values().stream().allMatch(c -> c >= 1));
        assertEquals(protocol.equals("consumer") ? GroupType.CONSUMER : GroupType.CLASSIC, d.type());
        assertEquals(2, d.members().size(), d.toString());
        Set<TopicPartition> assigned = new HashSet<>();
        d.members().forEach(mem -> mem.assignment().topicPartitions().forEach(tp ->
                assertTrue(assigned.add(tp), tp + " assigned twice: " + d)));
        assertEquals(4, assigned.size(), d.toString());
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get();
        long total = committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum();
        assertEquals(n, total, committed.toString());
    }

    /**
     * Consume-transform-produce: offsets sent to the transaction commit with it, and an aborted
     * transaction neither publishes its output nor moves the group's offsets.
     */
    @ParameterizedTest
    @ValueSource(strings = {"classic", "consumer"})
    void sendOffsetsToTransactionCommitsOffsetsWithTheOutput(String protocol) throws Exception {
        String in = Clients.unique("in");
        String out = Clients.unique("out");
        String group = Clients.unique("etl");
        Clients.createTopic(admin, in, 2);
        Clients.createTopic(admin, out, 2);
        int n = 500;
        produce(in, n, 2);
        int abortedBatches = 0;
        try (KafkaConsumer<String, String> c = Clients.consumer(broker.bootstrap(), Map.of(
                ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol,
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "100"));
                KafkaProducer<String, String> p = Clients.transactional(broker.bootstrap(), Clients.unique("etl"))) {
            p.initTransactions();
            c.subscribe(List.of(in));
            int done = 0;
            long deadline = System.nanoTime() + 90_000_000_000L;
            while (done < n && System.nanoTime() < deadline) {
                var recs = c.poll(Duration.ofMillis(200));
                if (recs.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : recs) {
                    p.send(new ProducerRecord<>(out, r.partition(), r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                if (abortedBatches < 2) {
                    // abort: the output is discarded, and the consumer rewinds to the committed offsets
                    abortedBatches++;
                    p.abortTransaction();
                    for (TopicPartition tp : offsets.keySet()) {
                        OffsetAndMetadata at = c.committed(Set.of(tp)).get(tp);
                        c.seek(tp, at == null ? 0 : at.offset());
                    }
                    continue;
                }
                p.commitTransaction();
                done += recs.count();
            }
            assertEquals(n, done);
        }
        List<ConsumerRecord<String, String>> output = Clients.readAll(broker.bootstrap(), out, "read_committed", n,
                Duration.ofSeconds(30), Duration.ofMillis(500));
        Map<String, Integer> counts = Clients.countByValue(output);
        assertEquals(n, counts.size());
        assertTrue(counts.values().stream().allMatch(x -> x == 1), "each output exactly once");
        Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                .partitionsToOffsetAndMetadata().get();
        assertEquals(n, committed.values().stream().mapToLong(OffsetAndMetadata::offset).sum(), committed.toString());
    }
}
