//! Whole handshakes between `tls.Handshake` and an OpenSSL client over memory BIOs. The
//! client speaks TLS records, so this file wraps the server's CRYPTO output into records for
//! it (sealed with the secrets the CLIENT's keylog gives, not the server's) and unwraps the
//! client's records into CRYPTO bytes: a second, test-only use of the record rules. Both
//! sides' secrets are then compared level by level.
const std = @import("std");
const openssl = @import("../transport/openssl.zig");
const suite = @import("suite.zig");
const tls = @import("tls.zig");
const tls_context = @import("tls_context.zig");
const Scan = @import("scan_allocator.zig").Scan;

const testing = std.testing;
const SSL = openssl.SSL;
const BIO = openssl.BIO;

const hrr_random = [_]u8{ 0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91, 0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C };
const server_params = "\x01\x04\x80\x00\x75\x30server-params";
const client_params = "\x04\x04\x80\x10\x00\x00client-params";

const Cert = enum { rsa, ecdsa };

const Options = struct {
    cert: Cert = .rsa,
    ciphersuites: [:0]const u8 = "TLS_AES_128_GCM_SHA256",
    /// null: OpenSSL's default list (on 3.5+ a hybrid post-quantum key share first).
    groups: ?[:0]const u8 = "X25519",
    alpn: []const u8 = "\x02h3",
    send_params: bool = true,
    /// Resume this session (from an earlier handshake on the same server context).
    session: ?*openssl.SSL_SESSION = null,
    /// The client presents the ECDSA certificate, and the server requires one.
    client_cert: bool = false,
};

/// The test's client: an OpenSSL client with memory BIOs, and what its keylog told it.
const Client = struct {
    ctx: *openssl.SSL_CTX,
    ssl: *SSL,
    rbio: *BIO,
    wbio: *BIO,
    opts: Options,
    /// [level][0: the client's, 1: the server's]
    secrets: [3][2]?suite.Secret = .{ .{ null, null }, .{ null, null }, .{ null, null } },
    seq_to_client: [3]u64 = .{ 0, 0, 0 },
    seq_from_client: [3]u64 = .{ 0, 0, 0 },
    peer_params: [64]u8 = undefined,
    peer_params_len: ?usize = null,
    first_server_hello: ?[32]u8 = null,
    server_hellos: usize = 0,
    tickets_bytes: usize = 0,
    handshake_bytes: usize = 0,

    fn init(c: *Client, opts: Options) !void {
        const f = openssl.functions();
        const ctx = f.SSL_CTX_new(f.TLS_client_method()) orelse return error.OpenSsl;
        errdefer f.SSL_CTX_free(ctx);
        _ = f.SSL_CTX_clear_options(ctx, 1 << 20); // no middlebox compatibility: no CCS
        if (f.SSL_CTX_ctrl(ctx, 123, openssl.TLS1_3_VERSION, null) != 1) return error.OpenSsl;
        f.SSL_CTX_set_keylog_callback(ctx, clientKeylog);
        if (opts.send_params and f.SSL_CTX_add_custom_ext(ctx, 0x39, 0x0080 | 0x0400, clientParamsAdd, null, null, clientParamsParse, null) != 1) return error.OpenSsl;
        const ssl = f.SSL_new(ctx) orelse return error.OpenSsl;
        errdefer f.SSL_free(ssl);
        const rbio = f.BIO_new(f.BIO_s_mem()) orelse return error.OpenSsl;
        const wbio = f.BIO_new(f.BIO_s_mem()) orelse return error.OpenSsl;
        f.SSL_set_bio(ssl, rbio, wbio);
        if (f.SSL_set_ciphersuites(ssl, opts.ciphersuites) != 1) return error.OpenSsl;
        if (opts.groups) |groups| if (f.SSL_ctrl(ssl, 92, 0, @constCast(groups.ptr)) != 1) return error.OpenSsl;
        if (f.SSL_set_alpn_protos(ssl, opts.alpn.ptr, @intCast(opts.alpn.len)) != 0) return error.OpenSsl;
        if (f.SSL_ctrl(ssl, 55, 0, @constCast("localhost")) != 1) return error.OpenSsl;
        if (opts.session) |session| if (f.SSL_set_session(ssl, session) != 1) return error.OpenSsl;
        if (opts.client_cert) {
            var files: Files = undefined;
            try files.init();
            defer files.deinit();
            if (f.SSL_use_certificate_chain_file(ssl, files.ecdsa_cert) != 1 or
                f.SSL_use_PrivateKey_file(ssl, files.ecdsa_key, 1) != 1) return error.OpenSsl;
        }
        f.SSL_set_connect_state(ssl);
        c.* = .{ .ctx = ctx, .ssl = ssl, .rbio = rbio, .wbio = wbio, .opts = opts };
        if (f.SSL_set_ex_data(ssl, 0, c) != 1) return error.OpenSsl;
    }

    fn deinit(c: *Client) void {
        const f = openssl.functions();
        f.SSL_free(c.ssl);
        f.SSL_CTX_free(c.ctx);
        f.ERR_clear_error();
    }

    /// Runs the client: the handshake, then a read that takes in the session tickets.
    fn step(c: *Client) !void {
        const f = openssl.functions();
        if (openssl.handshakeDone(c.ssl)) {
            var buf: [64]u8 = undefined;
            const rc = f.SSL_read(c.ssl, &buf, buf.len);
            if (rc > 0 or f.SSL_get_error(c.ssl, rc) != 2) return error.ClientFailed;
            return;
        }
        const rc = f.SSL_do_handshake(c.ssl);
        if (rc != 1 and f.SSL_get_error(c.ssl, rc) != 2) return error.ClientFailed;
    }

    /// The client's records, unwrapped, to the server; returns the bytes moved.
    fn flushTo(c: *Client, hs: *tls.Handshake) !usize {
        const f = openssl.functions();
        var buf: [32 * 1024]u8 = undefined;
        const n = f.BIO_read(c.wbio, &buf, buf.len);
        if (n <= 0) return 0;
        var rest = buf[0..@intCast(n)];
        while (rest.len > 0) {
            if (rest.len < 5) return error.BadRecord;
            const len = std.mem.readInt(u16, rest[3..5], .big);
            if (rest.len < 5 + len) return error.BadRecord;
            const record = rest[0 .. 5 + len];
            rest = rest[5 + len ..];
            switch (record[0]) {
                22 => hs.provide(.initial, record[5..]) catch return @intCast(n),
                23 => {
                    // A QUIC client's only protected messages are at the Handshake level.
                    const plain = try c.open(.handshake, record);
                    hs.provide(.handshake, plain) catch return @intCast(n);
                },
                else => return error.UnexpectedRecord,
            }
        }
        return @intCast(n);
    }

    fn open(c: *Client, level: tls.Level, record: []u8) ![]u8 {
        const s = c.secrets[@intFromEnum(level)][0] orelse return error.NoKey;
        const aead = suite.Aead.init(&s, .tls_record);
        if (record.len < 5 + 1 + suite.tag_len) return error.BadRecord;
        const body = record[5 .. record.len - suite.tag_len];
        try aead.open(body, body, record[record.len - suite.tag_len ..][0..suite.tag_len].*, record[0..5], c.seq_from_client[@intFromEnum(level)]);
        c.seq_from_client[@intFromEnum(level)] += 1;
        var end = body.len;
        while (end > 0 and body[end - 1] == 0) end -= 1;
        if (end == 0 or body[end - 1] != 22) return error.NotHandshake;
        return body[0 .. end - 1];
    }

    /// The server's output, wrapped into records for the client, level by level as far as
    /// the client has the keys; the client runs after each level. Returns the bytes moved.
    fn feedFrom(c: *Client, hs: *tls.Handshake) !usize {
        const f = openssl.functions();
        var moved: usize = 0;
        for ([_]tls.Level{ .initial, .handshake, .application }) |level| {
            const out = hs.output(level);
            if (out.len == 0) continue;
            const li = @intFromEnum(level);
            if (level != .initial and c.secrets[li][1] == null) break;
            if (level == .initial) c.noteServerHellos(out);
            if (level == .application) c.tickets_bytes += out.len;
            if (level == .handshake) c.handshake_bytes += out.len;
            var rest = out;
            while (rest.len > 0) {
                const n = @min(rest.len, tls.record_plaintext_max);
                var record: [tls.record_max_bytes]u8 = undefined;
                const len = if (level == .initial) tls.sealPlain(&record, rest[0..n]) else blk: {
                    const aead = suite.Aead.init(&c.secrets[li][1].?, .tls_record);
                    defer c.seq_to_client[li] += 1;
                    break :blk tls.sealRecord(&record, &aead, c.seq_to_client[li], rest[0..n]);
                };
                if (f.BIO_write(c.rbio, &record, @intCast(len)) != len) return error.OpenSsl;
                rest = rest[n..];
            }
            moved += out.len;
            hs.consumeOutput(level, out.len);
            try c.step();
        }
        return moved;
    }

    fn noteServerHellos(c: *Client, out: []const u8) void {
        var rest = out;
        while (rest.len >= 38 and rest[0] == 2) {
            c.server_hellos += 1;
            if (c.first_server_hello == null) c.first_server_hello = rest[6..38].*;
            const len = std.mem.readInt(u24, rest[1..4], .big);
            if (rest.len < 4 + len) return;
            rest = rest[4 + len ..];
        }
    }
};

fn clientOf(ssl: *const SSL) *Client {
    return @ptrCast(@alignCast(openssl.functions().SSL_get_ex_data(ssl, 0).?));
}

fn clientKeylog(ssl: *const SSL, line: [*:0]const u8) callconv(.c) void {
    const c = clientOf(ssl);
    var it = std.mem.splitScalar(u8, std.mem.span(line), ' ');
    const label = it.next().?;
    _ = it.next();
    const hex = it.next() orelse return;
    const slots = [_]struct { []const u8, usize, usize }{
        .{ "CLIENT_HANDSHAKE_TRAFFIC_SECRET", 1, 0 }, .{ "SERVER_HANDSHAKE_TRAFFIC_SECRET", 1, 1 },
        .{ "CLIENT_TRAFFIC_SECRET_0", 2, 0 },         .{ "SERVER_TRAFFIC_SECRET_0", 2, 1 },
    };
    for (slots) |slot| if (std.mem.eql(u8, label, slot[0])) {
        const s = tls.negotiatedSuite(ssl).?;
        var bytes: [48]u8 = undefined;
        const raw = std.fmt.hexToBytes(&bytes, hex) catch unreachable;
        std.debug.assert(raw.len == s.secretLen());
        c.secrets[slot[1]][slot[2]] = suite.Secret.init(s, raw);
    };
}

fn clientParamsAdd(ssl: *SSL, _: c_uint, _: c_uint, out: *?[*]const u8, outlen: *usize, _: ?*openssl.X509, _: usize, _: *c_int, _: ?*anyopaque) callconv(.c) c_int {
    _ = ssl;
    out.* = client_params;
    outlen.* = client_params.len;
    return 1;
}

fn clientParamsParse(ssl: *SSL, _: c_uint, _: c_uint, in: [*]const u8, inlen: usize, _: ?*openssl.X509, _: usize, _: *c_int, _: ?*anyopaque) callconv(.c) c_int {
    const c = clientOf(ssl);
    if (inlen > c.peer_params.len) return 0;
    @memcpy(c.peer_params[0..inlen], in[0..inlen]);
    c.peer_params_len = inlen;
    return 1;
}

const cert_pems = struct {
    const rsa = .{ @embedFile("testdata/rsa_cert.pem"), @embedFile("testdata/rsa_key.pem") };
    const ecdsa = .{ @embedFile("testdata/ecdsa_cert.pem"), @embedFile("testdata/ecdsa_key.pem") };
};

/// The test certificates as files, as the command line names them (OpenSSL reads them
/// when a context or session loads them; the folder goes at `deinit`).
const Files = struct {
    tmp: std.testing.TmpDir,
    bufs: [5][std.fs.max_path_bytes]u8 = undefined,
    rsa_cert: [:0]const u8 = "",
    rsa_key: [:0]const u8 = "",
    ecdsa_cert: [:0]const u8 = "",
    ecdsa_key: [:0]const u8 = "",

    fn init(f: *Files) !void {
        f.* = .{ .tmp = testing.tmpDir(.{}) };
        errdefer f.tmp.cleanup();
        const names = [_][]const u8{ "rsa_cert.pem", "rsa_key.pem", "ecdsa_cert.pem", "ecdsa_key.pem" };
        const data = [_][]const u8{ cert_pems.rsa[0], cert_pems.rsa[1], cert_pems.ecdsa[0], cert_pems.ecdsa[1] };
        const dir = try f.tmp.dir.realpath(".", &f.bufs[4]);
        var paths: [4][:0]const u8 = undefined;
        for (names, data, 0..) |name, bytes, i| {
            try f.tmp.dir.writeFile(.{ .sub_path = name, .data = bytes });
            paths[i] = try std.fmt.bufPrintZ(&f.bufs[i], "{s}/{s}", .{ dir, name });
        }
        f.rsa_cert, f.rsa_key, f.ecdsa_cert, f.ecdsa_key = paths;
    }

    fn deinit(f: *Files) void {
        f.tmp.cleanup();
    }
};

/// The server's QUIC context with `cert`; with `client_certs`, client certificates are
/// required and verified against the (self-signed) ECDSA one.
fn serverContext(cert: Cert, client_certs: bool) !*openssl.SSL_CTX {
    try openssl.load(openssl.default_library);
    var files: Files = undefined;
    try files.init();
    defer files.deinit();
    var err: openssl.ContextError = .{};
    return tls_context.newContext(.{
        .certfile = if (cert == .rsa) files.rsa_cert else files.ecdsa_cert,
        .keyfile = if (cert == .rsa) files.rsa_key else files.ecdsa_key,
        .password = null,
        .min_version = openssl.TLS1_3_VERSION,
        .max_version = openssl.TLS1_3_VERSION,
        .ciphers = null,
        .cert_reqs = if (client_certs) 2 else 0,
        .ca_certs = if (client_certs) files.ecdsa_cert else null,
        .http2 = false,
    }, &err) orelse {
        std.debug.print("QUIC context: {s}\n", .{err.text()});
        return error.Context;
    };
}

/// A server handshake and a client, ready to pump.
const Pair = struct {
    ctx: *openssl.SSL_CTX,
    owns_ctx: bool,
    hs: *tls.Handshake,
    client: Client,

    fn init(p: *Pair, opts: Options) !void {
        const ctx = try serverContext(opts.cert, opts.client_cert);
        errdefer openssl.freeContext(ctx);
        try p.initOn(ctx, opts);
        p.owns_ctx = true;
    }

    /// On a server context the caller keeps (a second handshake resumes the first's session).
    fn initOn(p: *Pair, ctx: *openssl.SSL_CTX, opts: Options) !void {
        p.ctx = ctx;
        p.owns_ctx = false;
        p.hs = tls.Handshake.init(testing.allocator, p.ctx, server_params) orelse return error.OutOfMemory;
        errdefer p.hs.deinit();
        try p.client.init(opts);
    }

    fn deinit(p: *Pair) void {
        p.client.deinit();
        p.hs.deinit();
        if (p.owns_ctx) openssl.freeContext(p.ctx);
    }

    /// Bytes back and forth until neither side has anything to say (bounded).
    fn pump(p: *Pair) !void {
        var rounds: usize = 0;
        while (rounds < 16) : (rounds += 1) {
            try p.client.step();
            const sent = try p.client.flushTo(p.hs);
            if (p.hs.state == .failed) return;
            const received = try p.client.feedFrom(p.hs);
            if (sent == 0 and received == 0) return;
        }
        return error.TooManyRounds;
    }

    fn expectSameSecrets(p: *Pair) !void {
        for ([_]tls.Level{ .handshake, .application }) |level| {
            const mine = p.client.secrets[@intFromEnum(level)];
            try testing.expectEqualSlices(u8, mine[0].?.slice(), p.hs.secret(level, .read).?.slice());
            try testing.expectEqualSlices(u8, mine[1].?.slice(), p.hs.secret(level, .write).?.slice());
        }
        try testing.expect(p.hs.secret(.initial, .read) == null);
    }
};

fn expectHandshake(opts: Options, want: suite.Suite) !void {
    var p: Pair = undefined;
    try p.init(opts);
    defer p.deinit();
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    try testing.expect(openssl.handshakeDone(p.client.ssl));
    try testing.expect(p.hs.ssl == null); // freed on completion
    try testing.expectEqual(want, p.hs.secret(.application, .write).?.suite);
    try p.expectSameSecrets();
    try testing.expectEqualStrings("h3", p.hs.alpn().?);
    try testing.expectEqualStrings("h3", openssl.alpnSelected(p.client.ssl));
    try testing.expectEqualStrings(client_params, p.hs.peerTransportParams().?);
    try testing.expectEqualStrings(server_params, p.client.peer_params[0..p.client.peer_params_len.?]);
    try testing.expectEqualStrings("localhost", p.hs.serverName().?);
    try testing.expect(p.client.tickets_bytes > 0); // a NewSessionTicket at 1-RTT, read by the client
    for ([_]tls.Level{ .initial, .handshake, .application }) |level| try testing.expectEqual(@as(usize, 0), p.hs.output(level).len);
}

test "handshake: RSA certificate, each of the three suites" {
    try expectHandshake(.{ .cert = .rsa }, .aes_128_gcm_sha256);
    try expectHandshake(.{ .cert = .rsa, .ciphersuites = "TLS_AES_256_GCM_SHA384" }, .aes_256_gcm_sha384);
    try expectHandshake(.{ .cert = .rsa, .ciphersuites = "TLS_CHACHA20_POLY1305_SHA256" }, .chacha20_poly1305_sha256);
}

test "handshake: ECDSA certificate, each of the three suites" {
    try expectHandshake(.{ .cert = .ecdsa }, .aes_128_gcm_sha256);
    try expectHandshake(.{ .cert = .ecdsa, .ciphersuites = "TLS_AES_256_GCM_SHA384" }, .aes_256_gcm_sha384);
    try expectHandshake(.{ .cert = .ecdsa, .ciphersuites = "TLS_CHACHA20_POLY1305_SHA256" }, .chacha20_poly1305_sha256);
}

test "handshake: the client's default key-exchange groups" {
    try expectHandshake(.{ .groups = null }, .aes_128_gcm_sha256);
}

const MallInfo2 = extern struct { arena: usize, ordblks: usize, smblks: usize, hblks: usize, hblkhd: usize, usmblks: usize, fsmblks: usize, uordblks: usize, fordblks: usize, keepcost: usize };
extern "c" fn mallinfo2() MallInfo2;

/// Bytes malloc has handed out and not taken back (OpenSSL allocates with malloc too).
fn heapInUse() usize {
    const m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

test "the heap one handshake holds: peak while OpenSSL runs, and once done" {
    var p: Pair = undefined;
    try p.init(.{});
    defer p.deinit();
    // Our handshake on malloc, like OpenSSL, so that one counter sees both; the client's
    // ClientHello made first, so that only the server runs between the counts.
    p.hs.deinit();
    try p.client.step();
    const before = heapInUse();
    p.hs = tls.Handshake.init(std.heap.c_allocator, p.ctx, server_params) orelse return error.OutOfMemory;
    const at_init = heapInUse() -| before;
    _ = try p.client.flushTo(p.hs); // the ClientHello read, the server's flight written
    const first_flight = heapInUse() -| before;
    _ = try p.client.feedFrom(p.hs);
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    // Freed memory may stay counted (malloc's thread cache), so once done is counted
    // from what the Handshake owns rather than from malloc.
    try testing.expect(p.hs.ssl == null);
    const done = p.hs.heldBytes();
    std.debug.print("\nheap held by one handshake (OpenSSL's included, approximate): {d} bytes at init, " ++
        "{d} after the first flight; once done {d}\n", .{ at_init, first_flight, done });
    try testing.expect(first_flight > at_init);
    // Once done: the struct and both transport parameters.
    try testing.expect(done < 2048);
}

test "a session ticket from one handshake resumes the next (no Certificate the second time)" {
    const ctx = try serverContext(.rsa, false);
    defer openssl.freeContext(ctx);
    const f = openssl.functions();
    var first: Pair = undefined;
    try first.initOn(ctx, .{});
    defer first.deinit();
    try first.pump();
    try testing.expectEqual(tls.State.done, first.hs.state);
    try testing.expect(first.client.tickets_bytes > 0);
    const session = f.SSL_get1_session(first.client.ssl) orelse return error.NoSession;
    defer f.SSL_SESSION_free(session);

    var second: Pair = undefined;
    try second.initOn(ctx, .{ .session = session });
    defer second.deinit();
    try second.pump();
    try testing.expectEqual(tls.State.done, second.hs.state);
    try testing.expectEqual(@as(c_int, 1), f.SSL_session_reused(second.client.ssl));
    try testing.expect(second.client.handshake_bytes < first.client.handshake_bytes);
    try second.expectSameSecrets();
    try testing.expectEqualStrings(client_params, second.hs.peerTransportParams().?);
}

test "a required client certificate: Certificate, CertificateVerify and Finished from the client" {
    var p: Pair = undefined;
    try p.init(.{ .cert = .ecdsa, .client_cert = true });
    defer p.deinit();
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    try p.expectSameSecrets();
    // Without one, the server refuses (certificate_required, RFC 8446 4.4.2.4).
    var r: Pair = undefined;
    const ctx = try serverContext(.ecdsa, true);
    defer openssl.freeContext(ctx);
    try r.initOn(ctx, .{});
    defer r.deinit();
    try r.pump();
    try testing.expectEqual(tls.State.failed, r.hs.state);
    try testing.expectEqual(@as(u64, 0x100 + 116), r.hs.errorCode().?);
}

test "the summary the tls extension reads outlives the SSL object, and a resumption keeps it" {
    const ctx = try serverContext(.ecdsa, true);
    defer openssl.freeContext(ctx);
    const f = openssl.functions();
    var first: Pair = undefined;
    try first.initOn(ctx, .{ .client_cert = true });
    defer first.deinit();
    try first.pump();
    try testing.expectEqual(tls.State.done, first.hs.state);
    try testing.expect(first.hs.ssl == null);
    var kept = first.hs.takeSummary();
    defer kept.deinit(testing.allocator);
    try testing.expectEqual(@as(?u16, openssl.TLS1_3_VERSION), kept.version);
    try testing.expectEqual(@as(?u16, 0x1301), kept.cipher); // the server's first suite
    try testing.expectEqualStrings("localhost", kept.server_name.?);
    try testing.expect(kept.leaf != null);
    const view: openssl.SessionView = .{ .kept = &kept };
    try testing.expect(view.verifyError() == null);
    const leaf = view.peerCertificate().?;
    openssl.freeCertificate(leaf);
    // Taken: the handshake holds nothing more (its deinit frees an untaken one).
    try testing.expect(first.hs.takeSummary().version == null);

    const session = f.SSL_get1_session(first.client.ssl) orelse return error.NoSession;
    defer f.SSL_SESSION_free(session);
    var second: Pair = undefined;
    try second.initOn(ctx, .{ .session = session });
    defer second.deinit();
    try second.pump();
    try testing.expectEqual(@as(c_int, 1), f.SSL_session_reused(second.client.ssl));
    // No certificate this time (resumption asks for none): the session brought it.
    try testing.expect(second.hs.summary.leaf != null);
    try testing.expect(second.hs.summary.verify_result == 0);
}

test "HelloRetryRequest: the client's only key share is a group the server does not take" {
    // P-521 is not among the server's groups; X25519 is, so the server asks again.
    try expectHandshake(.{ .groups = "P-521:X25519" }, .aes_128_gcm_sha256);
    var p: Pair = undefined;
    try p.init(.{ .groups = "P-521:X25519" });
    defer p.deinit();
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    try testing.expectEqual(@as(usize, 2), p.client.server_hellos);
    try testing.expectEqualSlices(u8, &hrr_random, &p.client.first_server_hello.?);
}

fn expectFailure(opts: Options, code: u64) !void {
    var p: Pair = undefined;
    try p.init(opts);
    defer p.deinit();
    try p.pump();
    try testing.expectEqual(tls.State.failed, p.hs.state);
    try testing.expectEqual(code, p.hs.errorCode().?);
    try testing.expect(p.hs.ssl == null);
    try testing.expectEqual(@as(usize, 0), p.hs.output(.handshake).len);
    try testing.expectError(error.HandshakeFailed, p.hs.provide(.initial, "\x01"));
}

test "a ClientHello without quic_transport_parameters fails with missing_extension (0x16d)" {
    try expectFailure(.{ .send_params = false }, 0x16d);
}

test "no ALPN overlap fails with no_application_protocol (0x178)" {
    try expectFailure(.{ .alpn = "\x02h2\x08http/1.1" }, 0x178);
}

/// A fresh server handshake (no client).
fn lone() !struct { ctx: *openssl.SSL_CTX, hs: *tls.Handshake } {
    const ctx = try serverContext(.rsa, false);
    const hs = tls.Handshake.init(testing.allocator, ctx, server_params) orelse return error.OutOfMemory;
    return .{ .ctx = ctx, .hs = hs };
}

test "a ClientHello given a byte at a time, then the rest, still completes" {
    var p: Pair = undefined;
    try p.init(.{});
    defer p.deinit();
    try p.client.step();
    var buf: [4096]u8 = undefined;
    const n: usize = @intCast(openssl.functions().BIO_read(p.client.wbio, &buf, buf.len));
    const hello = buf[5..n]; // one plaintext record
    for (hello[0..10]) |b| {
        try p.hs.provide(.initial, &.{b});
        try testing.expectEqual(tls.State.running, p.hs.state);
        try testing.expectEqual(@as(usize, 0), p.hs.output(.initial).len);
    }
    try p.hs.provide(.initial, hello[10..]);
    try testing.expect(p.hs.output(.initial).len > 0);
    try testing.expect(p.hs.output(.handshake).len > 0);
    _ = try p.client.feedFrom(p.hs);
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    try p.expectSameSecrets();
}

test "garbage and truncated ClientHellos fail with a TLS alert, or wait for more" {
    const cases = [_]struct { []const u8, ?u64 }{
        // A Finished first: unexpected_message.
        .{ "\x14\x00\x00\x20" ++ "\x00" ** 32, 0x10a },
        // A ClientHello whose body is nonsense: decode_error.
        .{ "\x01\x00\x00\x06garbag", 0x132 },
        // A truncated ClientHello: nothing to say yet.
        .{ "\x01\x00\x01\x00\x03\x03", null },
    };
    for (cases) |case| {
        const l = try lone();
        defer openssl.freeContext(l.ctx);
        defer l.hs.deinit();
        if (case[1]) |code| {
            try testing.expectError(error.HandshakeFailed, l.hs.provide(.initial, case[0]));
            try testing.expectEqual(code, l.hs.errorCode().?);
        } else {
            try l.hs.provide(.initial, case[0]);
            try testing.expectEqual(tls.State.running, l.hs.state);
        }
        try testing.expectEqual(@as(usize, 0), l.hs.output(.initial).len);
    }
}

test "CRYPTO data past 64 KiB at a level fails with CRYPTO_BUFFER_EXCEEDED; up to it waits" {
    const l = try lone();
    defer openssl.freeContext(l.ctx);
    defer l.hs.deinit();
    // A ClientHello announcing 70,000 bytes (OpenSSL takes up to 128 KiB) fills the level.
    var chunk: [1024]u8 = [_]u8{0} ** 1024;
    chunk[0..4].* = .{ 1, 0x01, 0x11, 0x70 };
    var sent: usize = 0;
    while (sent < tls.in_max_bytes) : (sent += chunk.len) {
        try l.hs.provide(.initial, &chunk);
        chunk[0..4].* = .{ 0, 0, 0, 0 };
    }
    try testing.expectEqual(tls.State.running, l.hs.state);
    try testing.expectError(error.HandshakeFailed, l.hs.provide(.initial, "\x00"));
    try testing.expectEqual(tls.crypto_buffer_exceeded, l.hs.errorCode().?);
}

test "CRYPTO data at a level the client cannot have reached fails with unexpected_message" {
    for ([_]tls.Level{ .handshake, .application }) |level| {
        const l = try lone();
        defer openssl.freeContext(l.ctx);
        defer l.hs.deinit();
        try testing.expectError(error.HandshakeFailed, l.hs.provide(level, "\x14\x00\x00\x00"));
        try testing.expectEqual(@as(u64, 0x10a), l.hs.errorCode().?);
    }
}

test "nothing is accepted after the handshake is done" {
    var p: Pair = undefined;
    try p.init(.{});
    defer p.deinit();
    try p.pump();
    try testing.expectEqual(tls.State.done, p.hs.state);
    try testing.expectError(error.HandshakeFailed, p.hs.provide(.handshake, "\x14"));
    try testing.expectEqual(@as(u64, 0x10a), p.hs.errorCode().?);
}

test "a ClientHello without ALPN fails with no_application_protocol (0x178)" {
    try expectFailure(.{ .alpn = "" }, 0x178);
}

test "the shim's traffic secrets and its record key are zero when it is freed" {
    for ([_][:0]const u8{ "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384" }) |cs| {
        var p: Pair = undefined;
        try p.init(.{ .cert = .ecdsa, .ciphersuites = cs });
        defer p.deinit();
        // The same handshake, its shim on an allocator that checks what is given back.
        var scan: Scan = .{ .child = testing.allocator };
        p.hs.deinit();
        p.hs = tls.Handshake.init(scan.allocator(), p.ctx, server_params) orelse
            return error.OutOfMemory;
        try p.pump();
        try testing.expectEqual(tls.State.done, p.hs.state);
        try p.expectSameSecrets();
        var needles: [5][]const u8 = undefined;
        var n: usize = 0;
        for ([_]tls.Level{ .handshake, .application }) |level| for (0..2) |d| {
            needles[n] = p.client.secrets[@intFromEnum(level)][d].?.slice();
            n += 1;
        };
        const read = p.client.secrets[@intFromEnum(tls.Level.handshake)][0].?;
        const record_key = suite.Aead.init(&read, .tls_record);
        needles[n] = record_key.key[0..read.suite.keyLen()];
        scan.needles = &needles;
        // The check sees a secret left in a block.
        const probe = try scan.allocator().create([64]u8);
        @memcpy(probe[0..needles[3].len], needles[3]);
        scan.allocator().destroy(probe);
        try testing.expectEqual(@as(usize, 1), scan.hits);
        scan.hits = 0;
        // Given back zeroed (the Pair's deinit frees a fresh shim put in its place).
        const done = p.hs;
        p.hs = tls.Handshake.init(testing.allocator, p.ctx, server_params) orelse
            return error.OutOfMemory;
        done.deinit();
        try testing.expectEqual(@as(usize, 0), scan.hits);
    }
}
