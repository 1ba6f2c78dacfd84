import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpRequest.BodyPublishers;
import java.net.http.HttpResponse;
import java.net.http.HttpResponse.BodyHandlers;
import java.net.http.WebSocket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSession;
import javax.net.ssl.TrustManagerFactory;

/**
 * Drives zigcorn's interop app (tests/apps/interop.py) with the clients Java programs really
 * use: java.net.http.HttpClient set to HTTP/2, over plain http (where it asks for HTTP/2 by the
 * h2c Upgrade of RFC 7540 section 3.2: its first request carries "Upgrade: h2c" and must be
 * answered "101 Switching Protocols") and over TLS (h2 by ALPN), and its WebSocket client
 * over ws:// and wss://.
 *
 * <p>Each run does one check over one transport and prints one JSON line saying what it saw.
 * Any failure is a message on stderr and exit status 1; bad usage is exit status 2.
 *
 * <pre>
 *   java -cp DIR Interop CHECK --transport T --port PORT [--ca ca.pem] [--n N] [--size BYTES] [--timeout SECONDS]
 *   java -cp DIR Interop serve    (many checks in one JVM: one line of such arguments per check on stdin)
 * </pre>
 *
 * HTTP checks (transports h2c, h2): reuse, concurrent, echo, download. WebSocket checks
 * (transports ws, wss): ws-text, ws-binary, ws-ping, ws-close. TLS checks (transport h2):
 * tls12, an HttpClient whose SSLParameters allow TLSv1.2 only.
 */
public final class Interop {
    static final int MIB = 1 << 20;
    static final int PERIOD = 251; // the /download body: byte i is i % 251
    static final int READ_SIZE = 64 * 1024;
    /** The pattern from any phase on, for a whole read: PATTERN[k] is k % 251. */
    static final byte[] PATTERN = new byte[READ_SIZE + PERIOD];

    static {
        for (int k = 0; k < PATTERN.length; k++) {
            PATTERN[k] = (byte) (k % PERIOD);
        }
    }
    static final List<String> HTTP_CHECKS = List.of("reuse", "concurrent", "echo", "download");
    static final List<String> WS_CHECKS = List.of("ws-text", "ws-binary", "ws-ping", "ws-close");
    static final List<String> TLS_CHECKS = List.of("tls12");
    static final int HEADS_TIMEOUT = 15; // seconds for every response of the concurrent check to begin

    record Options(String check, String transport, int port, String ca, int n, long size, int timeout) {
        boolean tls() {
            return transport.equals("h2") || transport.equals("wss");
        }
    }

    /** A check's verdict: the message says what was wrong. */
    static final class Failure extends Exception {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    public static void main(String[] args) {
        if (args.length == 1 && args[0].equals("serve")) {
            serve();
            return;
        }
        Options o;
        try {
            o = parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println(e.getMessage());
            System.err.println(USAGE);
            System.exit(2);
            return;
        }
        try {
            System.out.println(json(attempt(o)));
            System.out.flush();
            System.exit(0);
        } catch (Exception e) {
            System.err.println(o.check() + " over " + o.transport() + ": " + message(e));
            System.exit(1);
        }
    }

    /**
     * Runs checks one after another in this one JVM, each asked for by a line of arguments on
     * standard input, and answers each with one JSON line: {"ok": true, ...the result} or
     * {"ok": false, "error": "..."}. A check with no result in time ends the process (its
     * threads may still hold on to things). Each check builds its own clients, as in a run of
     * its own; the JVM's start and warm-up are paid once.
     */
    static void serve() {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            for (String line; (line = in.readLine()) != null; ) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> answer = new LinkedHashMap<>();
                boolean stuck = false;
                try {
                    answer.put("ok", true);
                    answer.putAll(attempt(parse(line.trim().split("\\s+"))));
                } catch (Exception e) {
                    stuck = e instanceof TimeoutException;
                    answer = map("ok", false, "error", message(e));
                }
                System.out.println(json(answer));
                System.out.flush();
                if (stuck) {
                    Runtime.getRuntime().halt(1);
                }
            }
        } catch (IOException e) {
            Runtime.getRuntime().halt(1);
        }
        System.exit(0);
    }

    /** One check, given `timeout` seconds: its result, or why it failed. */
    static Map<String, Object> attempt(Options o) throws Exception {
        ExecutorService runner = Executors.newSingleThreadExecutor(daemonThreads());
        try {
            Future<Map<String, Object>> result = runner.submit(() -> {
                Map<String, Object> out = map("check", o.check(), "transport", o.transport());
                out.putAll(WS_CHECKS.contains(o.check()) ? new Socket(o).run()
                        : TLS_CHECKS.contains(o.check()) ? tls12(o) : new Target(o).run());
                return out;
            });
            try {
                return result.get(o.timeout(), TimeUnit.SECONDS);
            } catch (TimeoutException e) {
                throw new TimeoutException("no result within " + o.timeout() + "s");
            } catch (ExecutionException e) {
                throw e.getCause() instanceof Exception cause ? cause : e;
            }
        } finally {
            runner.shutdown();
        }
    }

    /** What a failed check says: a Failure's message, or the exception with its stack. */
    static String message(Exception e) {
        if (e instanceof Failure || e instanceof TimeoutException || e instanceof IllegalArgumentException) {
            return e.getMessage();
        }
        StringWriter trace = new StringWriter();
        e.printStackTrace(new PrintWriter(trace));
        return trace.toString();
    }

    // ---- HTTP ----------------------------------------------------------------------------

    /** An HttpClient set to HTTP/2, as a Java program would build it for the transport. */
    static final class Target {
        final Options o;
        final HttpClient client;
        final URI base;
        final Set<String> socketsBefore;

        Target(Options o) throws Exception {
            this.o = o;
            socketsBefore = socketInodes();
            HttpClient.Builder builder = HttpClient.newBuilder()
                    .version(HttpClient.Version.HTTP_2)
                    .connectTimeout(Duration.ofSeconds(10));
            if (o.tls()) {
                builder.sslContext(sslContext(o.ca()));
            }
            client = builder.build();
            base = URI.create((o.tls() ? "https://localhost:" : "http://127.0.0.1:") + o.port());
        }

        Map<String, Object> run() throws Exception {
            Map<String, Object> result = switch (o.check()) {
                case "reuse" -> reuse();
                case "concurrent" -> concurrent();
                case "echo" -> echo();
                default -> download();
            };
            result.put("version", HttpClient.Version.HTTP_2.toString());
            return result;
        }

        HttpRequest.Builder request(String path) {
            return HttpRequest.newBuilder(base.resolve(path));
        }

        /** The response must be a 200 from the app, over HTTP/2 on both sides. */
        <T> HttpResponse<T> expect(String what, HttpResponse<T> response) throws Failure {
            if (response.statusCode() != 200) {
                throw new Failure(what + ": status " + response.statusCode() + ", want 200");
            }
            if (response.version() != HttpClient.Version.HTTP_2) {
                String why = o.tls() ? " (ALPN did not settle on h2)"
                        : " (the server did not take the h2c Upgrade: no 101 Switching Protocols)";
                throw new Failure(what + ": the response came over " + response.version() + ", want HTTP_2" + why);
            }
            String seen = response.headers().firstValue("x-http-version").orElse("(no x-http-version header)");
            if (!seen.equals("2")) {
                throw new Failure(what + ": the app saw HTTP/" + seen + ", want HTTP/2");
            }
            return response;
        }

        HttpResponse<String> getHello() throws Exception {
            HttpResponse<String> response = expect("GET /hello",
                    client.send(request("/hello").build(), BodyHandlers.ofString()));
            if (!response.body().equals("hello")) {
                throw new Failure("GET /hello: body \"" + response.body() + "\", want \"hello\"");
            }
            return response;
        }

        /**
         * n sequential GET /hello on a fresh client. Over plain http the first is the h2c
         * Upgrade: its response must already come over HTTP/2 (after the 101), and every
         * later one must go out on that same connection.
         */
        Map<String, Object> reuse() throws Exception {
            for (int i = 0; i < o.n(); i++) {
                try {
                    getHello();
                } catch (Failure f) {
                    throw new Failure("request " + (i + 1) + " of " + o.n() + ": " + f.getMessage());
                }
            }
            int connections = openConnections(o.port(), socketsBefore);
            if (connections != 1) {
                throw new Failure(o.n() + " requests left " + connections + " connections open, want 1");
            }
            return map("requests", o.n(), "connections", connections);
        }

        /**
         * n GET /download?n=SIZE sent at once (sendAsync) after GET /hello opened the
         * connection: no body is read before every response head has arrived, so all n are
         * streams open at once on that one connection; then each body is read and checked.
         *
         * <p>Unlike Go's and Node's rows this holds responses open, not requests: HttpClient
         * hands a response over only once its request body has been sent whole, so a request
         * body held open (the echo those rows use) would never see its response.
         *
         * <p>By default 50 x 1 MiB: more than HttpClient's 32 MiB connection window, which it
         * reopens only as bodies are read. The server must still send every response's
         * HEADERS, which flow control does not hold back (RFC 9113 section 6.9).
         */
        Map<String, Object> concurrent() throws Exception {
            getHello();
            String path = "/download?n=" + o.size();
            CompletableFuture<Void> gate = new CompletableFuture<>();
            Set<Integer> waiting = ConcurrentHashMap.newKeySet();
            AtomicInteger connectionsAtOnce = new AtomicInteger(-1);
            AtomicLong read = new AtomicLong();
            long began = System.nanoTime();
            ExecutorService readers = Executors.newCachedThreadPool(daemonThreads());
            List<CompletableFuture<Void>> requests = new ArrayList<>();
            for (int i = 1; i <= o.n(); i++) {
                int index = i;
                String what = "request " + i + " of " + o.n() + " (GET " + path + ")";
                waiting.add(index);
                CompletableFuture<HttpResponse<InputStream>> sent =
                        client.sendAsync(request(path).build(), BodyHandlers.ofInputStream());
                requests.add(sent.thenAcceptAsync(response -> {
                    try (InputStream body = expect(what, response).body()) {
                        waiting.remove(index);
                        if (waiting.isEmpty()) {
                            connectionsAtOnce.set(openConnections(o.port(), socketsBefore));
                            gate.complete(null);
                        }
                        gate.get(o.timeout(), TimeUnit.SECONDS);
                        readPattern(what, body, o.size(), read);
                    } catch (Exception e) {
                        gate.completeExceptionally(e); // the others would wait for this one for ever
                        throw new CompletionException(e);
                    }
                }, readers));
            }
            try {
                try {
                    gate.get(HEADS_TIMEOUT, TimeUnit.SECONDS);
                } catch (TimeoutException e) {
                    List<Integer> missing = new ArrayList<>(waiting);
                    missing.sort(null);
                    throw new Failure("after " + HEADS_TIMEOUT + "s only " + (o.n() - missing.size()) + " of " + o.n()
                            + " responses had begun; no response head for requests " + missing + " (every request was"
                            + " sent; the client reads no body before all heads are in, so its connection window, "
                            + "32 MiB, stays shut once full: HEADERS frames are not flow-controlled, RFC 9113 6.9)");
                } catch (ExecutionException e) {
                    throw new Failure((o.n() - waiting.size()) + " of " + o.n() + " responses had begun when one failed: "
                            + describe(e.getCause()));
                }
                for (CompletableFuture<Void> request : requests) {
                    try {
                        request.get(o.timeout(), TimeUnit.SECONDS);
                    } catch (ExecutionException e) {
                        throw new Failure("every response had begun; then, " + (System.nanoTime() - began) / 1_000_000_000
                                + "s in and " + read.get() + " body bytes read in all: " + describe(e.getCause()));
                    }
                }
            } finally {
                // Whatever still waits at the gate goes; the check is over.
                gate.completeExceptionally(new CancellationException("the check is over"));
                readers.shutdown();
            }
            if (connectionsAtOnce.get() != 1) {
                throw new Failure(o.n() + " requests open at once went out on " + connectionsAtOnce.get()
                        + " connections, want 1");
            }
            return map("requests", o.n(), "open_at_once", o.n(), "connections", connectionsAtOnce.get(),
                    "bytes_each", o.size());
        }

        /**
         * POST /echo of `size` random bytes, the echo hashed as it streams back. A GET goes
         * first: over plain http the h2c Upgrade happens on it, since an upgrade request
         * would have to send its whole body before the connection can turn HTTP/2.
         */
        Map<String, Object> echo() throws Exception {
            getHello();
            byte[] data = new byte[(int) o.size()];
            new Random(251).nextBytes(data);
            String sent = sha256(data);
            HttpRequest request = request("/echo")
                    .header("content-type", "application/octet-stream")
                    .POST(BodyPublishers.ofByteArray(data))
                    .build();
            HttpResponse<InputStream> response = expect("POST /echo", client.send(request, BodyHandlers.ofInputStream()));
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            long received = 0;
            try (InputStream body = response.body()) {
                byte[] buffer = new byte[READ_SIZE];
                for (int n; (n = body.read(buffer)) != -1; received += n) {
                    digest.update(buffer, 0, n);
                }
            } catch (IOException e) {
                throw new Failure("POST /echo: after " + received + " bytes: " + describe(e));
            }
            String got = HexFormat.of().formatHex(digest.digest());
            if (received != o.size() || !got.equals(sent)) {
                throw new Failure("POST /echo: got " + received + " bytes with sha256 " + got + ", sent " + o.size()
                        + " with " + sent);
            }
            return map("bytes", received, "sha256", got);
        }

        /** GET /download?n=SIZE read 64 KiB at most at a time, each read checked against the pattern. */
        Map<String, Object> download() throws Exception {
            String path = "/download?n=" + o.size();
            HttpResponse<InputStream> response = expect("GET " + path,
                    client.send(request(path).build(), BodyHandlers.ofInputStream()));
            long length = response.headers().firstValueAsLong("content-length").orElse(-1);
            if (length != o.size()) {
                throw new Failure("GET " + path + ": content-length " + length + ", want " + o.size());
            }
            return readPattern("GET " + path, response.body(), o.size(), new AtomicLong());
        }
    }

    /**
     * Reads a /download body of `size` bytes 64 KiB at most at a time, each read checked
     * against the pattern and hashed; nothing holds it whole.
     */
    static Map<String, Object> readPattern(String what, InputStream body, long size, AtomicLong total) throws Exception {
        MessageDigest digest = MessageDigest.getInstance("SHA-256");
        long offset = 0;
        int reads = 0;
        try (body) {
            byte[] buffer = new byte[READ_SIZE];
            for (int n; (n = body.read(buffer)) != -1; offset += n) {
                reads++;
                int start = (int) (offset % PERIOD);
                int bad = Arrays.mismatch(buffer, 0, n, PATTERN, start, start + n);
                if (bad >= 0) {
                    throw new Failure(what + ": byte " + (offset + bad) + " is " + (buffer[bad] & 0xff) + ", want "
                            + (offset + bad) % PERIOD);
                }
                digest.update(buffer, 0, n);
                total.addAndGet(n);
            }
        } catch (IOException e) {
            throw new Failure(what + ": after " + offset + " bytes: " + describe(e));
        }
        if (offset != size) {
            throw new Failure(what + ": the body ended after " + offset + " bytes, want " + size);
        }
        return map("bytes", offset, "reads", reads, "sha256", HexFormat.of().formatHex(digest.digest()));
    }

    // ---- WebSocket -----------------------------------------------------------------------

    /** One event a WebSocket listener saw: a whole message, a pong, a close or an error. */
    record Event(String kind, Object data, int code) {
    }

    /** Java's WebSocket client, and a queue of whole messages and other events it receives. */
    static final class Socket implements WebSocket.Listener {
        final Options o;
        final BlockingQueue<Event> events = new LinkedBlockingQueue<>();
        final StringBuilder text = new StringBuilder();
        final ByteArrayOutputStream binary = new ByteArrayOutputStream();
        WebSocket ws;

        Socket(Options o) {
            this.o = o;
        }

        Map<String, Object> run() throws Exception {
            HttpClient.Builder builder = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10));
            if (o.tls()) {
                builder.sslContext(sslContext(o.ca()));
            }
            URI uri = URI.create((o.tls() ? "wss://localhost:" : "ws://127.0.0.1:") + o.port() + "/ws");
            try {
                ws = builder.build().newWebSocketBuilder().buildAsync(uri, this).get(o.timeout(), TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                throw new Failure("connecting to " + uri + ": " + describe(e.getCause()));
            }
            try {
                return switch (o.check()) {
                    case "ws-text" -> text();
                    case "ws-binary" -> binary();
                    case "ws-ping" -> ping();
                    default -> close();
                };
            } finally {
                ws.abort();
            }
        }

        Map<String, Object> text() throws Exception {
            String message = "hello ünïcødé ✓ 𝄞";
            ws.sendText(message, true).get(o.timeout(), TimeUnit.SECONDS);
            String echoed = (String) next("text").data();
            if (!echoed.equals(message)) {
                throw new Failure("echo of text \"" + message + "\": \"" + echoed + "\"");
            }
            closeCleanly();
            return map("text", echoed);
        }

        Map<String, Object> binary() throws Exception {
            byte[] message = new byte[MIB];
            new Random(251).nextBytes(message);
            ws.sendBinary(ByteBuffer.wrap(message), true).get(o.timeout(), TimeUnit.SECONDS);
            byte[] echoed = (byte[]) next("binary").data();
            if (!Arrays.equals(echoed, message)) {
                throw new Failure("the echo of " + message.length + " bytes differs: " + echoed.length + " bytes came back");
            }
            closeCleanly();
            return map("bytes", echoed.length, "sha256", sha256(echoed));
        }

        Map<String, Object> ping() throws Exception {
            byte[] payload = "ping from java".getBytes(StandardCharsets.US_ASCII);
            ws.sendPing(ByteBuffer.wrap(payload)).get(o.timeout(), TimeUnit.SECONDS);
            byte[] pong = (byte[]) next("pong").data();
            if (!Arrays.equals(pong, payload)) {
                throw new Failure("pong \"" + new String(pong, StandardCharsets.US_ASCII) + "\", want \"ping from java\"");
            }
            closeCleanly();
            return map("pong", new String(pong, StandardCharsets.US_ASCII));
        }

        Map<String, Object> close() throws Exception {
            Event answer = closeCleanly();
            return map("close_code", answer.code(), "close_reason", answer.data());
        }

        /** Sends a close with 1000; the server must answer with 1000. */
        Event closeCleanly() throws Exception {
            ws.sendClose(WebSocket.NORMAL_CLOSURE, "done").get(o.timeout(), TimeUnit.SECONDS);
            Event answer = next("close");
            if (answer.code() != WebSocket.NORMAL_CLOSURE) {
                throw new Failure("closed with 1000, the server answered " + answer.code() + " \"" + answer.data() + "\"");
            }
            return answer;
        }

        /** The next event, which must be of `kind`. */
        Event next(String kind) throws Exception {
            Event event = events.poll(o.timeout(), TimeUnit.SECONDS);
            if (event == null) {
                throw new Failure("no " + kind + " within " + o.timeout() + "s");
            }
            if (event.kind().equals(kind)) {
                return event;
            }
            if (event.kind().equals("error")) {
                throw new Failure("waiting for a " + kind + ": " + describe((Throwable) event.data()));
            }
            if (event.kind().equals("close")) {
                throw new Failure("waiting for a " + kind + ": the server closed with " + event.code() + " \""
                        + event.data() + "\"");
            }
            throw new Failure("waiting for a " + kind + ", got a " + event.kind());
        }

        @Override
        public void onOpen(WebSocket webSocket) {
            webSocket.request(1);
        }

        @Override
        public CompletionStage<?> onText(WebSocket webSocket, CharSequence data, boolean last) {
            text.append(data);
            if (last) {
                events.add(new Event("text", text.toString(), 0));
                text.setLength(0);
            }
            webSocket.request(1);
            return null;
        }

        @Override
        public CompletionStage<?> onBinary(WebSocket webSocket, ByteBuffer data, boolean last) {
            byte[] part = new byte[data.remaining()];
            data.get(part);
            binary.writeBytes(part);
            if (last) {
                events.add(new Event("binary", binary.toByteArray(), 0));
                binary.reset();
            }
            webSocket.request(1);
            return null;
        }

        @Override
        public CompletionStage<?> onPong(WebSocket webSocket, ByteBuffer message) {
            byte[] payload = new byte[message.remaining()];
            message.get(payload);
            events.add(new Event("pong", payload, 0));
            webSocket.request(1);
            return null;
        }

        @Override
        public CompletionStage<?> onClose(WebSocket webSocket, int statusCode, String reason) {
            events.add(new Event("close", reason, statusCode));
            return null;
        }

        @Override
        public void onError(WebSocket webSocket, Throwable error) {
            events.add(new Event("error", error, 0));
        }
    }

    // ---- TLS ---------------------------------------------------------------------------

    /**
     * GET /hello from an HttpClient with Java's defaults but for one thing: SSLParameters
     * whose protocols are TLSv1.2 alone (SSLParameters.setProtocols, as a program that must
     * not use TLS 1.3 sets it; the JDK's default cipher suites otherwise). Reports the
     * protocol and cipher suite of the session and the HTTP version the answer came over;
     * the answer must be a 200 with the body "hello".
     */
    static Map<String, Object> tls12(Options o) throws Exception {
        SSLContext context = sslContext(o.ca());
        SSLParameters parameters = context.getDefaultSSLParameters();
        parameters.setProtocols(new String[] {"TLSv1.2"});
        HttpClient client = HttpClient.newBuilder()
                .sslContext(context)
                .sslParameters(parameters)
                .connectTimeout(Duration.ofSeconds(10))
                .build();
        URI uri = URI.create("https://localhost:" + o.port() + "/hello");
        HttpResponse<String> response = client.send(HttpRequest.newBuilder(uri).build(), BodyHandlers.ofString());
        SSLSession session = response.sslSession()
                .orElseThrow(() -> new Failure("GET /hello: the response has no TLS session"));
        return map("status", response.statusCode(), "body", response.body(), "protocol", session.getProtocol(),
                "cipher", session.getCipherSuite(), "http_version", response.version().toString());
    }

    // ---- helpers -------------------------------------------------------------------------

    /** Trusts only the CA certificate(s) in the PEM file `caFile`. */
    static SSLContext sslContext(String caFile) throws Exception {
        KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
        trusted.load(null, null);
        try (InputStream in = Files.newInputStream(Path.of(caFile))) {
            int i = 0;
            for (Certificate certificate : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                trusted.setCertificateEntry("ca" + i++, certificate);
            }
        }
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, trust.getTrustManagers(), null);
        return context;
    }

    /** The inodes of this process's open sockets, from /proc/self/fd. */
    static Set<String> socketInodes() throws IOException {
        Set<String> inodes = new HashSet<>();
        try (DirectoryStream<Path> fds = Files.newDirectoryStream(Path.of("/proc/self/fd"))) {
            for (Path fd : fds) {
                try {
                    String link = Files.readSymbolicLink(fd).toString();
                    if (link.startsWith("socket:[")) {
                        inodes.add(link.substring("socket:[".length(), link.length() - 1));
                    }
                } catch (IOException e) {
                    // closed while listed
                }
            }
        }
        return inodes;
    }

    /**
     * How many TCP connections to `port` this process has established since `before` was
     * taken: its sockets, less those in `before`, that /proc/self/net/tcp{,6} lists as
     * ESTABLISHED with that remote port. HttpClient shows no connection of its own, so this is
     * how to count them (and those of earlier checks in the same JVM are left out).
     */
    static int openConnections(int port, Set<String> before) throws IOException {
        Set<String> inodes = socketInodes();
        inodes.removeAll(before);
        int count = 0;
        for (String table : List.of("/proc/self/net/tcp", "/proc/self/net/tcp6")) {
            Path file = Path.of(table);
            if (!Files.exists(file)) {
                continue;
            }
            List<String> rows = Files.readAllLines(file);
            for (String row : rows.subList(1, rows.size())) {
                // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
                String[] fields = row.trim().split("\\s+");
                String remote = fields[2];
                int remotePort = Integer.parseInt(remote.substring(remote.indexOf(':') + 1), 16);
                if (remotePort == port && fields[3].equals("01") && inodes.contains(fields[9])) {
                    count++;
                }
            }
        }
        return count;
    }

    static java.util.concurrent.ThreadFactory daemonThreads() {
        return runnable -> {
            Thread thread = new Thread(runnable);
            thread.setDaemon(true);
            return thread;
        };
    }

    static String sha256(byte[] data) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
    }

    /** An exception and its causes, one after the other. */
    static String describe(Throwable error) {
        StringBuilder text = new StringBuilder();
        for (Throwable e = error; e != null; e = e.getCause()) {
            if (e instanceof CompletionException || e instanceof ExecutionException) {
                continue;
            }
            text.append(text.length() > 0 ? " <- " : "")
                    .append(e instanceof Failure ? "" : e.getClass().getSimpleName() + ": ")
                    .append(e.getMessage());
        }
        return text.toString();
    }

    static Map<String, Object> map(Object... pairs) {
        Map<String, Object> result = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            result.put((String) pairs[i], pairs[i + 1]);
        }
        return result;
    }

    static String json(Object value) {
        if (value instanceof Map<?, ?> map) {
            StringBuilder out = new StringBuilder("{");
            for (Map.Entry<?, ?> entry : map.entrySet()) {
                out.append(out.length() > 1 ? "," : "").append(json(entry.getKey().toString())).append(':')
                        .append(json(entry.getValue()));
            }
            return out.append('}').toString();
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        StringBuilder out = new StringBuilder("\"");
        for (char c : String.valueOf(value).toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c == '\n') {
                out.append("\\n");
            } else if (c == '\t') {
                out.append("\\t");
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    static Options parse(String[] args) {
        Map<String, String> flags = new LinkedHashMap<>(Map.of("timeout", "50"));
        List<String> positionals = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].startsWith("--")) {
                if (i + 1 >= args.length) {
                    usage(args[i] + " needs a value");
                }
                flags.put(args[i].substring(2), args[++i]);
            } else {
                positionals.add(args[i]);
            }
        }
        if (positionals.size() != 1) {
            usage("one check, please: " + positionals);
        }
        String check = positionals.get(0);
        boolean ws = WS_CHECKS.contains(check);
        boolean tlsCheck = TLS_CHECKS.contains(check);
        if (!ws && !tlsCheck && !HTTP_CHECKS.contains(check)) {
            usage("unknown check " + check);
        }
        List<String> transports = ws ? List.of("ws", "wss") : tlsCheck ? List.of("h2") : List.of("h2c", "h2");
        String transport = flags.getOrDefault("transport", "");
        if (!transports.contains(transport)) {
            usage(check + " runs over " + transports + ", not \"" + transport + "\"");
        }
        boolean tls = transport.equals("h2") || transport.equals("wss");
        if (tls != flags.containsKey("ca")) {
            usage(tls ? "--ca is required over " + transport : "--ca is for TLS transports only");
        }
        Map<String, Long> counts = Map.of("reuse", 5L, "concurrent", 50L);
        Map<String, Long> sizes = Map.of("concurrent", (long) MIB, "echo", 4L * MIB, "download", 32L * MIB);
        try {
            long n = Long.parseLong(flags.getOrDefault("n", String.valueOf(counts.getOrDefault(check, 1L))));
            long size = Long.parseLong(flags.getOrDefault("size", String.valueOf(sizes.getOrDefault(check, 0L))));
            return new Options(check, transport, Integer.parseInt(flags.getOrDefault("port", "")), flags.get("ca"),
                    (int) n, size, Integer.parseInt(flags.get("timeout")));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("a number, please: " + e.getMessage());
        }
    }

    static final String USAGE = "usage: java Interop " + String.join("|", HTTP_CHECKS) + "|"
            + String.join("|", WS_CHECKS) + "|" + String.join("|", TLS_CHECKS)
            + " --transport h2c|h2|ws|wss --port PORT [--ca ca.pem] [--n N]"
            + " [--size BYTES] [--timeout SECONDS]\n"
            + "   or: java Interop serve (one such line of arguments per check on stdin)";

    static void usage(String message) {
        throw new IllegalArgumentException(message);
    }

    private Interop() {
    }
}
