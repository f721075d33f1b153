package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.fail;

import java.util.Arrays;
import java.util.List;
import java.util.function.IntFunction;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.LifecycleMethodExecutionExceptionHandler;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.jupiter.api.extension.TestExecutionExceptionHandler;

/**
 * Starts one {@link OxbowBroker} per test class (extra {@code --override}s come from
 * {@link BrokerOverrides}, or from a function of the broker's port when the extension is
 * registered with {@code @RegisterExtension static OxbowBrokerExtension b = new
 * OxbowBrokerExtension(port -> ...)}), injects it as a parameter, fails any test after which the broker is
 * no longer running, and attaches the broker's log tail to every failure.
 */
public final class OxbowBrokerExtension
        implements BeforeAllCallback, AfterAllCallback, AfterEachCallback, ParameterResolver,
                TestExecutionExceptionHandler, LifecycleMethodExecutionExceptionHandler {

    private static final ExtensionContext.Namespace NS =
            ExtensionContext.Namespace.create(OxbowBrokerExtension.class);

    /** Overrides computed from the broker's PLAINTEXT port, or null: {@link BrokerOverrides}. */
    private final IntFunction<List<String>> portOverrides;

    public OxbowBrokerExtension() {
        this(null);
    }

    public OxbowBrokerExtension(IntFunction<List<String>> portOverrides) {
        this.portOverrides = portOverrides;
    }

    @Override
    public void beforeAll(ExtensionContext ctx) throws Exception {
        Class<?> cls = ctx.getRequiredTestClass();
        BrokerOverrides ann = cls.getAnnotation(BrokerOverrides.class);
        List<String> extra = ann == null ? List.of() : Arrays.asList(ann.value());
        OxbowBroker broker = portOverrides != null
                ? OxbowBroker.start(cls.getSimpleName(), portOverrides)
                : OxbowBroker.start(cls.getSimpleName(), extra);
        ctx.getStore(NS).put(OxbowBroker.class, broker);
    }

    @Override
    public void afterAll(ExtensionContext ctx) {
        OxbowBroker broker = ctx.getStore(NS).remove(OxbowBroker.class, OxbowBroker.class);
        if (broker != null) {
            broker.close();
        }
    }

    @Override
    public void afterEach(ExtensionContext ctx) {
        OxbowBroker broker = find(ctx);
        if (broker != null && !broker.isAlive()) {
            fail("Oxbow broker died during " + ctx.getDisplayName() + " (exit code "
                    + broker.process().exitValue() + ")\n" + broker.describeLog());
        }
    }

    private static OxbowBroker find(ExtensionContext ctx) {
        return ctx.getStore(NS).get(OxbowBroker.class, OxbowBroker.class);
    }

    @Override
    public boolean supportsParameter(ParameterContext pc, ExtensionContext ec) {
        return pc.getParameter().getType() == OxbowBroker.class;
    }

    @Override
    public Object resolveParameter(ParameterContext pc, ExtensionContext ec) {
        OxbowBroker broker = find(ec);
        if (broker == null) {
            fail("no Oxbow broker running for " + ec.getDisplayName());
        }
        return broker;
    }

    @Override
    public void handleTestExecutionException(ExtensionContext ctx, Throwable t) throws Throwable {
        throw withLogTail(ctx, t);
    }

    @Override
    public void handleBeforeEachMethodExecutionException(ExtensionContext ctx, Throwable t)
            throws Throwable {
        throw withLogTail(ctx, t);
    }

    @Override
    public void handleAfterEachMethodExecutionException(ExtensionContext ctx, Throwable t)
            throws Throwable {
        throw withLogTail(ctx, t);
    }

    private static Throwable withLogTail(ExtensionContext ctx, Throwable t) {
        OxbowBroker broker = find(ctx);
        if (broker != null) {
            String tail = broker.describeLog();
            System.err.println("[oxbow-test] " + ctx.getDisplayName() + " failed: " + t + "\n" + tail);
            t.addSuppressed(new BrokerLog(tail));
        }
        return t;
    }

    /** Carries the broker log tail inside a failure report. */
    static final class BrokerLog extends RuntimeException {
        BrokerLog(String tail) {
            super(tail, null, false, false);
        }
    }
}
