//! The QUIC connection fuzzer's harness: one input is one connection's life. A server
//! `quic/connection.zig` Connection (with a counting allocator) completes a real handshake
//! against an OpenSSL client over memory BIOs (its TLS records turned into CRYPTO frames
//! in Initial and Handshake packets, and back), sending the client's transport parameters
//! the input gives; or, in the second mode, it is put in `established` with fixed 1-RTT
//! secrets and the input's parameters go through `conn_receive.applyParams`. Then the rest
//! of the input is a sequence of steps: frames built from the bytes and sealed as 1-RTT
//! packets, raw payloads, `send` drained, the client's ACK of what it got, time advanced
//! with `onTimeout`, the application's reads, writes, resets and closes, key updates, a
//! datagram from a new address, an allocation that fails.
//!
//! Checked after every step (a violation is `error.Invariant`, `last_failure` says which):
//! no panic (ReleaseSafe), at most `datagrams_per_drain_max` datagrams per drain and
//! `timeouts_per_instant_max` timer rounds at one instant (no spin), no deadline in the
//! past once `onTimeout` and `send` ran, every datagram of the server within its size and
//! each of its 1-RTT packets opening with the client's keys into frames that parse; after
//! the connection is freed, no allocation left (no leak).
//!
//! Input: byte 0 flags (bit 0: real handshake; bit 1: the client's parameters get its
//! initial_source_connection_id appended; bits 2-3: the configuration), byte 1 the length
//! of the client's transport parameters, those bytes, then the steps (`Op`).
const std = @import("std");
const openssl = @import("../transport/openssl.zig");
const tls_context = @import("../quic/tls_context.zig");
const tls = @import("../quic/tls.zig");
const suite = @import("../quic/suite.zig");
const connection = @import("../quic/connection.zig");
const conn_receive = @import("../quic/conn_receive.zig");
const conn_send = @import("../quic/conn_send.zig");
const frames = @import("../quic/frames.zig");
const packet = @import("../quic/packet.zig");
const protection = @import("../quic/protection.zig");
const transport_params = @import("../quic/transport_params.zig");
const varint = @import("../quic/varint.zig");
const support = @import("fuzz_support.zig");

const Connection = connection.Connection;
const SSL = openssl.SSL;
const BIO = openssl.BIO;
const Reader = support.Reader;

const odcid = "\x83\x94\xc8\xf0\x3e\x51\x57\x08";
const client_cid = "client01";
const our_cid = "server01";

pub const datagrams_per_drain_max = 256;
pub const timeouts_per_instant_max = 16;
pub const steps_max = 400;

/// Print what each input reached (ZIGCORN_FUZZ_VERBOSE=1).
pub var verbose = false;

/// Which way to `established`: as flag bit 0 says, or always one of them
/// (ZIGCORN_FUZZ_QUIC_MODE=real or skipped).
pub const Mode = enum { either, real, skipped };
pub var mode: Mode = .either;

/// What the last failed check found.
pub var last_failure: []const u8 = "";

fn fail(comptime why: []const u8) error{Invariant} {
    last_failure = why;
    return error.Invariant;
}

// ---- the process-wide contexts ---------------------------------------------------------

var server_ctx: ?*openssl.SSL_CTX = null;
var client_ctx: ?*openssl.SSL_CTX = null;

/// Loads OpenSSL and makes both contexts (the server's from the test certificate, written
/// to a temporary folder and removed). Once per process.
pub fn setup() !void {
    if (server_ctx != null) return;
    try openssl.load(openssl.default_library);
    var name_buf: [64]u8 = undefined;
    const pid = std.os.linux.getpid();
    const dir_path = try std.fmt.bufPrint(&name_buf, "/tmp/zigcorn-fuzz-quic-{d}", .{pid});
    var dir = try std.fs.cwd().makeOpenPath(dir_path, .{});
    defer {
        dir.close();
        std.fs.cwd().deleteTree(dir_path) catch |err|
            std.debug.print("fuzz: {s} left: {s}\n", .{ dir_path, @errorName(err) });
    }
    const cert = @embedFile("../quic/testdata/ecdsa_cert.pem");
    const key = @embedFile("../quic/testdata/ecdsa_key.pem");
    try dir.writeFile(.{ .sub_path = "c.pem", .data = cert });
    try dir.writeFile(.{ .sub_path = "k.pem", .data = key });
    var cb: [128]u8 = undefined;
    var kb: [128]u8 = undefined;
    var err: openssl.ContextError = .{};
    server_ctx = tls_context.newContext(.{
        .certfile = try std.fmt.bufPrintZ(&cb, "{s}/c.pem", .{dir_path}),
        .keyfile = try std.fmt.bufPrintZ(&kb, "{s}/k.pem", .{dir_path}),
        .password = null,
        .min_version = openssl.TLS1_3_VERSION,
        .max_version = openssl.TLS1_3_VERSION,
        .ciphers = null,
        .cert_reqs = 0,
        .ca_certs = null,
        .http2 = false,
    }, &err) orelse return error.ServerContext;

    const f = openssl.functions();
    const ctx = f.SSL_CTX_new(f.TLS_client_method()) orelse return error.ClientContext;
    _ = f.SSL_CTX_clear_options(ctx, 1 << 20); // no middlebox compatibility: no CCS
    if (f.SSL_CTX_ctrl(ctx, 123, openssl.TLS1_3_VERSION, null) != 1) return error.ClientContext;
    f.SSL_CTX_set_keylog_callback(ctx, clientKeylog);
    const ext_context = 0x0080 | 0x0400; // ClientHello, EncryptedExtensions
    const added = f.SSL_CTX_add_custom_ext(
        ctx,
        0x39,
        ext_context,
        paramsAdd,
        null,
        null,
        paramsParse,
        null,
    );
    if (added != 1) return error.ClientContext;
    client_ctx = ctx;
}

// ---- the client ----------------------------------------------------------------------------

const levels = 3;

/// One level's CRYPTO bytes from the server, in order as far as they arrived.
const CryptoIn = struct {
    buf: [16 * 1024]u8 = undefined,
    len: usize = 0,
    fed: usize = 0,

    fn add(ci: *CryptoIn, offset: u64, data: []const u8) void {
        if (offset > ci.len) return; // a gap: the server sends it again
        const end = offset + data.len;
        if (end <= ci.len or end > ci.buf.len) return;
        const skip: usize = @intCast(ci.len - offset);
        @memcpy(ci.buf[ci.len..@intCast(end)], data[skip..]);
        ci.len = @intCast(end);
    }
};

const Client = struct {
    ssl: ?*SSL = null,
    rbio: ?*BIO = null,
    wbio: ?*BIO = null,
    params: [512]u8 = undefined,
    params_len: usize = 0,
    /// [level][0: the client's, 1: the server's]
    secrets: [levels][2]?suite.Secret = .{ .{ null, null }, .{ null, null }, .{ null, null } },
    seq_to_client: [levels]u64 = .{ 0, 0, 0 },
    seq_from_client: [levels]u64 = .{ 0, 0, 0 },
    crypto_in: [levels]CryptoIn = .{ .{}, .{}, .{} },
    /// The client's CRYPTO bytes to send, per level, and the offset reached.
    crypto_out: [levels][4096]u8 = undefined,
    crypto_out_len: [levels]usize = .{ 0, 0, 0 },
    crypto_out_offset: [levels]u64 = .{ 0, 0, 0 },
    pn: [levels]u64 = .{ 0, 0, 0 },
    failed: bool = false,

    fn start(c: *Client) !void {
        const f = openssl.functions();
        const ssl = f.SSL_new(client_ctx.?) orelse return error.OpenSsl;
        c.ssl = ssl;
        const rbio = f.BIO_new(f.BIO_s_mem()) orelse return error.OpenSsl;
        const wbio = f.BIO_new(f.BIO_s_mem()) orelse {
            _ = f.BIO_free(rbio);
            return error.OpenSsl;
        };
        f.SSL_set_bio(ssl, rbio, wbio);
        c.rbio = rbio;
        c.wbio = wbio;
        if (f.SSL_set_ciphersuites(ssl, "TLS_AES_128_GCM_SHA256") != 1) return error.OpenSsl;
        if (f.SSL_ctrl(ssl, 92, 0, @constCast("X25519".ptr)) != 1) return error.OpenSsl;
        if (f.SSL_set_alpn_protos(ssl, "\x02h3", 3) != 0) return error.OpenSsl;
        if (f.SSL_ctrl(ssl, 55, 0, @constCast("localhost".ptr)) != 1) return error.OpenSsl;
        f.SSL_set_connect_state(ssl);
        if (f.SSL_set_ex_data(ssl, 0, c) != 1) return error.OpenSsl;
    }

    fn deinit(c: *Client) void {
        const f = openssl.functions();
        if (c.ssl) |ssl| f.SSL_free(ssl);
        c.ssl = null;
        f.ERR_clear_error();
    }

    fn done(c: *const Client) bool {
        return c.ssl != null and openssl.handshakeDone(c.ssl.?);
    }

    /// Runs the client's handshake (or reads, once done: tickets) as far as it can.
    fn step(c: *Client) void {
        const f = openssl.functions();
        const ssl = c.ssl orelse return;
        if (openssl.handshakeDone(ssl)) {
            var buf: [64]u8 = undefined;
            const rc = f.SSL_read(ssl, &buf, buf.len);
            if (rc > 0 or f.SSL_get_error(ssl, rc) != 2) c.failed = true;
            return;
        }
        const rc = f.SSL_do_handshake(ssl);
        if (rc != 1 and f.SSL_get_error(ssl, rc) != 2) c.failed = true;
    }

    /// The client's records, unwrapped into CRYPTO bytes per level.
    fn collect(c: *Client) void {
        const f = openssl.functions();
        var buf: [8 * 1024]u8 = undefined;
        const n = f.BIO_read(c.wbio.?, &buf, buf.len);
        if (n <= 0) return;
        var rest = buf[0..@intCast(n)];
        while (rest.len >= 5) {
            const len = std.mem.readInt(u16, rest[3..5], .big);
            if (rest.len < 5 + len) break;
            const record = rest[0 .. 5 + len];
            rest = rest[5 + len ..];
            switch (record[0]) {
                22 => c.queue(0, record[5..]),
                23 => if (c.openRecord(1, record)) |plain| c.queue(1, plain),
                else => c.failed = true,
            }
        }
    }

    fn queue(c: *Client, level: usize, bytes: []const u8) void {
        const room = c.crypto_out[level].len - c.crypto_out_len[level];
        if (bytes.len > room) {
            c.failed = true;
            return;
        }
        @memcpy(c.crypto_out[level][c.crypto_out_len[level]..][0..bytes.len], bytes);
        c.crypto_out_len[level] += bytes.len;
    }

    fn openRecord(c: *Client, level: usize, record: []u8) ?[]u8 {
        const s = c.secrets[level][0] orelse return null;
        const aead = suite.Aead.init(&s, .tls_record);
        if (record.len < 5 + 1 + suite.tag_len) return null;
        const body = record[5 .. record.len - suite.tag_len];
        const tag = record[record.len - suite.tag_len ..][0..suite.tag_len].*;
        aead.open(body, body, tag, record[0..5], c.seq_from_client[level]) catch return null;
        c.seq_from_client[level] += 1;
        var end = body.len;
        while (end > 0 and body[end - 1] == 0) end -= 1;
        if (end == 0 or body[end - 1] != 22) return null;
        return body[0 .. end - 1];
    }

    /// What arrived of the server's CRYPTO at `level`, as records to OpenSSL.
    fn feed(c: *Client, level: usize) void {
        const f = openssl.functions();
        const ci = &c.crypto_in[level];
        if (c.ssl == null or ci.fed == ci.len) return;
        if (level != 0 and c.secrets[level][1] == null) return;
        var rest = ci.buf[ci.fed..ci.len];
        while (rest.len > 0) {
            const n = @min(rest.len, tls.record_plaintext_max);
            var record: [tls.record_max_bytes]u8 = undefined;
            const len = if (level == 0) tls.sealPlain(&record, rest[0..n]) else blk: {
                const aead = suite.Aead.init(&c.secrets[level][1].?, .tls_record);
                defer c.seq_to_client[level] += 1;
                break :blk tls.sealRecord(&record, &aead, c.seq_to_client[level], rest[0..n]);
            };
            if (f.BIO_write(c.rbio.?, &record, @intCast(len)) != len) c.failed = true;
            rest = rest[n..];
        }
        ci.fed = ci.len;
        c.step();
    }
};

fn clientOf(ssl: *const SSL) *Client {
    return @ptrCast(@alignCast(openssl.functions().SSL_get_ex_data(ssl, 0).?));
}

fn clientKeylog(ssl: *const SSL, line: [*:0]const u8) callconv(.c) void {
    const c = clientOf(ssl);
    var it = std.mem.splitScalar(u8, std.mem.span(line), ' ');
    const label = it.next() orelse return;
    _ = it.next();
    const hex = it.next() orelse return;
    const slots = [_]struct { []const u8, usize, usize }{
        .{ "CLIENT_HANDSHAKE_TRAFFIC_SECRET", 1, 0 }, .{ "SERVER_HANDSHAKE_TRAFFIC_SECRET", 1, 1 },
        .{ "CLIENT_TRAFFIC_SECRET_0", 2, 0 },         .{ "SERVER_TRAFFIC_SECRET_0", 2, 1 },
    };
    for (slots) |slot| if (std.mem.eql(u8, label, slot[0])) {
        const s = tls.negotiatedSuite(ssl) orelse return;
        var bytes: [48]u8 = undefined;
        const raw = std.fmt.hexToBytes(&bytes, hex) catch return;
        if (raw.len != s.secretLen()) return;
        c.secrets[slot[1]][slot[2]] = suite.Secret.init(s, raw);
    };
}

fn paramsAdd(
    ssl: *SSL,
    _: c_uint,
    _: c_uint,
    out: *?[*]const u8,
    outlen: *usize,
    _: ?*openssl.X509,
    _: usize,
    _: *c_int,
    _: ?*anyopaque,
) callconv(.c) c_int {
    const c = clientOf(ssl);
    out.* = &c.params;
    outlen.* = c.params_len;
    return 1;
}

fn paramsParse(
    _: *SSL,
    _: c_uint,
    _: c_uint,
    _: [*]const u8,
    _: usize,
    _: ?*openssl.X509,
    _: usize,
    _: *c_int,
    _: ?*anyopaque,
) callconv(.c) c_int {
    return 1;
}

// ---- the harness ---------------------------------------------------------------------------

const configs = [4]connection.Config{
    .{},
    .{ .congestion_algorithm = .cubic, .max_datagram_bytes = 1452 },
    .{ .initial_max_streams_bidi = 2, .initial_max_stream_data = 1024, .initial_max_data = 4096 },
    .{ .max_idle_timeout_ms = 0, .initial_max_streams_uni = 1 },
};

pub const H = struct {
    counting: support.Counting = .{},
    config: connection.Config = .{},
    c: *Connection = undefined,
    client: Client = .{},
    client_initial: protection.Keys = undefined,
    server_initial: protection.Keys = undefined,
    one_rtt: ?protection.OneRtt = null,
    now_us: u64 = 1_000_000,
    /// The largest 1-RTT packet number of the server's the client opened.
    server_largest: ?u64 = null,
    buf: [2048]u8 = undefined,
    out: [65536]u8 = undefined,

    fn deinitOneRtt(h: *H) void {
        if (h.one_rtt) |*k| k.deinit(h.counting.allocator());
        h.one_rtt = null;
    }

    // ---- packets from the client --------------------------------------------------------

    /// A long header packet at `level` (0 Initial, 1 Handshake) with `payload`; an
    /// Initial is padded to 1200 bytes.
    fn longPacket(h: *H, level: usize, payload: []const u8, keys: *const protection.Keys) ![]u8 {
        var body: [1400]u8 = undefined;
        if (payload.len > 1100) return error.TooLong;
        @memcpy(body[0..payload.len], payload);
        var len = payload.len;
        const min: usize = if (level == 0) 1100 else 24;
        if (len < min) {
            @memset(body[len..min], 0);
            len = min;
        }
        const pn = h.client.pn[level];
        h.client.pn[level] += 1;
        const t: packet.LongType = if (level == 0) .initial else .handshake;
        const dcid: []const u8 = if (level == 0) odcid else our_cid;
        const header: packet.LongHeader = .{
            .long_type = t,
            .dcid = dcid,
            .scid = client_cid,
            .pn = pn,
            .pn_len = 4,
        };
        const built = try packet.writeLongHeader(&h.buf, header, len, protection.tag_len);
        @memcpy(h.buf[built.header_len..][0..len], body[0..len]);
        const total = built.header_len + len + protection.tag_len;
        protection.protect(keys, h.buf[0..total], built.pn_offset, pn);
        return h.buf[0..total];
    }

    /// The client's queued CRYPTO bytes, in packets to the server.
    fn sendClientCrypto(h: *H) !void {
        for (0..2) |level| {
            while (h.client.crypto_out_len[level] > 0) {
                const keys = if (level == 0) h.client_initial else blk: {
                    const secret = h.client.secrets[1][0] orelse return;
                    break :blk protection.Keys.init(&secret);
                };
                const q = h.client.crypto_out[level][0..h.client.crypto_out_len[level]];
                const n = @min(q.len, 1000);
                var payload: [1100]u8 = undefined;
                var w: varint.Writer = .{ .buf = &payload };
                const offset = h.client.crypto_out_offset[level];
                const wrote = try frames.writeCrypto(&w, offset, q[0..n]);
                h.client.crypto_out_offset[level] += wrote;
                std.mem.copyForwards(u8, q[0 .. q.len - wrote], q[wrote..]);
                h.client.crypto_out_len[level] -= wrote;
                const d = try h.longPacket(level, w.written(), &keys);
                h.c.receive(d, h.now_us);
            }
        }
    }

    /// A 1-RTT packet with `payload` (padded to open), received from the current address
    /// or, with `other`, from a new one.
    pub fn oneRtt(h: *H, payload: []const u8, corrupt: ?u8, other: bool) !void {
        const k = &(h.one_rtt orelse return);
        var body: [1400]u8 = undefined;
        const n = @min(payload.len, 1200);
        @memcpy(body[0..n], payload[0..n]);
        var len = n;
        if (len < 4) {
            @memset(body[len..4], 0);
            len = 4;
        }
        const pn = h.client.pn[2];
        h.client.pn[2] += 1;
        const built = try packet.writeShortHeader(&h.buf, our_cid, pn, 4, k.tx_phase, false);
        @memcpy(h.buf[built.header_len..][0..len], body[0..len]);
        const total = built.header_len + len + protection.tag_len;
        k.protect(h.buf[0..total], built.pn_offset, pn);
        if (corrupt) |at| h.buf[at % total] ^= 0x40;
        if (other) {
            if (h.c.receiveFromNewAddress(h.buf[0..total], h.now_us)) {
                h.c.startPathValidation(h.now_us, total, pn & 1 == 0) catch |err| switch (err) {
                    error.OutOfMemory => {},
                };
            }
        } else h.c.receive(h.buf[0..total], h.now_us);
    }

    // ---- what the server sends ------------------------------------------------------------

    /// The server's datagrams until it has none (bounded), each opened as far as the
    /// client has keys: CRYPTO to the client, the largest 1-RTT packet number noted.
    pub fn drain(h: *H) !void {
        var n: usize = 0;
        while (true) : (n += 1) {
            if (n >= datagrams_per_drain_max)
                return fail("the server sent without end (a drain past its bound)");
            const len = h.c.send(&h.out, h.now_us);
            if (len == 0) return;
            if (len > h.out.len) return fail("send returned more than the buffer");
            // Path MTU probes and what they confirm stay within the search's ceiling.
            if (len > @max(h.c.pmtu.max, h.config.max_datagram_bytes))
                return fail("a datagram past the path MTU ceiling");
            try h.readServer(h.out[0..len]);
        }
    }

    fn readServer(h: *H, datagram: []u8) !void {
        var rest = datagram;
        while (rest.len > 0) {
            // The server writes the client's connection ID it uses now: one the client
            // issued in NEW_CONNECTION_ID may have another length than the first.
            const hd = packet.parse(rest, h.c.peer_cid.slice().len) catch
                return fail("the server's packet does not parse");
            const bytes = rest[0..hd.len];
            rest = rest[hd.len..];
            switch (hd.kind) {
                .initial, .handshake => {
                    const level: usize = if (hd.kind == .initial) 0 else 1;
                    const keys = if (level == 0) h.server_initial else blk: {
                        const secret = h.client.secrets[1][1] orelse continue;
                        break :blk protection.Keys.init(&secret);
                    };
                    const o = protection.unprotect(&keys, bytes, hd.pn_offset, null) catch
                        return fail("the server's long header packet does not open");
                    try h.readFrames(o.payload, hd.kind, level);
                },
                .one_rtt => {
                    const k = &(h.one_rtt orelse continue);
                    const largest = h.server_largest;
                    const at = hd.pn_offset;
                    const hdr = protection.unprotectHeader(&k.hp_rx, bytes, at, largest) catch
                        return fail("the server's 1-RTT header does not open");
                    const a = h.counting.allocator();
                    const payload = k.open(a, bytes, &hdr) catch |err| switch (err) {
                        error.OutOfMemory => continue,
                        else => return fail("the server's 1-RTT packet does not open"),
                    };
                    h.server_largest = @max(h.server_largest orelse 0, hdr.pn);
                    try h.readFrames(payload, .one_rtt, 2);
                },
                else => return fail("the server sent a packet of another kind"),
            }
        }
    }

    fn readFrames(h: *H, payload: []const u8, kind: packet.Kind, level: usize) !void {
        var it = frames.Iterator.init(payload, kind, .server);
        while (true) {
            const next = it.next() catch return fail("the server's frames do not parse");
            const f = next orelse break;
            switch (f) {
                .crypto => |cf| {
                    h.client.crypto_in[level].add(cf.offset, cf.data);
                    h.client.feed(level);
                },
                else => {},
            }
        }
    }

    // ---- the two ways to an established connection ---------------------------------------

    fn handshake(h: *H) !void {
        try h.client.start();
        h.client.step();
        var round: usize = 0;
        while (round < 8) : (round += 1) {
            h.takeOneRttKeys();
            h.client.collect();
            try h.sendClientCrypto();
            try h.drain();
            if (h.client.failed or h.c.state != .handshaking) break;
            if (h.client.crypto_out_len[0] == 0 and h.client.crypto_out_len[1] == 0) {
                h.client.collect();
                if (h.client.crypto_out_len[0] == 0 and h.client.crypto_out_len[1] == 0) break;
            }
        }
        h.takeOneRttKeys();
    }

    fn takeOneRttKeys(h: *H) void {
        if (h.one_rtt != null) return;
        if (h.client.secrets[2][0]) |tx| if (h.client.secrets[2][1]) |rx| {
            h.one_rtt = protection.OneRtt.init(&rx, &tx);
        };
    }

    fn establish(h: *H, params: []const u8) void {
        const a = h.counting.allocator();
        const client_secret = suite.Secret.init(.aes_128_gcm_sha256, &([_]u8{1} ** 32));
        const server_secret = suite.Secret.init(.aes_128_gcm_sha256, &([_]u8{2} ** 32));
        const k = a.create(protection.OneRtt) catch return;
        k.* = protection.OneRtt.init(&client_secret, &server_secret);
        h.c.one_rtt = k;
        h.one_rtt = protection.OneRtt.init(&server_secret, &client_secret);
        h.c.freeHandshake();
        h.c.state = .established;
        h.c.address_validated = true;
        h.c.recovery.onHandshakeConfirmed();
        h.c.handshake_done_event = true;
        const p = transport_params.decodeClient(params) catch return;
        conn_receive.applyParams(h.c, &p);
    }

    // ---- the steps ----------------------------------------------------------------------

    /// Which timer the next deadline is (ZIGCORN_FUZZ_VERBOSE).
    fn explainDeadline(h: *H) void {
        const c = h.c;
        const path_deadline = if (c.path_check) |k| k.deadline() else null;
        const allowance = if (c.path_check) |k| k.allowance() else null;
        std.debug.print("fuzz: now {d} state {}: idle {d}, handshake {d}, recovery {?d}, ", .{
            h.now_us,                  c.state,
            c.idle_deadline_us,        c.handshake_deadline_us,
            c.recovery.nextDeadline(),
        });
        std.debug.print("path {?d}, paced {?d}, pto_count {d}, probe {?}, path allowance {?d}\n", .{
            path_deadline, conn_send.pacedDeadline(c), c.recovery.pto_count, c.probe, allowance,
        });
    }

    fn checkDeadline(h: *H) !void {
        const d = h.c.nextDeadline() orelse return;
        if (d > h.now_us) return;
        return fail("a deadline not after now once onTimeout and send ran");
    }

    /// Time moves by an amount the input picks; due timers fire, the server sends.
    pub fn advance(h: *H, r: *Reader) !void {
        const sel = r.byte();
        const step: u64 = switch (sel >> 6) {
            0 => @as(u64, sel & 0x3f) * 100,
            1 => @as(u64, sel & 0x3f) * 10_000,
            2 => @as(u64, sel & 0x3f) * 1_000_000,
            else => if (h.c.nextDeadline()) |d| d -| h.now_us else 0,
        };
        h.now_us +|= step;
        try h.fireTimers();
    }

    pub fn fireTimers(h: *H) !void {
        var rounds: usize = 0;
        while (h.c.nextDeadline()) |d| {
            if (d > h.now_us) break;
            rounds += 1;
            if (rounds > timeouts_per_instant_max) {
                if (verbose) h.explainDeadline();
                return fail("timers fire without end at one instant (spin)");
            }
            h.c.onTimeout(h.now_us);
            try h.drain();
        }
        try h.checkDeadline();
    }

    /// The client's ACK of every 1-RTT packet of the server's it opened.
    pub fn ackAll(h: *H, r: *Reader) !void {
        const largest = h.server_largest orelse return;
        var payload: [64]u8 = undefined;
        var w: varint.Writer = .{ .buf = &payload };
        const first = if (r.boolean()) largest else @min(largest, r.byte());
        const range: frames.AckRange = .{ .smallest = largest - first, .largest = largest };
        try frames.writeAck(&w, &.{range}, r.byte(), 3, null);
        try h.oneRtt(w.written(), null, false);
    }

    fn app(h: *H, r: *Reader) !void {
        const c = h.c;
        const what = r.byte();
        const id = streamId(r);
        switch (what % 8) {
            0, 1 => {
                var events: usize = 0;
                while (c.nextEvent()) |ev| : (events += 1) {
                    if (events > 4096) return fail("nextEvent without end");
                    switch (ev) {
                        .readable => |sid| {
                            var buf: [4096]u8 = undefined;
                            const want = @min(buf.len, @as(usize, r.byte()) * 32 + 1);
                            _ = c.streamRead(sid, buf[0..want]) catch |err| switch (err) {
                                error.UnknownStream, error.StreamClosed, error.StreamLimit => {},
                            };
                        },
                        else => {},
                    }
                }
            },
            2 => {
                const filler = [_]u8{'z'} ** 4096;
                const n = @min(filler.len, @as(usize, r.byte()) * 24);
                _ = c.streamWrite(id, filler[0..n], r.boolean()) catch |err| switch (err) {
                    error.UnknownStream, error.StreamClosed, error.StreamLimit => {},
                };
            },
            3 => c.streamReset(id, r.value()),
            4 => c.streamStopSending(id, r.value()),
            5 => if (c.openUni()) |uid| {
                _ = c.streamWrite(uid, "\x00\x04\x00", false) catch |err| switch (err) {
                    error.UnknownStream, error.StreamClosed, error.StreamLimit => {},
                };
            } else |err| switch (err) {
                error.UnknownStream, error.StreamClosed, error.StreamLimit => {},
            },
            6 => if (r.boolean())
                c.closeApplication(r.value(), "fuzz")
            else
                c.closeApplicationWhenSent(r.value()),
            else => if (h.c.path_check != null) h.c.endPathValidation(),
        }
    }

    fn run(h: *H, r: *Reader) !void {
        var steps: usize = 0;
        while (!r.done() and steps < steps_max) : (steps += 1) {
            const op = r.byte();
            switch (op % 12) {
                0, 1, 2 => {
                    var payload: [1200]u8 = undefined;
                    var w: varint.Writer = .{ .buf = &payload };
                    const count = 1 + op / 12 % 6;
                    for (0..count) |_| writeFrame(&w, r) catch break;
                    try h.oneRtt(w.written(), null, false);
                },
                3 => try h.oneRtt(r.take(r.byte()), null, false),
                4 => try h.drain(),
                5 => try h.ackAll(r),
                6 => try h.advance(r),
                7 => try h.app(r),
                8 => if (h.one_rtt) |*k| {
                    k.initiate() catch |err| switch (err) {
                        error.UpdateInProgress => {},
                    };
                },
                9 => {
                    var payload: [256]u8 = undefined;
                    var w: varint.Writer = .{ .buf = &payload };
                    writeFrame(&w, r) catch |err| switch (err) {
                        error.NoSpace => {},
                    };
                    const corrupt: ?u8 = if (op & 0x80 != 0) r.byte() else null;
                    try h.oneRtt(w.written(), corrupt, op & 0x40 != 0);
                },
                10 => h.client.pn[2] +|= r.value() & 0xffff,
                else => h.counting.arm(1 + r.byte() % 32),
            }
            try h.fireTimers();
        }
        h.counting.arm(0);
    }
};

/// A stream ID: mostly small ones of each kind, now and then any varint.
fn streamId(r: *Reader) u64 {
    const b = r.byte();
    if (b == 0xff) return r.value();
    return @as(u64, b >> 2) * 4 + (b & 3);
}

/// One frame from the input: its type, then fields of that type's shape.
fn writeFrame(w: *varint.Writer, r: *Reader) error{NoSpace}!void {
    const t = r.byte();
    const ty: u64 = t % 0x21;
    switch (ty) {
        0x00 => try frames.writePadding(w, 1 + r.byte() % 32),
        0x01, 0x1e => try w.varint(ty),
        0x02, 0x03 => {
            try w.varint(ty);
            const largest = r.value();
            try w.varint(largest);
            try w.varint(r.value());
            const ranges = r.byte() % 4;
            try w.varint(ranges);
            try w.varint(@min(largest, r.value()));
            for (0..ranges) |_| {
                try w.varint(r.byte());
                try w.varint(r.byte());
            }
            if (ty == 0x03) for (0..3) |_| try w.varint(r.value());
        },
        0x04 => {
            try w.varint(ty);
            try w.varint(streamId(r));
            try w.varint(r.value());
            try w.varint(r.value());
        },
        0x05, 0x11, 0x15 => {
            try w.varint(ty);
            try w.varint(streamId(r));
            try w.varint(r.value());
        },
        0x06 => {
            try w.varint(ty);
            try w.varint(r.value());
            try dataField(w, r);
        },
        0x07 => {
            try w.varint(ty);
            try dataField(w, r);
        },
        0x08...0x0f => {
            // Always with a Length: the frames after it stay frames.
            try w.varint(ty | 0x02);
            try w.varint(streamId(r));
            if (ty & 0x04 != 0) try w.varint(r.value() & 0xfffff);
            try dataField(w, r);
        },
        0x10, 0x12, 0x13, 0x14, 0x16, 0x17, 0x19 => {
            try w.varint(ty);
            try w.varint(r.value());
        },
        0x18 => {
            try w.varint(ty);
            const seq = r.value();
            try w.varint(seq);
            try w.varint(@min(seq, r.value()));
            // The client's own IDs have its one length (it parses its short headers by it,
            // as the harness does); 0 and 21 are the lengths the frame may not have.
            const n: u8 = switch (r.byte() % 8) {
                0 => 0,
                1 => 21,
                else => client_cid.len,
            };
            try w.byte(n);
            for (0..n + 16) |_| try w.byte(r.byte());
        },
        0x1a, 0x1b => {
            try w.varint(ty);
            for (0..8) |_| try w.byte(r.byte());
        },
        0x1c, 0x1d => {
            try w.varint(ty);
            try w.varint(r.value());
            if (ty == 0x1c) try w.varint(r.value());
            try dataField(w, r);
        },
        else => try w.varint(r.value()), // any type number, unknown ones included
    }
}

fn dataField(w: *varint.Writer, r: *Reader) error{NoSpace}!void {
    const n = @as(usize, r.byte()) * 4;
    try w.varint(n);
    const got = r.take(n);
    try w.bytes(got);
    for (got.len..n) |i| try w.byte(@truncate(i));
}

/// The harness still completes a real handshake (its first seed does): a harness that
/// cannot would fuzz nothing past the first Initial. Run before fuzzing starts.
pub fn selfCheck() !void {
    const saved_mode = mode;
    const saved_verbose = verbose;
    defer {
        mode = saved_mode;
        verbose = saved_verbose;
    }
    mode = .real;
    verbose = false;
    reached = null;
    try checkOne(seeds[0]);
    if (reached != .established) return error.HandshakeNotCompleted;
}

/// The state the last input's connection reached after the handshake.
pub var reached: ?connection.State = null;

/// One input, one connection (see the file's comment). Errors: `error.Invariant` (see
/// `last_failure`); anything else is the harness's own trouble (no memory, OpenSSL).
pub fn checkOne(input: []const u8) !void {
    var r: Reader = .{ .bytes = input };
    const h = try std.heap.page_allocator.create(H);
    defer std.heap.page_allocator.destroy(h);
    const real = try open(h, &r);
    const state_after_handshake = h.c.state;
    const run_result = h.run(&r);
    if (verbose) {
        std.debug.print("fuzz: {s} handshake: {s}, client done {}, 1-RTT keys {}; ", .{
            if (real) "real" else "skipped", @tagName(state_after_handshake),
            h.client.done(),                 h.one_rtt != null,
        });
        std.debug.print("at the end {s} (0x{x}), server's largest {?d}, {d} B live\n", .{
            @tagName(h.c.state), h.c.closed_code, h.server_largest, h.counting.live_bytes,
        });
    }
    try close(h, run_result);
}

/// The harness's connection, for other harnesses (the HTTP/3 session fuzzer's real
/// transport): `open`, then frames with `oneRtt`, `drain`, `fireTimers`, `ackAll`,
/// `advance`, then `close`.
pub const Conn = H;

/// Opens `h`'s connection from the input's first bytes (flags, the length of the client's
/// transport parameters, those bytes; see the file's comment) and takes it to
/// `established`, by a real handshake or by `establish` (`applyParams`), as `mode` and the
/// flags say. Returns whether the handshake was real. On an error nothing is left open;
/// otherwise `close` ends it.
pub fn open(h: *H, r: *Reader) !bool {
    try setup();
    const flags = r.byte();
    const real = switch (mode) {
        .either => flags & 1 != 0,
        .real => true,
        .skipped => false,
    };
    h.* = .{ .config = configs[(flags >> 2) & 3] };
    const plen = r.byte();
    const given = r.take(plen);
    @memcpy(h.client.params[0..given.len], given);
    h.client.params_len = given.len;
    if (flags & 2 != 0) {
        var w: varint.Writer = .{ .buf = h.client.params[given.len..] };
        w.varint(@intFromEnum(transport_params.Id.initial_source_connection_id)) catch unreachable;
        w.varint(client_cid.len) catch unreachable;
        w.bytes(client_cid) catch unreachable;
        h.client.params_len += w.pos;
    }
    const keys = protection.initialKeys(odcid);
    h.client_initial = keys.client;
    h.server_initial = keys.server;

    const a = h.counting.allocator();
    const token = [_]u8{7} ** 16;
    const ctx = server_ctx.?;
    const now = h.now_us;
    h.c = Connection.init(a, &h.config, token, ctx, odcid, client_cid, our_cid, now, null) orelse
        return error.OutOfMemory;
    if (real) {
        h.handshake() catch |err| {
            try close(h, err);
            unreachable;
        };
    } else h.establish(h.client.params[0..h.client.params_len]);
    reached = h.c.state;
    return real;
}

/// Frees `h`'s connection and its client; returns `result`, or else a leak as
/// `error.Invariant`.
pub fn close(h: *H, result: anyerror!void) !void {
    h.counting.arm(0);
    h.deinitOneRtt();
    h.client.deinit();
    h.c.deinit();
    try result;
    if (h.counting.live != 0) return fail("memory left allocated after deinit (a leak)");
}

// ---- seeds ---------------------------------------------------------------------------------

/// Client transport parameters: every integer one as an 8-byte varint (so a mutated high
/// byte reaches the largest values), then a reset-token-free tail.
pub const seed_params = "\x01\x08\xc0\x00\x00\x00\x00\x00\x75\x30" ++ // max_idle_timeout 30000
    "\x04\x08\xc0\x00\x00\x00\x00\x10\x00\x00" ++ // initial_max_data
    "\x05\x04\x80\x01\x00\x00" ++ // initial_max_stream_data_bidi_local
    "\x06\x04\x80\x01\x00\x00" ++ "\x07\x04\x80\x01\x00\x00" ++
    "\x08\x02\x40\x64" ++ "\x09\x01\x03" ++ "\x0a\x01\x03" ++ "\x0b\x01\x19" ++
    "\x03\x02\x45\xc0" ++ "\x0e\x01\x04";

fn seed(comptime flags: u8, comptime params: []const u8, comptime steps: []const u8) []const u8 {
    return [_]u8{ flags, params.len } ++ params ++ steps;
}

/// A request on stream 0 (a STREAM frame with FIN), the server's answer, ACKs, timers.
const steps_request = "\x00\x09\x00\x03" ++ "abcdefghijkl" ++ "\x04" ++ "\x07\x00\x00" ++
    "\x07\x02\x00\x10\x01" ++ "\x04\x05\x01\x00" ++ "\x06\x50" ++ "\x06\xc0";

pub const seeds = [_][]const u8{
    seed(0x03, seed_params, steps_request),
    seed(0x02, seed_params, steps_request),
    seed(0x07, seed_params, "\x04\x06\x8a\x06\xc0\x06\xc0\x06\xc0"),
    seed(0x0b, seed_params, "\x00\x1a\x01\x02\x03\x04\x05\x06\x07\x08\x04\x09\x40\x00\x00\x04"),
    seed(0x02, seed_params, "\x08\x00\x01\x04\x05\x00\x0b\x03\x00\x01\x04"),
    seed(0x03, "", "\x04"),
    seed(0x01, seed_params, "\x04"),
};

test "fuzz: quic_conn: a real handshake completes; the seeds and the committed corpus run clean" {
    try selfCheck();
    for (seeds) |input| try checkOne(input);
    const dir = "src/zig/testing/fuzz_corpus/quic_conn";
    const n = try support.runCorpus(dir, checkOne, &last_failure);
    try std.testing.expect(n >= seeds.len);
}
