package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FinalizedVersionRange;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The Java producer: idempotent, transactional with transaction version 2 and forced to 1, fencing. */
class ProducerTest {
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

    @Test
    void idempotentProducerWritesEveryRecordOnceInOrder() throws Exception {
        String topic = Clients.unique("idem");
        Clients.createTopic(admin, topic, 3);
        List<Future<RecordMetadata>> acks = new ArrayList<>();
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "5"))) {
            for (int i = 0; i < 3000; i++) {
                acks.add(p.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i)));
            }
            p.flush();
        }
        for (Future<RecordMetadata> f : acks) {
            f.get();
        }
        List<ConsumerRecord<String, String>> recs = Clients.readAll(broker.bootstrap(), topic, "read_uncommitted",
                3000, Duration.ofSeconds(60), Duration.ofMillis(500));
        assertEquals(3000, recs.size());
        int[] next = new int[3];
        for (ConsumerRecord<String, String> r : recs) {
            int i = Integer.parseInt(r.value().substring(1));
            assertEquals(r.partition(), i % 3);
            assertEquals(next[r.partition()], i / 3, "partition " + r.partition() + " out of order at " + r.offset());
            next[r.partition()]++;
        }
    }

    @Test
    void committedAndAbortedTransactionsAreSeenPerIsolationLevel() throws Exception {
        String topic = Clients.unique("iso");
        Clients.createTopic(admin, topic, 2);
        try (KafkaProducer<String, String> p = Clients.transactional(broker.bootstrap(), Clients.unique("t"))) {
            p.initTransactions();
            p.beginTransaction();
            for (int i = 0; i < 3; i++) {
                p.send(new ProducerRecord<>(topic, i % 2, null, "committed-" + i));
            }
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "aborted-0")).get();
            p.send(new ProducerRecord<>(topic, 1, null, "aborted-1")).get();
            p.abortTransaction();
            // aborted before anything was sent: nothing to undo
            p.beginTransaction();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 1, null, "committed-3"));
            p.commitTransaction();
        }
        List<String> committed = Clients.values(Clients.readAll(broker.bootstrap(), topic, "read_committed", 4,
                Duration.ofSeconds(30), Duration.ofMillis(500)));
        assertEquals(4, committed.size(), committed.toString());
        assertTrue(committed.stream().allMatch(v -> v.startsWith("committed-")), committed.toString());
        List<String> all = Clients.values(Clients.readAll(broker.bootstrap(), topic, "read_uncommitted", 6,
                Duration.ofSeconds(30), Duration.ofMillis(500)));
        assertEquals(6, all.size(), all.toString());
    }

    /**
     * Transaction version 2 is negotiated from the broker's finalized feature: the coordinator
     * bumps the producer epoch at the end of every transaction (KIP-890), so the epoch the
     * partition last saw grows by one per transaction; with version 1 it stays.
     */
    @Test
    void transactionVersion2IsNegotiatedFromTheFinalizedFeature() throws Exception {
        FinalizedVersionRange tv = admin.describeFeatures().featureMetadata().get()
                .finalizedFeatures().get("transaction.version");
        assertEquals(2, tv.maxVersionLevel());
        assertEquals(2, epochGrowthOverTwoTransactions(broker.bootstrap(), admin));
    }

    @Test
    void transactionVersion1WhenTheBrokerFinalizesIt() throws Exception {
        assumeFalse(broker.isExternal(), "needs a broker of its own");
        try (Broker tv1 = Broker.start("--transaction-version", "1");
                Admin a = Clients.admin(tv1.bootstrap())) {
            assertEquals(1, a.describeFeatures().featureMetadata().get()
                    .finalizedFeatures().get("transaction.version").maxVersionLevel());
            assertEquals(0, epochGrowthOverTwoTransactions(tv1.bootstrap(), a));
        }
    }

    /** Runs three committed transactions; the epoch after the third minus the one after the first. */
    static int epochGrowthOverTwoTransactions(String bootstrap, Admin a) throws Exception {
        String topic = Clients.unique("tv");
        Clients.createTopic(a, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        int first = -1;
        int last = -1;
        try (KafkaProducer<String, String> p = Clients.transactional(bootstrap, Clients.unique("tv"))) {
            p.initTransactions();
            for (int t = 0; t < 3; t++) {
                p.beginTransaction();
                p.send(new ProducerRecord<>(topic, "v" + t)).get();
                p.commitTransaction();
                List<ProducerState> states = a.describeProducers(List.of(tp)).partitionResult(tp).get()
                        .activeProducers();
                assertEquals(1, states.size(), states.toString());
                if (t == 0) {
                    first = states.get(0).producerEpoch();
                }
                last = states.get(0).producerEpoch();
            }
        }
        List<String> committed = Clients.values(Clients.readAll(bootstrap, topic, "read_committed", 3,
                Duration.ofSeconds(30), Duration.ofMillis(300)));
        assertEquals(List.of("v0", "v1", "v2"), committed);
        return last - first;
    }

    @Test
    void aNewInstanceFencesTheZombie() throws Exception {
        String topic = Clients.unique("fence");
        Clients.createTopic(admin, topic, 1);
        String txnId = Clients.unique("fence");
        try (KafkaProducer<String, String> zombie = Clients.transactional(broker.bootstrap(), txnId)) {
            zombie.initTransactions();
            zombie.beginTransaction();
            zombie.send(new ProducerRecord<>(topic, "zombie")).get();
            try (KafkaProducer<String, String> fresh = Clients.transactional(broker.bootstrap(), txnId)) {
                // the new instance's init aborts the zombie's open transaction and fences it
                fresh.initTransactions();
                assertThrows(ProducerFencedException.class, zombie::commitTransaction);
                fresh.beginTransaction();
                fresh.send(new ProducerRecord<>(topic, "fresh")).get();
                fresh.commitTransaction();
            }
        }
        List<String> committed = Clients.values(Clients.readAll(broker.bootstrap(), topic, "read_committed", 1,
                Duration.ofSeconds(30), Duration.ofMillis(500)));
        assertEquals(List.of("fresh"), committed);
    }
}
