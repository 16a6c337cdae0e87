package io.sluice.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** Client configurations and small helpers shared by the tests. */
public final class Clients {
    private Clients() {}

    public static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    public static Properties base(String bootstrap, Map<String, Object> extra) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.putAll(extra);
        return p;
    }

    public static KafkaProducer<String, String> producer(String bootstrap, Map<String, Object> extra) {
        Properties p = base(bootstrap, Map.of(
                ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName(),
                ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName(),
                ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.LINGER_MS_CONFIG, "5"));
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    public static KafkaProducer<String, String> transactional(String bootstrap, String txnId) {
        return producer(bootstrap, Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000"));
    }

    public static KafkaConsumer<String, String> consumer(String bootstrap, Map<String, Object> extra) {
        Properties p = base(bootstrap, Map.of(
                ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName(),
                ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false"));
        p.putAll(extra);
        return new KafkaConsumer<>(p);
    }

    public static Admin admin(String bootstrap) {
        return admin(bootstrap, Map.of());
    }

    public static Admin admin(String bootstrap, Map<String, Object> extra) {
        Properties p = base(bootstrap, Map.of(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000"));
        p.putAll(extra);
        return Admin.create(p);
    }

    public static void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) -1))).all().get();
    }

    /**
     * Reads every partition of `topic` from the start with the given isolation level (no group)
     * until `expected` records arrived and then `quiet` passed without more, or `timeout` passed.
     */
    public static List<ConsumerRecord<String, String>> readAll(String bootstrap, String topic, String isolation,
            int expected, Duration timeout, Duration quiet) {
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        try (KafkaConsumer<String, String> c = consumer(bootstrap, Map.of(
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation))) {
            List<TopicPartition> tps = c.partitionsFor(topic, Duration.ofSeconds(30)).stream()
                    .map(pi -> new TopicPartition(topic, pi.partition())).collect(Collectors.toList());
            c.assign(tps);
            c.seekToBeginning(tps);
            long deadline = System.nanoTime() + timeout.toNanos();
            long quietUntil = Long.MAX_VALUE;
            while (System.nanoTime() < deadline && System.nanoTime() < quietUntil) {
                var recs = c.poll(Duration.ofMillis(200));
                recs.forEach(out::add);
                if (out.size() >= expected && recs.isEmpty() && quietUntil == Long.MAX_VALUE) {
                    quietUntil = System.nanoTime() + quiet.toNanos();
                }
            }
        }
        return out;
    }

    public static List<String> values(List<ConsumerRecord<String, String>> recs) {
        return recs.stream().map(ConsumerRecord::value).collect(Collectors.toList());
    }

    public static Map<String, Integer> countByValue(List<ConsumerRecord<String, String>> recs) {
        Map<String, Integer> m = new HashMap<>();
        recs.forEach(r -> m.merge(r.value(), 1, Integer::sum));
        return m;
    }
}
