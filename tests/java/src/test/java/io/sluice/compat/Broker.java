package io.sluice.compat;

import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A real `sluice` broker process on a free 127.0.0.1 port with its own data directory, or (when
 * TEST_BOOTSTRAP is set) a broker somebody else started, e.g. Apache Kafka in vs-kafka.sh.
 */
public final class Broker implements AutoCloseable {
    /** host:port of a broker started outside the suite; null when the suite starts its own. */
    public static final String EXTERNAL = emptyToNull(System.getenv("TEST_BOOTSTRAP"));

    private final Path dataDir;
    private final int port;
    private final List<String> extra;
    private final String listeners;
    private final Path logFile;
    private Process proc;

    private Broker(Path dataDir, int port, String listeners, List<String> extra) {
        this.dataDir = dataDir;
        this.port = port;
        this.listeners = listeners;
        this.extra = extra;
        this.logFile = Path.of("target", "broker-logs", "broker-" + port + ".log").toAbsolutePath();
    }

    /** The broker most tests share: the external one, or a fresh `sluice`. */
    public static Broker shared(String... extra) throws Exception {
        if (EXTERNAL != null) {
            return new Broker(null, -1, null, List.of());
        }
        return start(extra);
    }

    /** A `sluice` of the test's own, with extra flags. */
    public static Broker start(String... extra) throws Exception {
        int port = freePort();
        return startWith(port, "PLAINTEXT://127.0.0.1:" + port, extra);
    }

    /** A `sluice` whose `listeners` setting is given; it counts as up once `port` accepts. */
    public static Broker startWith(int port, String listeners, String... extra) throws Exception {
        Path dir = Files.createTempDirectory("sluice-java-");
        Broker b = new Broker(dir.resolve("data"), port, listeners, Arrays.asList(extra));
        b.launch();
        return b;
    }

    public boolean isExternal() {
        return proc == null && dataDir == null;
    }

    public String bootstrap() {
        return isExternal() ? EXTERNAL : "127.0.0.1:" + port;
    }

    public static String binary() {
        String bin = emptyToNull(System.getenv("TEST_SLUICE_BIN"));
        if (bin != null) {
            return bin;
        }
        // tests/java -> the workspace's target/debug/sluice
        return Path.of("..", "..", "target", "debug", "sluice").toAbsolutePath().normalize().toString();
    }

    /**
     * A cluster of `n` `sluice` processes (one metadata quorum of all of them, as in the README),
     * every one started before any is waited for.
     */
    public static List<Broker> cluster(int n, String... extra) throws Exception {
        StringBuilder voters = new StringBuilder();
        int[] ports = new int[n];
        for (int i = 0; i < n; i++) {
            ports[i] = freePort();
            voters.append(i == 0 ? "" : ",").append(i + 1).append("@127.0.0.1:").append(freePort());
        }
        List<Broker> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            List<String> flags = new ArrayList<>(List.of("--node-id", String.valueOf(i + 1),
                    "--controller-quorum-voters", voters.toString()));
            flags.addAll(Arrays.asList(extra));
            Path dir = Files.createTempDirectory("sluice-java-cluster-");
            Broker b = new Broker(dir.resolve("data"), ports[i], "PLAINTEXT://127.0.0.1:" + ports[i], flags);
            b.spawn();
            out.add(b);
        }
        for (Broker b : out) {
            b.awaitUp();
        }
        // listening is not yet registered: wait until the metadata quorum knows every broker
        java.util.Properties p = new java.util.Properties();
        p.put("bootstrap.servers", bootstrapOf(out));
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(p)) {
            long deadline = System.nanoTime() + 60_000_000_000L;
            while (admin.describeCluster().nodes().get().size() < n) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("the cluster did not register " + n + " brokers");
                }
                Thread.sleep(200);
            }
        }
        return out;
    }

    public static String bootstrapOf(List<Broker> brokers) {
        StringBuilder s = new StringBuilder();
        for (Broker b : brokers) {
            s.append(s.length() == 0 ? "" : ",").append(b.bootstrap());
        }
        return s.toString();
    }

    private void launch() throws Exception {
        spawn();
        awaitUp();
    }

    private void spawn() throws Exception {
        Files.createDirectories(logFile.getParent());
        List<String> cmd = new ArrayList<>();
        cmd.add(binary());
        cmd.add("--log-dirs");
        cmd.add(dataDir.toString());
        cmd.add("--listeners");
        cmd.add(listeners);
        cmd.add("--group-initial-rebalance-delay-ms");
        cmd.add("0");
        cmd.addAll(extra);
        ProcessBuilder pb = new ProcessBuilder(cmd);
        // the broker refuses unknown SLUICE_* variables: pass none of ours
        Map<String, String> env = pb.environment();
        env.keySet().removeIf(k -> k.startsWith("SLUICE_"));
        pb.redirectErrorStream(true);
        pb.redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        proc = pb.start();
    }

    private void awaitUp() throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (!proc.isAlive()) {
                throw new IllegalStateException("broker exited with " + proc.exitValue() + ": " + tail());
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 200);
                return;
            } catch (IOException e) {
                Thread.sleep(50);
            }
        }
        throw new IllegalStateException("broker did not start listening: " + tail());
    }

    public String tail() {
        try {
            String s = Files.readString(logFile);
            return s.length() > 4000 ? s.substring(s.length() - 4000) : s;
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    public void kill9() throws InterruptedException {
        if (proc != null && proc.isAlive()) {
            proc.destroyForcibly();
            proc.waitFor();
        }
    }

    public void restart() throws Exception {
        kill9();
        launch();
    }

    @Override
    public void close() throws Exception {
        kill9();
        proc = null;
        if (dataDir != null) {
            deleteTree(dataDir.getParent().toFile());
        }
    }

    static void deleteTree(File f) {
        File[] kids = f.listFiles();
        if (kids != null) {
            for (File k : kids) {
                deleteTree(k);
            }
        }
        if (!f.delete() && f.exists()) {
            f.deleteOnExit();
        }
    }

    public static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        }
    }

    private static String emptyToNull(String s) {
        return s == null || s.isEmpty() ? null : s;
    }
}
