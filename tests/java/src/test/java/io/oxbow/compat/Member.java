package io.oxbow.compat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/**
 * A {@link GroupMember} child JVM and everything it printed. The test classpath is reused;
 * stderr (client logs) goes to {@code target/broker-logs/member-<name>.log}.
 */
final class Member implements AutoCloseable {
    final String name;
    private final Process process;
    private final List<String> lines = new ArrayList<>();

    private Member(String name, Process process) {
        this.name = name;
        this.process = process;
        Thread t = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    synchronized (lines) {
                        lines.add(line);
                        lines.notifyAll();
                    }
                }
            } catch (IOException e) {
                // process gone
            }
        }, "member-" + name);
        t.setDaemon(true);
        t.start();
    }

    /** Starts a member; {@code args} are GroupMember's key=value arguments. */
    static Member start(String name, OxbowBroker broker, String... args) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Paths.get(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("-Xmx128m");
        cmd.add("-XX:TieredStopAtLevel=1");
        cmd.add("-Dorg.slf4j.simpleLogger.defaultLogLevel=info");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(GroupMember.class.getName());
        cmd.add("bootstrap=" + broker.bootstrap());
        cmd.add("name=" + name);
        cmd.addAll(List.of(args));
        Path log = Paths.get(System.getProperty("oxbow.test.logdir", "target/broker-logs"), "member-" + name + ".log");
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.appendTo(log.toFile())).start();
        return new Member(name, p);
    }

    List<String> lines() {
        synchronized (lines) {
            return new ArrayList<>(lines);
        }
    }

    /** Waits until {@code until} holds for this member's lines; fails after {@code seconds}. */
    void await(String what, long seconds, Predicate<List<String>> until) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        synchronized (lines) {
            while (!until.test(lines)) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    throw new AssertionError(name + ": timed out waiting for " + what + "; output:\n"
                            + String.join("\n", tail(lines, 40)));
                }
                lines.wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
            }
        }
    }

    private static List<String> tail(List<String> l, int n) {
        return l.subList(Math.max(0, l.size() - n), l.size());
    }

    /** The partitions it owns now (its last NOW line), or empty before its first assignment. */
    Set<Integer> owned() {
        String now = lastStarting("NOW ");
        return now == null ? Set.of() : parsePartitions(now.substring(4, now.indexOf(" gen=")));
    }

    /** The generation of its last assignment (-1 before any). */
    int generation() {
        String now = lastStarting("NOW ");
        return now == null ? -1 : Integer.parseInt(now.substring(now.indexOf(" gen=") + 5));
    }

    /** Every partition ever named in a line starting with {@code prefix} (REVOKED, LOST, ...). */
    Set<Integer> allIn(String prefix) {
        Set<Integer> out = new TreeSet<>();
        for (String l : lines()) {
            if (l.startsWith(prefix + " ") || l.equals(prefix)) {
                out.addAll(parsePartitions(l.substring(prefix.length()).trim()));
            }
        }
        return out;
    }

    long count(String prefix) {
        return lines().stream().filter(l -> l.startsWith(prefix)).count();
    }

    String lastStarting(String prefix) {
        List<String> l = lines();
        for (int i = l.size() - 1; i >= 0; i--) {
            if (l.get(i).startsWith(prefix)) {
                return l.get(i);
            }
        }
        return null;
    }

    static Set<Integer> parsePartitions(String s) {
        Set<Integer> out = new TreeSet<>();
        for (String x : s.split(",")) {
            if (!x.isBlank()) {
                out.add(Integer.parseInt(x.trim()));
            }
        }
        return out;
    }

    void send(String command) throws IOException {
        OutputStream in = process.getOutputStream();
        in.write((command + "\n").getBytes(StandardCharsets.UTF_8));
        in.flush();
    }

    /** SIGKILL: no LeaveGroup, no commit. */
    void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
    }

    /** A clean stop (the consumer closes and leaves the group). */
    void stop() throws Exception {
        if (process.isAlive()) {
            send("stop");
            if (!process.waitFor(30, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        }
    }

    @Override
    public void close() throws Exception {
        try {
            stop();
        } catch (IOException e) {
            process.destroyForcibly();
        }
    }
}
