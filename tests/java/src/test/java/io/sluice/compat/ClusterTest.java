package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Three brokers: transaction version 2 (the Java 4.x client) when partition leaders and the
 * group coordinator are not the transaction coordinator. Produce v12 adds each partition to
 * the transaction, and TxnOffsetCommit v5 the group, at the coordinator on another broker
 * (found by Kafka Streams on three brokers: INVALID_TXN_STATE on every such send).
 */
class ClusterTest {
    static List<Broker> cluster;
    static String bootstrap;
    static Admin admin;

    @BeforeAll
    static void up() throws Exception {
        assumeTrue(Broker.EXTERNAL == null, "needs brokers of its own");
        cluster = Broker.cluster(3);
        bootstrap = Broker.bootstrapOf(cluster);
        admin = Clients.admin(bootstrap);
    }

    @AfterAll
    static void down() throws Exception {
        if (admin != null) {
            admin.close();
        }
        if (cluster != null) {
            for (Broker b : cluster) {
                b.close();
            }
        }
    }

    @Test
    void transactionVersion2SpansPartitionsAndGroupsOnEveryBroker() throws Exception {
        String topic = Clients.unique("tv2-cluster");
        admin.createTopics(List.of(new NewTopic(topic, 6, (short) 3))).all().get();
        int transactions = 6;
        try (KafkaProducer<String, String> p = Clients.transactional(bootstrap, Clients.unique("tv2-cluster"))) {
            p.initTransactions();
            for (int t = 0; t < transactions; t++) {
                p.beginTransaction();
                for (int part = 0; part < 6; part++) {
                    p.send(new ProducerRecord<>(topic, part, null, "t" + t + "-p" + part)).get();
                }
                // a different group each time: their coordinators spread over the brokers
                String group = "g-" + topic + "-" + t;
                try (KafkaConsumer<String, String> c = Clients.consumer(bootstrap, Map.of(
                        ConsumerConfig.GROUP_ID_CONFIG, group))) {
                    p.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(t + 1)),
                            c.groupMetadata());
                }
                if (t % 3 == 2) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
        }
        List<String> committed = Clients.values(Clients.readAll(bootstrap, topic, "read_committed", 24,
                Duration.ofSeconds(60), Duration.ofMillis(500)));
        assertEquals(4 * 6, committed.size(), committed.toString());
        for (int t = 0; t < transactions; t++) {
            String group = "g-" + topic + "-" + t;
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            try (KafkaConsumer<String, String> c = Clients.consumer(bootstrap, Map.of(
                    ConsumerConfig.GROUP_ID_CONFIG, group))) {
                OffsetAndMetadata o = c.committed(java.util.Set.of(new TopicPartition(topic, 0)))
                        .get(new TopicPartition(topic, 0));
                if (o != null) {
                    offsets.put(new TopicPartition(topic, 0), o);
                }
            }
            if (t % 3 == 2) {
                assertEquals(Map.of(), offsets, "aborted: group " + group + " has no offset");
            } else {
                assertEquals(t + 1, offsets.get(new TopicPartition(topic, 0)).offset(), group);
            }
        }
    }
}
