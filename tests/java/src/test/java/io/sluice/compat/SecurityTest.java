package io.sluice.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.ClusterAuthorizationException;
import org.apache.kafka.common.errors.GroupAuthorizationException;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.errors.TransactionalIdAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** SASL_SSL with SCRAM, ACLs managed by the Admin client, and the exceptions a denied user gets. */
class SecurityTest {
    static Path certs;
    static Broker broker;
    static Admin admin;

    @BeforeAll
    static void up() throws Exception {
        assumeFalse(Broker.EXTERNAL != null, "needs a broker of its own with SASL_SSL");
        certs = Files.createTempDirectory("sluice-java-certs");
        Files.writeString(certs.resolve("server.ext"),
                "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n");
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                "-days", "2", "-subj", "/CN=sluice-java-ca");
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
                "-subj", "/CN=127.0.0.1");
        sh("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", "server.crt", "-days", "2", "-extfile", "server.ext");
        Files.writeString(certs.resolve("server.pem"),
                Files.readString(certs.resolve("server.crt")) + Files.readString(certs.resolve("server.key")));
        int port = Broker.freePort();
        broker = Broker.startWith(port, "SASL_SSL://127.0.0.1:" + port,
                "--ssl-keystore-location", certs.resolve("server.pem").toString(),
                "--sasl-bootstrap-users", "admin:admin-secret,alice:alice-secret",
                "--authorizer-class-name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "--super-users", "User:admin");
        admin = Clients.admin(broker.bootstrap(), sasl("admin", "admin-secret", "SCRAM-SHA-512"));
    }

    @AfterAll
    static void down() throws Exception {
        if (admin != null) {
            admin.close();
        }
        if (broker != null) {
            broker.close();
        }
        if (certs != null) {
            Broker.deleteTree(certs.toFile());
        }
    }

    static void sh(String... cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).directory(certs.toFile()).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        assertEquals(0, p.waitFor(), String.join(" ", cmd));
    }

    static Map<String, Object> sasl(String user, String password, String mechanism) {
        Map<String, Object> m = new HashMap<>();
        m.put("security.protocol", "SASL_SSL");
        m.put("sasl.mechanism", mechanism);
        String module = mechanism.equals("PLAIN") ? "org.apache.kafka.common.security.plain.PlainLoginModule"
                : "org.apache.kafka.common.security.scram.ScramLoginModule";
        m.put("sasl.jaas.config", module + " required username=\"" + user + "\" password=\"" + password + "\";");
        m.put("ssl.truststore.type", "PEM");
        m.put("ssl.truststore.location", certs.resolve("ca.pem").toString());
        return m;
    }

    static AclBinding allow(String user, ResourceType type, String name, AclOperation op) {
        return new AclBinding(new ResourcePattern(type, name, PatternType.LITERAL),
                new AccessControlEntry("User:" + user, "*", op, AclPermissionType.ALLOW));
    }

    @Test
    void aclsDecideWhatAUserMayDoAndDeniedUsersGetKafkasExceptions() throws Exception {
        String allowed = Clients.unique("open");
        String denied = Clients.unique("closed");
        String group = Clients.unique("alice-g");
        Clients.createTopic(admin, allowed, 1);
        Clients.createTopic(admin, denied, 1);
        List<AclBinding> acls = List.of(
                allow("alice", ResourceType.TOPIC, allowed, AclOperation.WRITE),
                allow("alice", ResourceType.TOPIC, allowed, AclOperation.READ),
                allow("alice", ResourceType.GROUP, group, AclOperation.READ),
                allow("alice", ResourceType.TRANSACTIONAL_ID, "alice-tx", AclOperation.WRITE));
        admin.createAcls(acls).all().get();
        AclBindingFilter alices = new AclBindingFilter(ResourcePatternFilter.ANY,
                new AccessControlEntryFilter("User:alice", null, AclOperation.ANY, AclPermissionType.ANY));
        Collection<AclBinding> described = admin.describeAcls(alices).values().get();
        assertEquals(4, described.size(), described.toString());
        assertTrue(described.containsAll(acls));

        Map<String, Object> alice = sasl("alice", "alice-secret", "SCRAM-SHA-256");
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), alice)) {
            p.send(new ProducerRecord<>(allowed, "hello")).get();
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(denied, "no")).get());
            assertInstanceOf(TopicAuthorizationException.class, e.getCause());
        }
        Map<String, Object> txn = new HashMap<>(alice);
        txn.put("transactional.id", "bob-tx");
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), txn)) {
            assertThrows(TransactionalIdAuthorizationException.class, p::initTransactions);
        }
        txn.put("transactional.id", "alice-tx");
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), txn)) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(allowed, "in-txn")).get();
            p.commitTransaction();
        }
        Map<String, Object> consumerCfg = new HashMap<>(alice);
        consumerCfg.put(ConsumerConfig.GROUP_ID_CONFIG, Clients.unique("not-alices"));
        try (KafkaConsumer<String, String> c = Clients.consumer(broker.bootstrap(), consumerCfg)) {
            c.subscribe(List.of(allowed));
            assertThrows(GroupAuthorizationException.class, () -> pollUntilRecords(c));
        }
        consumerCfg.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerCfg.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaConsumer<String, String> c = Clients.consumer(broker.bootstrap(), consumerCfg)) {
            c.subscribe(List.of(allowed));
            assertEquals(2, pollUntilRecords(c));
            c.commitSync();
        }
        // taking the write ACL away denies the next write
        admin.deleteAcls(List.of(allow("alice", ResourceType.TOPIC, allowed, AclOperation.WRITE).toFilter())).all()
                .get();
        Map<String, Object> plain = new HashMap<>(alice);
        plain.put("enable.idempotence", "false");
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), plain)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> p.send(new ProducerRecord<>(allowed, "no more")).get());
            assertInstanceOf(TopicAuthorizationException.class, e.getCause());
        }
        // KIP-679: an idempotent producer needs IdempotentWrite on the cluster or Write on some
        // topic; with neither, its InitProducerId is refused for the cluster
        // (the refusal reaches the producer before or after the send: send() then throws, or
        // its future fails — the client's timing, not the broker's)
        try (KafkaProducer<String, String> p = Clients.producer(broker.bootstrap(), alice)) {
            Exception e = assertThrows(Exception.class, () -> p.send(new ProducerRecord<>(allowed, "no more")).get());
            Throwable cause = e;
            while (cause != null && !(cause instanceof ClusterAuthorizationException)) {
                cause = cause.getCause();
            }
            assertNotNull(cause, "refused for the cluster: " + e);
        }
    }

    static int pollUntilRecords(KafkaConsumer<String, String> c) {
        int n = 0;
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            n += c.poll(Duration.ofMillis(200)).count();
            if (n >= 2) {
                return n;
            }
        }
        return n;
    }

    @Test
    void scramUsersAreManagedByTheAdminClient() throws Exception {
        admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion("carol",
                new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), "carol-secret"))).all().get();
        Map<String, UserScramCredentialsDescription> users = admin.describeUserScramCredentials().all().get();
        assertTrue(users.containsKey("carol"), users.toString());
        assertEquals(ScramMechanism.SCRAM_SHA_512, users.get("carol").credentialInfos().get(0).mechanism());
        try (Admin carol = Clients.admin(broker.bootstrap(), sasl("carol", "carol-secret", "SCRAM-SHA-512"))) {
            assertTrue(carol.describeCluster().nodes().get().size() >= 1);
        }
        Map<String, Object> wrong = sasl("carol", "not-her-password", "SCRAM-SHA-512");
        wrong.put("default.api.timeout.ms", "10000");
        wrong.put("request.timeout.ms", "5000");
        try (Admin bad = Clients.admin(broker.bootstrap(), wrong)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> bad.describeCluster().nodes().get());
            assertInstanceOf(SaslAuthenticationException.class, e.getCause());
        }
        Map<String, Object> wrongPlain = sasl("alice", "wrong", "PLAIN");
        wrongPlain.put("default.api.timeout.ms", "10000");
        wrongPlain.put("request.timeout.ms", "5000");
        try (Admin plain = Clients.admin(broker.bootstrap(), wrongPlain)) {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> plain.describeCluster().nodes().get());
            assertInstanceOf(SaslAuthenticationException.class, e.getCause());
        }
    }
}
