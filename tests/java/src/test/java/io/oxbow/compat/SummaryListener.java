package io.oxbow.compat;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.engine.support.descriptor.ClassSource;
import org.junit.platform.launcher.TestExecutionListener;
import org.junit.platform.launcher.TestIdentifier;
import org.junit.platform.launcher.TestPlan;

/**
 * Prints a one-line summary (and the failed tests) at the end of the run, so `mvn -q test`,
 * which hides surefire's INFO summary when everything passes, still says what ran.
 */
public final class SummaryListener implements TestExecutionListener {
    private final AtomicInteger run = new AtomicInteger();
    private final AtomicInteger failed = new AtomicInteger();
    private final AtomicInteger skipped = new AtomicInteger();
    private final List<String> failures = new ArrayList<>();

    @Override
    public void executionSkipped(TestIdentifier id, String reason) {
        if (id.isTest()) {
            skipped.incrementAndGet();
        }
    }

    @Override
    public void executionFinished(TestIdentifier id, TestExecutionResult result) {
        boolean bad = result.getStatus() != TestExecutionResult.Status.SUCCESSFUL;
        if (id.isTest()) {
            run.incrementAndGet();
        }
        if (bad && (id.isTest() || id.isContainer())) {
            if (!id.isTest()) {
                // a class that failed before its tests ran (e.g. no broker binary)
                if (id.getSource().filter(ClassSource.class::isInstance).isPresent()) {
                    run.incrementAndGet();
                } else {
                    return;
                }
            }
            failed.incrementAndGet();
            String msg = result.getThrowable().map(t -> firstLine(String.valueOf(t))).orElse("");
            synchronized (failures) {
                failures.add(id.getUniqueId().replaceAll("\\[engine:[^]]*]/", "") + " -> " + msg);
            }
        }
    }

    private static String firstLine(String s) {
        int nl = s.indexOf('\n');
        return nl < 0 ? s : s.substring(0, nl);
    }

    @Override
    public void testPlanExecutionFinished(TestPlan plan) {
        StringBuilder sb = new StringBuilder("[oxbow-compat] Tests run: ").append(run.get())
                .append(", Failed: ").append(failed.get()).append(", Skipped: ").append(skipped.get());
        synchronized (failures) {
            for (String f : failures) {
                sb.append("\n[oxbow-compat]   FAILED ").append(f);
            }
        }
        System.out.println(sb);
    }
}
