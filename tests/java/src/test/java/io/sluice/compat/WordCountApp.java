package io.sluice.compat;

import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams word count with exactly_once_v2, run as its own JVM by StreamsTest so that it
 * can be killed with SIGKILL: lines in, (word, count) out; the re-keying by word goes through a
 * repartition topic, the counts live in a state store with a changelog topic.
 * Usage: WordCountApp bootstrap application-id input output state-dir
 */
public final class WordCountApp {
    private WordCountApp() {}

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        p.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        // exactly_once_v2; `-Dwc.guarantee=at_least_once` shows that StreamsTest catches duplicates
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                System.getProperty("wc.guarantee", StreamsConfig.EXACTLY_ONCE_V2));
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, "200");
        p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, "0");
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "-1");
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, "0");
        p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), "6000");
        p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), "1000");
        p.put(StreamsConfig.producerPrefix("transaction.timeout.ms"), "10000");
        StreamsBuilder b = new StreamsBuilder();
        b.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\s+")))
                .filter((k, w) -> !w.isEmpty())
                .groupBy((k, w) -> w, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.as("counts"))
                .toStream()
                .mapValues(Object::toString)
                .to(args[3], Produced.with(Serdes.String(), Serdes.String()));
        KafkaStreams streams = new KafkaStreams(b.build(), p);
        CountDownLatch done = new CountDownLatch(1);
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("streams failed: " + e);
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                    .REPLACE_THREAD;
        });
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                done.countDown();
            }
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        done.await();
    }
}
