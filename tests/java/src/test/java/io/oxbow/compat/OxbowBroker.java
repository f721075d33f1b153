package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.IntFunction;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One Oxbow broker running as a child process on a free loopback port with a fresh data
 * directory. Its stdout and stderr go to {@code target/broker-logs/<name>.log}.
 *
 * <p>The binary is {@code $OXBOW_BROKER_BIN}, else the {@code oxbow.broker.default} system
 * property set by the pom ({@code ../../target/release/oxbow-broker} from the project basedir).
 * A missing binary is a test failure, never a skip.
 */
public final class OxbowBroker implements AutoCloseable {
    private static final long STARTUP_TIMEOUT_MS = envLong("OXBOW_STARTUP_TIMEOUT_MS", 30_000);
    private static final long SHUTDOWN_TIMEOUT_MS = 20_000;

    private final List<String> cmd;
    private final int port;
    private final Path dataDir;
    private final Path logFile;
    private final Thread shutdownHook;
    private volatile Process process;
    private volatile boolean closed;

    private OxbowBroker(List<String> cmd, int port, Path dataDir, Path logFile) {
        this.cmd = List.copyOf(cmd);
        this.port = port;
        this.dataDir = dataDir;
        this.logFile = logFile;
        // If the JVM is torn down mid-run, do not leave a broker behind.
        this.shutdownHook = new Thread(() -> {
            Process p = process;
            if (p != null) {
                p.destroyForcibly();
            }
        }, "oxbow-broker-reaper");
        Runtime.getRuntime().addShutdownHook(shutdownHook);
    }

    private static long envLong(String name, long dflt) {
        String v = System.getenv(name);
        return v == null || v.isBlank() ? dflt : Long.parseLong(v.trim());
    }

    /** Resolves the broker binary; fails (not skips) the calling test when it is absent. */
    public static Path brokerBinary() {
        String env = System.getenv("OXBOW_BROKER_BIN");
        String configured = (env != null && !env.isBlank())
                ? env
                : System.getProperty("oxbow.broker.default", "../../target/release/oxbow-broker");
        Path bin = Paths.get(configured).toAbsolutePath().normalize();
        if (!Files.isRegularFile(bin) || !Files.isExecutable(bin)) {
            fail("Oxbow broker binary not found or not executable: " + bin
                    + (env != null && !env.isBlank() ? " (from OXBOW_BROKER_BIN)" : " (default path)")
                    + ". Build it with `cargo build --release` in the repo root, or set OXBOW_BROKER_BIN.");
        }
        return bin;
    }

    /** Starts a broker and waits until its listener accepts TCP connections. */
    public static OxbowBroker start(String name, List<String> extraOverrides) throws Exception {
        return start(name, port -> extraOverrides);
    }

    /**
     * As {@link #start(String, List)}, with overrides that depend on the broker's PLAINTEXT port
     * (a {@code listeners=} override naming more listeners must repeat it).
     */
    public static OxbowBroker start(String name, IntFunction<List<String>> extraOverrides) throws Exception {
        Path bin = brokerBinary();
        int port = freePort();
        Path dataDir = Files.createTempDirectory("oxbow-java-" + name + "-");
        Path logDir = Paths.get(System.getProperty("oxbow.test.logdir", "target/broker-logs"));
        Files.createDirectories(logDir);
        Path logFile = logDir.resolve(name + ".log");

        List<String> cmd = new ArrayList<>();
        cmd.add(bin.toString());
        for (String kv : overrides(port, dataDir, extraOverrides.apply(port))) {
            cmd.add("--override");
            cmd.add(kv);
        }
        Files.writeString(logFile, "");
        OxbowBroker broker = new OxbowBroker(cmd, port, dataDir, logFile);
        try {
            broker.launch();
        } catch (Throwable t) {
            broker.close();
            throw t;
        }
        return broker;
    }

    /** Starts the process (appending to the log file) and waits for the listener. */
    private void launch() throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()));
        Map<String, String> env = pb.environment();
        env.putIfAbsent("RUST_LOG", "info");
        env.putIfAbsent("RUST_BACKTRACE", "1");
        env.putIfAbsent("NO_COLOR", "1");
        process = pb.start();
        awaitListening(String.join(" ", cmd));
    }

    /**
     * Stops the broker (SIGTERM, or SIGKILL when {@code kill}) and starts it again on the same
     * port and data directory.
     */
    public void restart(boolean kill) throws IOException, InterruptedException {
        Process p = process;
        Files.writeString(logFile, "\n[oxbow-test] ---- " + (kill ? "SIGKILL" : "SIGTERM") + " and restart ----\n",
                java.nio.file.StandardOpenOption.APPEND);
        if (kill) {
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
        } else {
            stopGracefully(p);
        }
        if (p.isAlive()) {
            fail("broker process " + p.pid() + " still alive after stop\n" + describeLog());
        }
        launch();
    }

    private static List<String> overrides(int port, Path dataDir, List<String> extra) {
        List<String> out = new ArrayList<>();
        out.add("listeners=PLAINTEXT://127.0.0.1:" + port);
        out.add("log.dirs=" + dataDir);
        out.add("num.partitions=4");
        out.addAll(extra);
        return out;
    }

    /** Ports already handed out: each pick closes its socket, so the kernel may offer it again. */
    private static final Set<Integer> GIVEN_PORTS = new HashSet<>();

    /**
     * A free loopback port, never one this JVM handed out before. With {@code OXBOW_TEST_PORTS=LO-HI}
     * (tests/run-all sets it for the suites it runs beside pytest) it is picked in that range instead
     * of the kernel's ephemeral one, so that a port another suite picked and has not bound yet cannot
     * be handed out here too.
     */
    static synchronized int freePort() throws IOException {
        int[] range = portRange();
        while (true) {
            int want = range == null ? 0 : ThreadLocalRandom.current().nextInt(range[0], range[1] + 1);
            try (ServerSocket s = new ServerSocket()) {
                s.setReuseAddress(true);
                s.bind(new InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), want), 1);
                if (GIVEN_PORTS.add(s.getLocalPort())) {
                    return s.getLocalPort();
                }
            } catch (java.net.BindException taken) {
                if (range == null) {
                    throw taken;
                }
            }
        }
    }

    private static int[] portRange() {
        String spec = System.getenv("OXBOW_TEST_PORTS");
        if (spec == null || spec.isEmpty()) {
            return null;
        }
        String[] parts = spec.split("-", 2);
        try {
            int lo = Integer.parseInt(parts[0]);
            int hi = Integer.parseInt(parts[1]);
            if (1024 <= lo && lo < hi && hi <= 65535) {
                return new int[] {lo, hi};
            }
        } catch (NumberFormatException | ArrayIndexOutOfBoundsException bad) {
            // reported below
        }
        throw new IllegalArgumentException("OXBOW_TEST_PORTS=" + spec + ": expected LO-HI, two ports, LO < HI");
    }

    private void awaitListening(String cmdline) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(STARTUP_TIMEOUT_MS);
        while (true) {
            if (!process.isAlive()) {
                fail("Oxbow broker exited with code " + process.exitValue()
                        + " before accepting connections on 127.0.0.1:" + port
                        + "\ncommand: " + cmdline + "\n" + describeLog());
            }
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress("127.0.0.1", port), 500);
                return;
            } catch (IOException notYet) {
                // fall through and retry until the deadline
            }
            if (System.nanoTime() > deadline) {
                fail("Oxbow broker did not accept connections on 127.0.0.1:" + port + " within "
                        + STARTUP_TIMEOUT_MS + " ms\ncommand: " + cmdline + "\n" + describeLog());
            }
            Thread.sleep(100);
        }
    }

    public int port() {
        return port;
    }

    public String bootstrap() {
        return "127.0.0.1:" + port;
    }

    public Path logFile() {
        return logFile;
    }

    public boolean isAlive() {
        return process.isAlive();
    }

    public Process process() {
        return process;
    }

    public Path dataDir() {
        return dataDir;
    }

    /** The last lines of the broker's combined stdout/stderr, with a header naming the file. */
    public String describeLog() {
        return "---- broker log tail (" + logFile.toAbsolutePath() + ") ----\n" + logTail(60)
                + "---- end of broker log tail ----";
    }

    public String logTail(int maxLines) {
        try (RandomAccessFile f = new RandomAccessFile(logFile.toFile(), "r")) {
            long len = f.length();
            long from = Math.max(0, len - 64 * 1024);
            byte[] buf = new byte[(int) (len - from)];
            f.seek(from);
            f.readFully(buf);
            String[] lines = new String(buf, StandardCharsets.UTF_8).split("\n", -1);
            StringBuilder sb = new StringBuilder();
            for (int i = Math.max(0, lines.length - maxLines - 1); i < lines.length; i++) {
                if (!lines[i].isEmpty()) {
                    sb.append(lines[i]).append('\n');
                }
            }
            return sb.toString();
        } catch (IOException e) {
            return "(could not read broker log: " + e + ")\n";
        }
    }

    // ---- client factories -------------------------------------------------------------------

    public Properties commonProps() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap());
        return p;
    }

    public Admin admin() {
        Properties p = commonProps();
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 30_000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30_000);
        return Admin.create(p);
    }

    /** A producer with client defaults except for {@code overrides}. */
    public KafkaProducer<byte[], byte[]> producer(Map<String, Object> overrides) {
        Properties p = commonProps();
        p.putAll(overrides);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new BoundedCloseProducer(p);
    }

    /**
     * KafkaProducer.close() waits forever for unsent records; against a broker that stopped
     * answering that would hang the suite, so close() here gives up after 10 s.
     */
    private static final class BoundedCloseProducer extends KafkaProducer<byte[], byte[]> {
        BoundedCloseProducer(Properties p) {
            super(p);
        }

        @Override
        public void close() {
            close(java.time.Duration.ofSeconds(10));
        }
    }

    /** A group-less consumer (use assign()), no auto-commit. */
    public KafkaConsumer<byte[], byte[]> consumer(Map<String, Object> overrides) {
        Properties p = commonProps();
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.putAll(overrides);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    // ---- shutdown ---------------------------------------------------------------------------

    /** SIGTERM, bounded wait, then SIGKILL; removes the data directory. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            Process p = process;
            if (p != null && p.isAlive()) {
                stopGracefully(p);
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        } finally {
            try {
                Runtime.getRuntime().removeShutdownHook(shutdownHook);
            } catch (IllegalStateException shuttingDown) {
                // JVM already exiting; the hook will run anyway
            }
            deleteRecursively(dataDir);
        }
    }

    private void stopGracefully(Process p) throws InterruptedException {
        p.destroy();
        if (!p.waitFor(SHUTDOWN_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
            System.err.println("[oxbow-test] broker did not exit within " + SHUTDOWN_TIMEOUT_MS
                    + " ms of SIGTERM; killing it (log: " + logFile + ")");
            p.destroyForcibly();
            p.waitFor(10, TimeUnit.SECONDS);
        }
    }

    private static void deleteRecursively(Path dir) {
        if (System.getenv("OXBOW_KEEP_DATA") != null) {
            return;
        }
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException ignored) {
            // best effort: it is a temp dir
        }
    }
}
