package io.oxbow.compat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.ByteBuffer;
import org.apache.kafka.common.message.ApiVersionsResponseData.ApiVersion;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.requests.AbstractRequest;
import org.apache.kafka.common.requests.AbstractResponse;
import org.apache.kafka.common.requests.ApiVersionsRequest;
import org.apache.kafka.common.requests.ApiVersionsResponse;
import org.apache.kafka.common.requests.RequestHeader;

/**
 * Sends single Kafka requests over a plain socket using kafka-clients' own request/response
 * serialization. For APIs the Java AdminClient no longer exposes (e.g. legacy AlterConfigs, removed
 * from Admin in Kafka 4.0 but still served by Kafka brokers).
 */
public final class RawKafkaClient implements AutoCloseable {
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private int correlationId;
    private ApiVersionsResponse versions;

    public RawKafkaClient(String host, int port) throws IOException {
        socket = new Socket();
        socket.connect(new InetSocketAddress(host, port), 10_000);
        socket.setSoTimeout(30_000);
        in = new DataInputStream(socket.getInputStream());
        out = new DataOutputStream(socket.getOutputStream());
    }

    /** Sends ApiVersions v3 (always, no caching) and checks it succeeded. */
    public ApiVersionsResponse fetchApiVersions() throws IOException {
        ApiVersionsResponse r = send(new ApiVersionsRequest.Builder(), (short) 3);
        assertEquals(Errors.NONE.code(), r.data().errorCode(), "ApiVersions error");
        return r;
    }

    /** Highest version of {@code key} that both this client and the broker support. */
    public short negotiate(ApiKeys key) throws IOException {
        if (versions == null) {
            versions = fetchApiVersions();
        }
        ApiVersion v = versions.apiVersion(key.id);
        assertNotNull(v, "broker does not advertise " + key + " in ApiVersions");
        short max = (short) Math.min(v.maxVersion(), key.latestVersion());
        assertTrue(max >= v.minVersion() && max >= key.oldestVersion(),
                key + ": no common version (broker " + v.minVersion() + ".." + v.maxVersion()
                        + ", client " + key.oldestVersion() + ".." + key.latestVersion() + ")");
        return max;
    }

    /** Sends a request that gets no response (Produce with acks=0). */
    void sendOneWay(AbstractRequest.Builder<?> builder, short version) throws IOException {
        write(builder, version);
    }

    private RequestHeader write(AbstractRequest.Builder<?> builder, short version) throws IOException {
        RequestHeader header = frame(builder, version, out);
        out.flush();
        return header;
    }

    /** Writes one size-prefixed request frame (the next correlation id) to {@code to}. */
    private RequestHeader frame(AbstractRequest.Builder<?> builder, short version, DataOutputStream to)
            throws IOException {
        RequestHeader header = new RequestHeader(builder.apiKey(), version, "oxbow-compat-raw", ++correlationId);
        ByteBuffer req = builder.build(version).serializeWithHeader(header);
        byte[] bytes = new byte[req.remaining()];
        req.get(bytes);
        to.writeInt(bytes.length);
        to.write(bytes);
        return header;
    }

    /** Sends a request and parses its response; fails on a correlation id mismatch. */
    @SuppressWarnings("unchecked")
    public <R extends AbstractResponse> R send(AbstractRequest.Builder<?> builder, short version) throws IOException {
        RequestHeader header = write(builder, version);
        int len = in.readInt();
        byte[] resp = new byte[len];
        in.readFully(resp);
        return (R) AbstractResponse.parseResponse(ByteBuffer.wrap(resp), header);
    }

    /**
     * Writes every request (each at its version) back to back on this connection from another
     * thread, without waiting for any answer, and reads the answers in order: what a client with
     * many requests in flight does.
     */
    public java.util.List<AbstractResponse> pipeline(java.util.List<AbstractRequest.Builder<?>> builders,
            java.util.List<Short> versions) throws Exception {
        java.util.List<RequestHeader> headers = new java.util.ArrayList<>();
        java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
        DataOutputStream frames = new DataOutputStream(all);
        for (int i = 0; i < builders.size(); i++) {
            headers.add(frame(builders.get(i), versions.get(i), frames));
        }
        byte[] payload = all.toByteArray();
        java.util.concurrent.CompletableFuture<Void> written = java.util.concurrent.CompletableFuture.runAsync(() -> {
            try {
                out.write(payload);
                out.flush();
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        });
        java.util.List<AbstractResponse> responses = new java.util.ArrayList<>();
        for (RequestHeader header : headers) {
            int len = in.readInt();
            byte[] resp = new byte[len];
            in.readFully(resp);
            responses.add(AbstractResponse.parseResponse(ByteBuffer.wrap(resp), header));
        }
        written.get();
        return responses;
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
