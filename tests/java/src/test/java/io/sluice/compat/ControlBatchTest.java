package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;

/**
 * Decision 0045's gate: the Java consumer reads across control batches of types it does not
 * know (KRaft's LEADER_CHANGE and a Sluice type), as one log per replica would keep Raft's own
 * entries. The broker's failpoint `log.raft_control_batches` appends two of them after every
 * produce batch.
 */
class ControlBatchTest {
    @Test
    void theConsumerSkipsRaftControlBatchesAtBothIsolationLevels() throws Exception {
        assumeFalse(Broker.EXTERNAL != null, "needs a broker of its own (a test failpoint)");
        try (Broker broker = Broker.start("--testing-failpoints", "log.raft_control_batches");
                Admin admin = Clients.admin(broker.bootstrap())) {
            String topic = Clients.unique("ctl");
            Clients.createTopic(admin, topic, 1);
            List<String> committed = new ArrayList<>();
            try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), Map.of(
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.LINGER_MS_CONFIG, "0"))) {
                for (int i = 0; i < 200; i++) {
                    p.send(new ProducerRecord<>(topic, 0, null, "i" + i)).get();
                    committed.add("i" + i);
                }
            }
            try (KafkaProducer<String, String> p = Clients.transactional(broker.bootstrap(), Clients.unique("ctl-t"))) {
                p.initTransactions();
                p.beginTransaction();
                for (int i = 0; i < 20; i++) {
                    p.send(new ProducerRecord<>(topic, 0, null, "a" + i)).get();
                }
                p.abortTransaction();
                p.beginTransaction();
                for (int i = 0; i < 30; i++) {
                    p.send(new ProducerRecord<>(topic, 0, null, "c" + i)).get();
                    committed.add("c" + i);
                }
                p.commitTransaction();
            }
            List<ConsumerRecord<String, String>> rc = Clients.readAll(broker.bootstrap(), topic, "read_committed",
                    committed.size(), Duration.ofSeconds(60), Duration.ofMillis(500));
            assertEquals(committed, Clients.values(rc), "read_committed");
            List<ConsumerRecord<String, String>> ru = Clients.readAll(broker.bootstrap(), topic, "read_uncommitted",
                    committed.size() + 20, Duration.ofSeconds(60), Duration.ofMillis(500));
            assertEquals(committed.size() + 20, ru.size(), "read_uncommitted: every record, aborted ones too");
            long previous = -1;
            for (ConsumerRecord<String, String> r : ru) {
                assertTrue(r.offset() > previous, "offsets ascend");
                previous = r.offset();
            }
            // every batch was followed by two control batches: the offsets have gaps
            assertTrue(previous >= 3L * 200, "the control batches took offsets: last " + previous);
        }
    }
}
