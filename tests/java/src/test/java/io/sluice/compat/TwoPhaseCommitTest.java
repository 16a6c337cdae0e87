package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.function.Function;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.message.AddPartitionsToTxnRequestData;
import org.apache.kafka.common.message.AddPartitionsToTxnResponseData;
import org.apache.kafka.common.message.EndTxnRequestData;
import org.apache.kafka.common.message.EndTxnResponseData;
import org.apache.kafka.common.message.InitProducerIdRequestData;
import org.apache.kafka.common.message.InitProducerIdResponseData;
import org.apache.kafka.common.message.RequestHeaderData;
import org.apache.kafka.common.message.ResponseHeaderData;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.protocol.Readable;
import org.junit.jupiter.api.Test;

/**
 * KIP-939's wire format, checked with Kafka's own generated code. kafka-clients 4.4 carries the
 * InitProducerId v6 schema (Enable2Pc, KeepPreparedTxn; OngoingTxnProducerId/Epoch in the answer)
 * but marks it unstable, so its producer never sends v6 and its 2PC methods are not public: this
 * test writes each request with Kafka's serializer and reads each answer with Kafka's
 * deserializer, on a socket to Sluice. A 2PC producer opens a transaction, a new instance keeps it
 * (the answer names the transaction's producer id and epoch), an instance that does not keep it
 * has it aborted (CONCURRENT_TRANSACTIONS, then a fresh epoch).
 */
class TwoPhaseCommitTest {
    private static int correlation = 0;

    private static <T> T call(Socket s, short apiKey, short version, ApiMessage body, Function<Readable, T> read)
            throws Exception {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        RequestHeaderData header = new RequestHeaderData().setRequestApiKey(apiKey).setRequestApiVersion(version)
                .setCorrelationId(++correlation).setClientId("kip939-wire");
        short headerVersion = 2; // both APIs are flexible at the versions used here
        int size = header.size(cache, headerVersion) + body.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(4 + size);
        buf.putInt(size);
        ByteBufferAccessor out = new ByteBufferAccessor(buf);
        header.write(out, cache, headerVersion);
        body.write(out, cache, version);
        DataOutputStream os = new DataOutputStream(s.getOutputStream());
        os.write(buf.array());
        os.flush();
        DataInputStream is = new DataInputStream(s.getInputStream());
        byte[] answer = new byte[is.readInt()];
        is.readFully(answer);
        ByteBufferAccessor in = new ByteBufferAccessor(ByteBuffer.wrap(answer));
        ResponseHeaderData rh = new ResponseHeaderData(in, (short) 1);
        assertEquals(correlation, rh.correlationId());
        return read.apply(in);
    }

    private static InitProducerIdResponseData init(Socket s, String txnId, boolean enable2Pc, boolean keep)
            throws Exception {
        InitProducerIdRequestData r = new InitProducerIdRequestData().setTransactionalId(txnId)
                .setTransactionTimeoutMs(60000).setEnable2Pc(enable2Pc).setKeepPreparedTxn(keep);
        return call(s, (short) 22, (short) 6, r, in -> new InitProducerIdResponseData(in, (short) 6));
    }

    /** InitProducerId v6 until it stops answering CONCURRENT_TRANSACTIONS (an abort finishing). */
    private static InitProducerIdResponseData initDone(Socket s, String txnId, boolean enable2Pc, boolean keep)
            throws Exception {
        for (int i = 0; i < 100; i++) {
            InitProducerIdResponseData r = init(s, txnId, enable2Pc, keep);
            if (r.errorCode() != Errors.CONCURRENT_TRANSACTIONS.code()) {
                return r;
            }
            Thread.sleep(100);
        }
        throw new AssertionError("the old transaction never completed");
    }

    private static void addPartition(Socket s, String txnId, long pid, short epoch, String topic) throws Exception {
        AddPartitionsToTxnRequestData.AddPartitionsToTxnTopicCollection topics =
                new AddPartitionsToTxnRequestData.AddPartitionsToTxnTopicCollection();
        topics.add(new AddPartitionsToTxnRequestData.AddPartitionsToTxnTopic().setName(topic)
                .setPartitions(List.of(0)));
        AddPartitionsToTxnRequestData r = new AddPartitionsToTxnRequestData().setV3AndBelowTransactionalId(txnId)
                .setV3AndBelowProducerId(pid).setV3AndBelowProducerEpoch(epoch).setV3AndBelowTopics(topics);
        AddPartitionsToTxnResponseData a = call(s, (short) 24, (short) 3, r,
                in -> new AddPartitionsToTxnResponseData(in, (short) 3));
        a.resultsByTopicV3AndBelow().forEach(t -> t.resultsByPartition().forEach(
                p -> assertEquals(Errors.NONE.code(), p.partitionErrorCode(), "AddPartitionsToTxn")));
    }

    @Test
    void initProducerIdV6AsKafkasSchemaWritesItKeepsOrAbortsThePreparedTransaction() throws Exception {
        assumeFalse(Broker.EXTERNAL != null, "Apache Kafka 4.x does not serve InitProducerId v6 by default");
        try (Broker broker = Broker.start("--transaction-two-phase-commit-enable", "true");
                Admin admin = Clients.admin(broker.bootstrap());
                Socket s = new Socket("127.0.0.1", Integer.parseInt(broker.bootstrap().split(":")[1]))) {
            String topic = Clients.unique("wire");
            Clients.createTopic(admin, topic, 1);
            String txnId = Clients.unique("job");
            InitProducerIdResponseData first = init(s, txnId, true, false);
            assertEquals(Errors.NONE.code(), first.errorCode());
            assertEquals(0, first.producerEpoch());
            assertEquals(-1L, first.ongoingTxnProducerId(), "no transaction ongoing");
            assertEquals(-1, first.ongoingTxnProducerEpoch());
            addPartition(s, txnId, first.producerId(), first.producerEpoch(), topic);

            InitProducerIdResponseData kept = init(s, txnId, true, true);
            assertEquals(Errors.NONE.code(), kept.errorCode());
            assertEquals(first.producerId(), kept.producerId());
            assertEquals(1, kept.producerEpoch(), "the bump fences the instance that prepared it");
            assertEquals(first.producerId(), kept.ongoingTxnProducerId(), "the kept transaction's producer id");
            assertEquals(0, kept.ongoingTxnProducerEpoch(), "and the epoch it was written with");

            InitProducerIdResponseData again = init(s, txnId, true, true);
            assertEquals(2, again.producerEpoch());
            assertEquals(0, again.ongoingTxnProducerEpoch(), "still the same transaction");

            // the kept transaction commits with transaction version 2 (EndTxn v5: a new epoch)
            EndTxnRequestData end = new EndTxnRequestData().setTransactionalId(txnId)
                    .setProducerId(again.producerId()).setProducerEpoch(again.producerEpoch()).setCommitted(true);
            EndTxnResponseData ended = call(s, (short) 26, (short) 5, end, in -> new EndTxnResponseData(in, (short) 5));
            assertEquals(Errors.NONE.code(), ended.errorCode());
            assertEquals(3, ended.producerEpoch(), "transaction version 2 bumps the epoch at the end");
            InitProducerIdResponseData committed = init(s, txnId, true, true);
            assertEquals(-1L, committed.ongoingTxnProducerId(), "committed: nothing left to keep");
            assertEquals(4, committed.producerEpoch());

            // a new transaction, and an instance that does not keep it: aborted
            addPartition(s, txnId, committed.producerId(), committed.producerEpoch(), topic);

            InitProducerIdResponseData aborted = initDone(s, txnId, true, false);
            assertEquals(Errors.NONE.code(), aborted.errorCode());
            InitProducerIdResponseData after = init(s, txnId, true, true);
            assertEquals(Errors.NONE.code(), after.errorCode());
            assertEquals(-1L, after.ongoingTxnProducerId(), "nothing left to keep: it was aborted");

            InitProducerIdResponseData misuse = init(s, Clients.unique("bad"), false, true);
            assertEquals(Errors.INVALID_REQUEST.code(), misuse.errorCode(), "KeepPreparedTxn needs Enable2Pc");
        }
    }
}
