package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** The Java Admin client: topics, configs, offsets, records, transactions and producers. */
class AdminTest {
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

    static Throwable cause(Exception e) {
        return e instanceof ExecutionException ? e.getCause() : e;
    }

    @Test
    void topicsAreCreatedDescribedGrownAndDeleted() throws Exception {
        String topic = Clients.unique("adm");
        admin.createTopics(List.of(new NewTopic(topic, 2, (short) -1)
                .configs(Map.of("retention.ms", "3600000")))).all().get();
        ExecutionException dup = assertThrows(ExecutionException.class,
                () -> admin.createTopics(List.of(new NewTopic(topic, 2, (short) -1))).all().get());
        assertInstanceOf(TopicExistsException.class, dup.getCause());
        assertTrue(admin.listTopics().names().get().contains(topic));
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        assertEquals(2, d.partitions().size());
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get();
        ExecutionException shrink = assertThrows(ExecutionException.class,
                () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(2))).all().get());
        assertInstanceOf(InvalidPartitionsException.class, shrink.getCause());
        waitFor(() -> admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size() == 3);
        admin.deleteTopics(List.of(topic)).all().get();
        waitFor(() -> !admin.listTopics().names().get().contains(topic));
        ExecutionException gone = assertThrows(ExecutionException.class,
                () -> admin.describeTopics(List.of(topic)).allTopicNames().get());
        assertInstanceOf(UnknownTopicOrPartitionException.class, gone.getCause());
    }

    @Test
    void topicConfigsAreDescribedAndAlteredIncrementally() throws Exception {
        String topic = Clients.unique("cfg");
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) -1)
                .configs(Map.of("retention.ms", "3600000")))).all().get();
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Config c = admin.describeConfigs(List.of(res)).all().get().get(res);
        assertEquals("3600000", c.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("retention.bytes").source());
        admin.incrementalAlterConfigs(Map.of(res, List.of(
                new AlterConfigOp(new ConfigEntry("retention.bytes", "1048576"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE)))).all().get();
        Config after = admin.describeConfigs(List.of(res)).all().get().get(res);
        assertEquals("1048576", after.get("retention.bytes").value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, after.get("retention.ms").source());
        ExecutionException bad = assertThrows(ExecutionException.class, () -> admin.incrementalAlterConfigs(Map.of(res,
                List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET))))
                .all().get());
        assertInstanceOf(InvalidConfigurationException.class, bad.getCause());
    }

    @Test
    void groupOffsetsAreListedAlteredAndRecordsDeleted() throws Exception {
        String topic = Clients.unique("off");
        String group = Clients.unique("g");
        Clients.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), Map.of())) {
            for (int i = 0; i < 10; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, "v" + i));
            }
            p.flush();
        }
        admin.alterConsumerGroupOffsets(group, Map.of(tp, new OffsetAndMetadata(7, "seven"))).all().get();
        OffsetAndMetadata o = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().get(tp);
        assertEquals(7, o.offset());
        assertEquals("seven", o.metadata());
        admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).all().get();
        ListOffsetsResultInfo earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get();
        assertEquals(4, earliest.offset());
        admin.deleteConsumerGroups(List.of(group)).all().get();
        assertTrue(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get().isEmpty());
    }

    /**
     * An open transaction: ListOffsets answers the last stable offset to READ_COMMITTED and the
     * high watermark to READ_UNCOMMITTED; the transaction is listed, described and its producer
     * shown; the Admin client aborts it (a hanging transaction) and the LSO moves on.
     */
    @Test
    void openTransactionsAreListedDescribedAndAborted() throws Exception {
        String topic = Clients.unique("hang");
        String txnId = Clients.unique("hang");
        Clients.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> plain = Clients.producer(broker.bootstrap(), Map.of())) {
            plain.send(new ProducerRecord<>(topic, 0, null, "before")).get();
        }
        KafkaProducer<String, String> p = Clients.transactional(broker.bootstrap(), txnId);
        try {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "open-0")).get();
            p.send(new ProducerRecord<>(topic, 0, null, "open-1")).get();

            assertEquals(1, latest(tp, IsolationLevel.READ_COMMITTED));
            assertEquals(3, latest(tp, IsolationLevel.READ_UNCOMMITTED));

            Collection<TransactionListing> listed = admin.listTransactions().all().get();
            TransactionListing mine = listed.stream().filter(l -> l.transactionalId().equals(txnId)).findFirst()
                    .orElseThrow(() -> new AssertionError(txnId + " not in " + listed));
            assertEquals(TransactionState.ONGOING, mine.state());
            TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
            assertEquals(TransactionState.ONGOING, d.state());
            assertEquals(Set.of(tp), d.topicPartitions());
            assertEquals(mine.producerId(), d.producerId());

            List<ProducerState> producers = admin.describeProducers(List.of(tp)).partitionResult(tp).get()
                    .activeProducers();
            ProducerState ps = producers.stream().filter(s -> s.producerId() == d.producerId()).findFirst()
                    .orElseThrow(() -> new AssertionError("producer not described: " + producers));
            assertEquals(1L, ps.currentTransactionStartOffset().orElse(-1L));
            // no marker has reached the partition yet: no coordinator epoch (as Kafka)
            assertTrue(ps.coordinatorEpoch().isEmpty(), ps.toString());

            // as kafka-transactions.sh abort: the coordinator epoch, or 0 when there is none
            admin.abortTransaction(new AbortTransactionSpec(tp, ps.producerId(), (short) ps.producerEpoch(),
                    ps.coordinatorEpoch().orElse(0))).all().get();
            assertEquals(3 + 1, latest(tp, IsolationLevel.READ_COMMITTED), "the marker is the fourth offset");
            List<String> visible = Clients.values(Clients.readAll(broker.bootstrap(), topic, "read_committed", 1,
                    Duration.ofSeconds(30), Duration.ofMillis(300)));
            assertEquals(List.of("before"), visible);
        } finally {
            p.close(Duration.ZERO);
        }
    }

    /** KIP-730: fenceProducers bumps the epoch; the fenced instance can no longer commit. */
    @Test
    void fenceProducersFencesTheRunningInstance() throws Exception {
        String topic = Clients.unique("kip730");
        String txnId = Clients.unique("kip730");
        Clients.createTopic(admin, topic, 1);
        try (KafkaProducer<String, String> p = Clients.transactional(broker.bootstrap(), txnId)) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, "x")).get();
            admin.fenceProducers(List.of(txnId)).all().get();
            Exception e = assertThrows(Exception.class, p::commitTransaction);
            assertTrue(e instanceof ProducerFencedException || e instanceof InvalidProducerEpochException,
                    "fenced: " + e);
        }
        // the fencing InitProducerId aborted the open transaction and then took the id over
        TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
        assertTrue(d.state() == TransactionState.EMPTY || d.state() == TransactionState.COMPLETE_ABORT
                || d.state() == TransactionState.PREPARE_ABORT, d.toString());
        assertTrue(d.topicPartitions().isEmpty(), d.toString());
        assertTrue(Clients.readAll(broker.bootstrap(), topic, "read_committed", 0, Duration.ofSeconds(10),
                Duration.ofMillis(300)).isEmpty());
    }

    @Test
    void listOffsetsByTimestampAndMaxTimestamp() throws Exception {
        String topic = Clients.unique("ts");
        Clients.createTopic(admin, topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - 60_000;
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), Map.of())) {
            p.send(new ProducerRecord<>(topic, 0, base + 100, null, "a")).get();
            p.send(new ProducerRecord<>(topic, 0, base + 400, null, "b")).get();
            p.send(new ProducerRecord<>(topic, 0, base + 250, null, "c")).get();
        }
        assertEquals(1, admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 200))).partitionResult(tp).get()
                .offset());
        ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
        assertEquals(1, max.offset());
        assertEquals(base + 400, max.timestamp());
        assertEquals(0, admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset());
        assertEquals(3, latest(tp, IsolationLevel.READ_COMMITTED));
    }

    static long latest(TopicPartition tp, IsolationLevel iso) throws Exception {
        return admin.listOffsets(Map.of(tp, OffsetSpec.latest()), new ListOffsetsOptions(iso)).partitionResult(tp)
                .get().offset();
    }

    interface Check {
        boolean ok() throws Exception;
    }

    static void waitFor(Check c) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (!c.ok()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("condition not met in 30 s");
            }
            Thread.sleep(100);
        }
    }
}
