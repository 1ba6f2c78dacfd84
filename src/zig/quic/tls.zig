//! The server's TLS 1.3 handshake for one QUIC connection (RFC 9001 4), sans-IO: CRYPTO
//! bytes in per encryption level, CRYPTO bytes out per level, traffic secrets as they appear.
//!
//! OpenSSL 3.0 has no QUIC API, so this is a shim around its TLS 1.3 state machine that uses
//! only public API present in 3.0 (the idea of nginx's compatibility layer; our own code):
//! - The client's CRYPTO bytes become TLS records written into a memory BIO that OpenSSL
//!   reads: plaintext handshake records at the Initial level; at the Handshake level records
//!   sealed with the client's handshake traffic key (labels "key"/"iv", sequence numbers from
//!   0, `suite.Aead` with `.tls_record`), which OpenSSL opens with the same key.
//! - OpenSSL's own records go to a null BIO; our output is the plaintext of each handshake
//!   message it writes, from the message callback, put at a level by its type.
//! - The secrets come from the keylog callback, the suite from the negotiated cipher.
//! - quic_transport_parameters (0x39) is a custom extension: ClientHello in, EncryptedExtensions
//!   out. ALPN must pick "h3"; a ClientHello without either fails (client hello callback).
//! - A fatal alert OpenSSL writes becomes CRYPTO_ERROR 0x100 + alert (RFC 9001 4.8).
//!
//! What the shim relies on in OpenSSL (checked by tls_tests.zig on the OpenSSL it runs with):
//! - the message callback is called once per whole handshake message written (type, 24-bit
//!   length, body), with `write_p` 1 and content type 22, before the message's record is
//!   written, and once per alert written (content type 21, level then description);
//! - the keylog callback gives each TLS 1.3 traffic secret as soon as it is derived, as
//!   "LABEL <client random> <secret>" in hex, and `SSL_get_pending_cipher` names the suite then;
//! - a handshake message may be split across records (we cut records at
//!   `record_plaintext_max`, not at message boundaries), but a record never spans a key
//!   change (ours never do: one level per `provide`);
//! - an empty memory BIO reports "retry" (not end of stream), so SSL_do_handshake returns
//!   SSL_ERROR_WANT_READ while the client's next flight is missing;
//! - the server writes its NewSessionTicket(s) in the same SSL_do_handshake call that reads
//!   the client's Finished and returns 1, so nothing is left to send once it is done.
//!
//! Memory: one `Handshake` is a heap struct of 824 bytes (secrets, counters, SNI) plus its copy
//! of our transport parameters, the client's (at most `transport_params_max_bytes`), the output
//! it holds until the caller takes it (at most `out_max_bytes` per level; a level's buffer is
//! freed once all of it was taken) and OpenSSL's SSL object: about 8 KiB once created and about
//! 45 KiB after the first flight with a 2048-bit RSA certificate (tls_tests.zig prints the
//! figures; SSL_MODE_RELEASE_BUFFERS). The SSL object is freed in the call that completes (or
//! fails) the handshake: a server's handshake is confirmed when the client's Finished is read
//! (RFC 9001 4.1.2). What is left (`heldBytes`, under 1 KiB: the struct and both transport
//! parameters) lives until the caller, having copied out what it keeps (the 1-RTT secrets,
//! about 100 bytes; the decoded transport parameters; the SNI if wanted), calls `deinit`: a
//! QUIC connection keeps nothing of this module after that.
//!
//! Client certificates (`--ssl-cert-reqs`) are verified by OpenSSL as on TCP. What the ASGI tls
//! extension reads of the session (version, suite, SNI, the client's certificate and chain,
//! the verify result) is kept at completion (`takeSummary`), before the SSL object goes.
//!
//! Tested on OpenSSL 3.0 (Debian 12) and 3.6 (the sid chroot): the same shim serves both, as
//! OpenSSL 3.5+'s own QUIC TLS callbacks are not needed while these behaviours hold.
const std = @import("std");
const openssl = @import("../transport/openssl.zig");
const suite = @import("suite.zig");

const SSL = openssl.SSL;
const BIO = openssl.BIO;

/// The encryption levels that carry CRYPTO frames (0-RTT carries none and is refused).
pub const Level = enum(u2) { initial = 0, handshake = 1, application = 2 };
/// `read`: the client's secret (what we open); `write`: ours (what we seal).
pub const Direction = enum(u1) { read = 0, write = 1 };

/// QUIC transport error codes (RFC 9000 20.1) this module reports.
pub const internal_error: u64 = 0x01;
pub const crypto_buffer_exceeded: u64 = 0x0d;
pub const crypto_error_base: u64 = 0x100;

/// TLS alerts (RFC 8446 6) the shim raises itself.
pub const Alert = struct {
    pub const unexpected_message: u8 = 10;
    pub const decode_error: u8 = 50;
    pub const internal_error: u8 = 80;
    pub const missing_extension: u8 = 109;
    pub const no_application_protocol: u8 = 120;
};

/// CRYPTO bytes the client may send at one level over the whole handshake (its ClientHello,
/// or its certificate chain and Finished); past this the connection fails (RFC 9000 7.5).
pub const in_max_bytes = 64 * 1024;
/// Our handshake messages held per level until the caller takes them.
pub const out_max_bytes = 64 * 1024;
/// The client's transport parameters (RFC 9000 18): a few hundred bytes in practice.
pub const transport_params_max_bytes = 4096;
/// A DNS name is at most 253 characters; OpenSSL refuses longer SNI itself.
pub const server_name_max_bytes = 255;
/// The plaintext of one record we build for OpenSSL (under TLS's 2^14).
pub const record_plaintext_max = 4096;
/// quic_transport_parameters (RFC 9001 8.2).
pub const transport_parameters_ext: c_uint = 0x39;
const alpn_ext: c_uint = 16;

const content_handshake: u8 = 22;
const content_alert: u8 = 21;
const content_application_data: u8 = 23;
const SSL_ERROR_WANT_READ = 2;
/// The app-data slot (index 0, SSL_set_app_data's): our callbacks find the Handshake there.
const ex_data_index = 0;

pub const State = enum { running, done, failed };

pub const Error = error{HandshakeFailed};

pub const Handshake = struct {
    allocator: std.mem.Allocator,
    ssl: ?*SSL,
    /// The memory BIO OpenSSL reads our records from (owned by `ssl`).
    rbio: ?*BIO,
    state: State = .running,
    /// The QUIC error code once `state` is `.failed`.
    error_code: u64 = 0,
    /// The first fatal alert OpenSSL wrote, or one a callback of ours chose.
    alert: ?u8 = null,
    /// An error found inside a callback (bad input or over a limit), reported on return.
    callback_error: ?u64 = null,
    suite: ?suite.Suite = null,
    secrets: [3][2]?suite.Secret = .{ .{ null, null }, .{ null, null }, .{ null, null } },
    /// The client's handshake key as TLS record protection, and the next record's number.
    records_in: ?suite.Aead = null,
    records_in_seq: u64 = 0,
    in_bytes: [3]usize = .{ 0, 0, 0 },
    out: [3]std.ArrayListUnmanaged(u8) = .{ .empty, .empty, .empty },
    /// Ours, sent in EncryptedExtensions; owned (copied at `init`).
    local_params: []u8,
    /// The client's, from its ClientHello; owned.
    peer_params: ?[]u8 = null,
    server_name_buf: [server_name_max_bytes]u8 = undefined,
    server_name_len: u8 = 0,
    has_server_name: bool = false,
    alpn_h3: bool = false,
    /// What the ASGI tls extension reads of the session, kept at completion until taken.
    summary: openssl.SessionSummary = .{},

    /// A server handshake on `ctx` (from `tls_context.newContext`), sending
    /// `transport_params` (encoded, opaque here). Null when out of memory.
    pub fn init(allocator: std.mem.Allocator, ctx: *openssl.SSL_CTX, transport_params: []const u8) ?*Handshake {
        std.debug.assert(transport_params.len <= transport_params_max_bytes);
        const hs = allocator.create(Handshake) catch return null;
        const params = allocator.dupe(u8, transport_params) catch {
            allocator.destroy(hs);
            return null;
        };
        hs.* = .{ .allocator = allocator, .ssl = null, .rbio = null, .local_params = params };
        if (!hs.newSsl(ctx)) {
            hs.deinit();
            return null;
        }
        return hs;
    }

    fn newSsl(hs: *Handshake, ctx: *openssl.SSL_CTX) bool {
        const f = openssl.functions();
        const ssl = f.SSL_new(ctx) orelse return clearErrors(false);
        hs.ssl = ssl;
        const rbio = f.BIO_new(f.BIO_s_mem()) orelse return clearErrors(false);
        const wbio = f.BIO_new(f.BIO_s_null()) orelse {
            _ = f.BIO_free(rbio);
            return clearErrors(false);
        };
        f.SSL_set_bio(ssl, rbio, wbio);
        hs.rbio = rbio;
        if (f.SSL_set_ex_data(ssl, ex_data_index, hs) != 1) return clearErrors(false);
        f.SSL_set_msg_callback(ssl, msgCallback);
        f.SSL_set_accept_state(ssl);
        return true;
    }

    pub fn deinit(hs: *Handshake) void {
        hs.freeSsl();
        hs.summary.deinit(hs.allocator);
        hs.wipeSecrets();
        for (&hs.out) |*o| o.deinit(hs.allocator);
        if (hs.peer_params) |p| hs.allocator.free(p);
        hs.allocator.free(hs.local_params);
        hs.allocator.destroy(hs);
    }

    fn freeSsl(hs: *Handshake) void {
        if (hs.ssl) |ssl| openssl.functions().SSL_free(ssl);
        hs.ssl = null;
        hs.rbio = null;
        if (hs.records_in) |*a| a.wipe();
        hs.records_in = null;
    }

    /// Zeros every traffic secret kept from the keylog (the connection has its own copies).
    pub fn wipeSecrets(hs: *Handshake) void {
        for (&hs.secrets) |*pair| for (pair) |*slot| if (slot.*) |*s| s.wipe();
    }

    /// The client's CRYPTO data at `level`, in order and without gaps (the caller
    /// reassembles CRYPTO frames). Runs OpenSSL as far as the bytes allow.
    pub fn provide(hs: *Handshake, level: Level, bytes: []const u8) Error!void {
        if (hs.state == .failed) return error.HandshakeFailed;
        if (bytes.len == 0) return;
        // A QUIC client sends nothing after its Finished (no post-handshake messages:
        // RFC 9001 4.4 forbids post-handshake authentication, 6 KeyUpdate).
        if (hs.state == .done or level == .application) return hs.failAlert(Alert.unexpected_message);
        if (bytes.len > in_max_bytes - hs.in_bytes[@intFromEnum(level)]) return hs.fail(crypto_buffer_exceeded);
        hs.in_bytes[@intFromEnum(level)] += bytes.len;
        switch (level) {
            // Once the client's handshake key exists, its ClientHello was read whole.
            .initial => if (hs.records_in != null) return hs.failAlert(Alert.unexpected_message),
            .handshake => if (hs.records_in == null) return hs.failAlert(Alert.unexpected_message),
            .application => unreachable,
        }
        var rest = bytes;
        while (rest.len > 0) {
            const n = @min(rest.len, record_plaintext_max);
            if (!hs.writeRecord(level, rest[0..n])) return hs.fail(internal_error);
            rest = rest[n..];
        }
        return hs.drive();
    }

    /// One TLS record of handshake bytes into OpenSSL's read BIO.
    fn writeRecord(hs: *Handshake, level: Level, plaintext: []const u8) bool {
        std.debug.assert(plaintext.len > 0 and plaintext.len <= record_plaintext_max);
        var record: [record_max_bytes]u8 = undefined;
        const len = if (level == .initial)
            sealPlain(&record, plaintext)
        else
            sealRecord(&record, &hs.records_in.?, hs.records_in_seq, plaintext);
        if (level != .initial) hs.records_in_seq += 1;
        const f = openssl.functions();
        return f.BIO_write(hs.rbio.?, &record, @intCast(len)) == @as(c_int, @intCast(len));
    }

    fn drive(hs: *Handshake) Error!void {
        std.debug.assert(hs.state == .running and hs.ssl != null);
        const f = openssl.functions();
        const ssl = hs.ssl.?;
        const rc = f.SSL_do_handshake(ssl);
        const code = if (rc == 1) SSL_ERROR_NONE else f.SSL_get_error(ssl, rc);
        f.ERR_clear_error();
        if (hs.callback_error) |e| return hs.fail(e);
        if (code == SSL_ERROR_WANT_READ) return;
        if (code != SSL_ERROR_NONE) {
            if (hs.alert) |a| return hs.fail(crypto_error_base + a);
            return hs.failAlert(Alert.internal_error);
        }
        return hs.finish();
    }

    /// The handshake completed: keep what outlives the SSL object, then free it.
    fn finish(hs: *Handshake) Error!void {
        const ssl = hs.ssl.?;
        // The Initial secrets come from the connection ID, the others all from OpenSSL.
        for (hs.secrets[1..]) |pair| for (pair) |s| if (s == null) return hs.failAlert(Alert.internal_error);
        if (hs.peer_params == null) return hs.failAlert(Alert.missing_extension);
        hs.alpn_h3 = std.mem.eql(u8, openssl.alpnSelected(ssl), "h3");
        if (!hs.alpn_h3) return hs.failAlert(Alert.no_application_protocol);
        if (openssl.serverName(ssl)) |name| {
            if (name.len > server_name_max_bytes) return hs.failAlert(Alert.decode_error);
            @memcpy(hs.server_name_buf[0..name.len], name);
            hs.server_name_len = @intCast(name.len);
            hs.has_server_name = true;
        }
        hs.summary = openssl.SessionSummary.capture(hs.allocator, ssl) catch
            return hs.failAlert(Alert.internal_error);
        hs.freeSsl();
        hs.state = .done;
    }

    fn failAlert(hs: *Handshake, alert: u8) Error {
        return hs.fail(crypto_error_base + alert);
    }

    fn fail(hs: *Handshake, code: u64) Error {
        std.debug.assert(code != 0);
        hs.state = .failed;
        hs.error_code = code;
        hs.freeSsl();
        return error.HandshakeFailed;
    }

    /// Our handshake bytes for CRYPTO frames at `level`, not yet taken.
    pub fn output(hs: *const Handshake, level: Level) []const u8 {
        return hs.out[@intFromEnum(level)].items;
    }

    /// The caller took the first `n` bytes of `output(level)`.
    pub fn consumeOutput(hs: *Handshake, level: Level, n: usize) void {
        const o = &hs.out[@intFromEnum(level)];
        std.debug.assert(n <= o.items.len);
        o.replaceRangeAssumeCapacity(0, n, &.{});
        // All taken: give the buffer back (a done handshake should hold next to nothing).
        if (o.items.len == 0) o.clearAndFree(hs.allocator);
    }

    /// The traffic secret of `level` and `direction`, once OpenSSL derived it (the
    /// Initial secrets come from the connection ID, not from TLS: always null).
    pub fn secret(hs: *const Handshake, level: Level, direction: Direction) ?suite.Secret {
        return hs.secrets[@intFromEnum(level)][@intFromEnum(direction)];
    }

    /// `secret` in place: keys derived from it leave no copy of the secret behind.
    pub fn secretRef(hs: *const Handshake, level: Level, dir: Direction) ?*const suite.Secret {
        const slot = &hs.secrets[@intFromEnum(level)][@intFromEnum(dir)];
        return if (slot.*) |*s| s else null;
    }

    /// The client's transport parameters (encoded), once its ClientHello was read.
    pub fn peerTransportParams(hs: *const Handshake) ?[]const u8 {
        return hs.peer_params;
    }

    /// The application protocol agreed on: "h3" once done, otherwise null.
    pub fn alpn(hs: *const Handshake) ?[]const u8 {
        return if (hs.alpn_h3) "h3" else null;
    }

    /// The host name the client asked for (SNI), once done.
    pub fn serverName(hs: *const Handshake) ?[]const u8 {
        return if (hs.has_server_name) hs.server_name_buf[0..hs.server_name_len] else null;
    }

    /// What the ASGI tls extension reads (version, suite, SNI, the client's certificates),
    /// once done; the caller owns it from then (`SessionSummary.deinit`).
    pub fn takeSummary(hs: *Handshake) openssl.SessionSummary {
        const s = hs.summary;
        hs.summary = .{};
        return s;
    }

    /// The bytes this Handshake owns outside OpenSSL (the struct, parameters, output).
    pub fn heldBytes(hs: *const Handshake) usize {
        var n = @sizeOf(Handshake) + hs.local_params.len;
        if (hs.peer_params) |p| n += p.len;
        for (hs.out) |o| n += o.capacity;
        return n;
    }

    /// The QUIC error code to close with, once failed.
    pub fn errorCode(hs: *const Handshake) ?u64 {
        return if (hs.state == .failed) hs.error_code else null;
    }

    fn raise(hs: *Handshake, code: u64) void {
        if (hs.callback_error == null) hs.callback_error = code;
    }

    /// A handshake message OpenSSL wrote, put at the level its type belongs to.
    fn onMessage(hs: *Handshake, msg: []const u8) void {
        if (msg.len < 4 or std.mem.readInt(u24, msg[1..4], .big) != msg.len - 4) return hs.raise(internal_error);
        const level: Level = switch (msg[0]) {
            2 => .initial, // ServerHello and HelloRetryRequest
            8, 11, 13, 15, 20 => .handshake, // EncryptedExtensions, Certificate(Request), CertificateVerify, Finished
            4 => .application, // NewSessionTicket
            else => return hs.raise(internal_error),
        };
        const o = &hs.out[@intFromEnum(level)];
        if (msg.len > out_max_bytes - o.items.len) return hs.raise(internal_error);
        o.appendSlice(hs.allocator, msg) catch return hs.raise(internal_error);
    }

    /// A keylog line: "LABEL <32-byte client random> <secret>", in hex.
    fn onKeylog(hs: *Handshake, ssl: *const SSL, line: []const u8) void {
        var it = std.mem.splitScalar(u8, line, ' ');
        const label = it.next() orelse return hs.raise(internal_error);
        const slot = secretSlot(label) orelse return; // the early and exporter secrets
        _ = it.next() orelse return hs.raise(internal_error);
        const hex = it.next() orelse return hs.raise(internal_error);
        if (it.next() != null) return hs.raise(internal_error);
        const s = negotiatedSuite(ssl) orelse return hs.raise(crypto_error_base + Alert.internal_error);
        if (hs.suite != null and hs.suite.? != s) return hs.raise(internal_error);
        hs.suite = s;
        var bytes: [suite.max_secret_len]u8 = undefined;
        defer std.crypto.secureZero(u8, &bytes);
        if (hex.len != 2 * s.secretLen()) return hs.raise(internal_error);
        _ = std.fmt.hexToBytes(bytes[0..s.secretLen()], hex) catch return hs.raise(internal_error);
        const entry = &hs.secrets[@intFromEnum(slot.level)][@intFromEnum(slot.direction)];
        if (entry.* != null) return hs.raise(internal_error);
        entry.* = suite.Secret.init(s, bytes[0..s.secretLen()]);
        if (slot.level == .handshake and slot.direction == .read) {
            hs.records_in = suite.Aead.init(&entry.*.?, .tls_record);
            hs.records_in_seq = 0;
        }
    }

    /// The client's quic_transport_parameters (at most one ClientHello's worth kept: after a
    /// HelloRetryRequest the second ClientHello's replace the first's).
    fn onPeerParams(hs: *Handshake, bytes: []const u8) bool {
        if (bytes.len > transport_params_max_bytes) return false;
        const copy = hs.allocator.dupe(u8, bytes) catch return false;
        if (hs.peer_params) |p| hs.allocator.free(p);
        hs.peer_params = copy;
        return true;
    }
};

const SSL_ERROR_NONE = 0;

const Slot = struct { level: Level, direction: Direction };

fn secretSlot(label: []const u8) ?Slot {
    const table = [_]struct { []const u8, Slot }{
        .{ "CLIENT_HANDSHAKE_TRAFFIC_SECRET", .{ .level = .handshake, .direction = .read } },
        .{ "SERVER_HANDSHAKE_TRAFFIC_SECRET", .{ .level = .handshake, .direction = .write } },
        .{ "CLIENT_TRAFFIC_SECRET_0", .{ .level = .application, .direction = .read } },
        .{ "SERVER_TRAFFIC_SECRET_0", .{ .level = .application, .direction = .write } },
    };
    for (table) |entry| if (std.mem.eql(u8, label, entry[0])) return entry[1];
    return null;
}

/// The suite being negotiated (during the handshake the pending cipher; after it, the current).
pub fn negotiatedSuite(ssl: *const SSL) ?suite.Suite {
    const f = openssl.functions();
    const cipher = f.SSL_get_pending_cipher(ssl) orelse f.SSL_get_current_cipher(ssl) orelse return null;
    return suite.Suite.fromId(f.SSL_CIPHER_get_protocol_id(cipher));
}

fn clearErrors(result: bool) bool {
    openssl.functions().ERR_clear_error();
    return result;
}

fn handshakeOf(ssl: *const SSL) ?*Handshake {
    return @ptrCast(@alignCast(openssl.functions().SSL_get_ex_data(ssl, ex_data_index) orelse return null));
}

// ---- TLS records (RFC 8446 5) ------------------------------------------------------

pub const record_header_len = 5;
/// A sealed record of `record_plaintext_max` bytes: header, content, inner type, tag.
pub const record_max_bytes = record_header_len + record_plaintext_max + 1 + suite.tag_len;

/// A plaintext handshake record (the Initial level's): returns its length.
pub fn sealPlain(out: []u8, plaintext: []const u8) usize {
    std.debug.assert(plaintext.len <= record_plaintext_max and out.len >= record_header_len + plaintext.len);
    out[0] = content_handshake;
    std.mem.writeInt(u16, out[1..3], 0x0303, .big);
    std.mem.writeInt(u16, out[3..5], @intCast(plaintext.len), .big);
    @memcpy(out[record_header_len..][0..plaintext.len], plaintext);
    return record_header_len + plaintext.len;
}

/// A TLS 1.3 protected record of handshake bytes (RFC 8446 5.2): the outer type is
/// application_data, the inner type handshake, no padding; the header is the AEAD's
/// additional data. Returns its length.
pub fn sealRecord(out: []u8, aead: *const suite.Aead, seq: u64, plaintext: []const u8) usize {
    const inner_len = plaintext.len + 1;
    const len = record_header_len + inner_len + suite.tag_len;
    std.debug.assert(plaintext.len <= record_plaintext_max and out.len >= len);
    out[0] = content_application_data;
    std.mem.writeInt(u16, out[1..3], 0x0303, .big);
    std.mem.writeInt(u16, out[3..5], @intCast(inner_len + suite.tag_len), .big);
    const body = out[record_header_len..][0..inner_len];
    @memcpy(body[0..plaintext.len], plaintext);
    body[plaintext.len] = content_handshake;
    aead.seal(body, out[record_header_len + inner_len ..][0..suite.tag_len], body, out[0..record_header_len], seq);
    return len;
}

// ---- OpenSSL's callbacks (tls_context.zig installs the context-wide ones) ----------

fn msgCallback(write_p: c_int, version: c_int, content_type: c_int, buf: ?*const anyopaque, len: usize, ssl: *SSL, arg: ?*anyopaque) callconv(.c) void {
    _ = version;
    _ = arg;
    if (write_p != 1) return;
    const hs = handshakeOf(ssl) orelse return;
    const p: [*]const u8 = @ptrCast(buf orelse return hs.raise(internal_error));
    const bytes = p[0..len];
    switch (content_type) {
        content_handshake => hs.onMessage(bytes),
        // level, description: the first fatal alert is the connection's error.
        content_alert => if (bytes.len == 2 and hs.alert == null) {
            hs.alert = bytes[1];
        },
        else => {}, // record headers and inner content types (pseudo types 256, 257)
    }
}

pub fn keylogCallback(ssl: *const SSL, line: [*:0]const u8) callconv(.c) void {
    const hs = handshakeOf(ssl) orelse return;
    const text = std.mem.span(line);
    // The longest line: a 31-byte label, 64 hex digits of random, 96 of a SHA-384 secret.
    if (text.len > 256) return hs.raise(internal_error);
    hs.onKeylog(ssl, text);
}

/// ALPN: "h3" or a no_application_protocol alert (RFC 9001 8.1).
pub fn alpnCallback(ssl: *SSL, out: *[*]const u8, outlen: *u8, in: [*]const u8, inlen: c_uint, arg: ?*anyopaque) callconv(.c) c_int {
    _ = ssl;
    _ = arg;
    const SSL_TLSEXT_ERR_OK = 0;
    const SSL_TLSEXT_ERR_ALERT_FATAL = 2;
    const list = in[0..inlen];
    var i: usize = 0;
    while (i < list.len) {
        const n = list[i];
        if (n == 0 or list.len - i - 1 < n) break;
        const name = list[i + 1 ..][0..n];
        if (std.mem.eql(u8, name, "h3")) {
            out.* = name.ptr;
            outlen.* = n;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + n;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

/// A ClientHello without quic_transport_parameters (RFC 9001 8.2) or without ALPN (8.1)
/// fails before anything is sent. OpenSSL 3.0 sends handshake_failure whatever alert the
/// callback names, so the error code is chosen here (`raise`), not from the alert written.
pub fn clientHelloCallback(ssl: *SSL, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int {
    _ = arg;
    const SSL_CLIENT_HELLO_SUCCESS = 1;
    const SSL_CLIENT_HELLO_ERROR = 0;
    const f = openssl.functions();
    var data: ?[*]const u8 = null;
    var len: usize = 0;
    const missing: u8 = if (f.SSL_client_hello_get0_ext(ssl, transport_parameters_ext, &data, &len) != 1)
        Alert.missing_extension
    else if (f.SSL_client_hello_get0_ext(ssl, alpn_ext, &data, &len) != 1)
        Alert.no_application_protocol
    else
        return SSL_CLIENT_HELLO_SUCCESS;
    alert.* = missing;
    if (handshakeOf(ssl)) |hs| hs.raise(crypto_error_base + missing);
    return SSL_CLIENT_HELLO_ERROR;
}

/// EncryptedExtensions: our transport parameters (OpenSSL calls this only when the
/// ClientHello had the extension).
pub fn paramsAddCallback(ssl: *SSL, ext_type: c_uint, context: c_uint, out: *?[*]const u8, outlen: *usize, x: ?*openssl.X509, chainidx: usize, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int {
    _ = .{ ext_type, context, x, chainidx, arg };
    const hs = handshakeOf(ssl) orelse {
        alert.* = Alert.internal_error;
        return -1;
    };
    out.* = hs.local_params.ptr;
    outlen.* = hs.local_params.len;
    return 1;
}

pub fn paramsParseCallback(ssl: *SSL, ext_type: c_uint, context: c_uint, in: [*]const u8, inlen: usize, x: ?*openssl.X509, chainidx: usize, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int {
    _ = .{ ext_type, context, x, chainidx, arg };
    const hs = handshakeOf(ssl) orelse {
        alert.* = Alert.internal_error;
        return 0;
    };
    if (!hs.onPeerParams(in[0..inlen])) {
        alert.* = Alert.decode_error;
        return 0;
    }
    return 1;
}

test "a sealed record opens with the same key and carries the handshake type inside" {
    var bytes: [32]u8 = undefined;
    for (&bytes, 0..) |*b, i| b.* = @intCast(i * 3);
    const secret = suite.Secret.init(.aes_128_gcm_sha256, &bytes);
    const aead = suite.Aead.init(&secret, .tls_record);
    var record: [record_max_bytes]u8 = undefined;
    const len = sealRecord(&record, &aead, 5, "\x14\x00\x00\x01\xaa");
    try std.testing.expectEqual(@as(usize, 5 + 5 + 1 + 16), len);
    try std.testing.expectEqualSlices(u8, &.{ 23, 3, 3, 0, 22 }, record[0..5]);
    var plain: [6]u8 = undefined;
    try aead.open(&plain, record[5..11], record[11..27].*, record[0..5], 5);
    try std.testing.expectEqualSlices(u8, "\x14\x00\x00\x01\xaa\x16", &plain);
    try std.testing.expectError(error.AuthenticationFailed, aead.open(&plain, record[5..11], record[11..27].*, record[0..5], 4));
    const plain_len = sealPlain(&record, "\x01\x00\x00\x00");
    try std.testing.expectEqualSlices(u8, &.{ 22, 3, 3, 0, 4, 1, 0, 0, 0 }, record[0..plain_len]);
}

test "keylog labels map to a level and a direction; others are ignored" {
    try std.testing.expectEqual(Slot{ .level = .handshake, .direction = .read }, secretSlot("CLIENT_HANDSHAKE_TRAFFIC_SECRET").?);
    try std.testing.expectEqual(Slot{ .level = .application, .direction = .write }, secretSlot("SERVER_TRAFFIC_SECRET_0").?);
    try std.testing.expect(secretSlot("EXPORTER_SECRET") == null);
    try std.testing.expect(secretSlot("CLIENT_EARLY_TRAFFIC_SECRET") == null);
    try std.testing.expect(secretSlot("") == null);
}
