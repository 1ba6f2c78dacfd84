//! Test-only: quic/tls.zig's `Handshake` as C functions, built into a shared library by
//! tests/http3/test_quic_tls.py (`python -m ziglang build-lib -dynamic`) and driven with
//! ctypes against aioquic's TLS client. Never part of the `_core` extension. It reaches the
//! engine as the named module `engine` (src/zig/engine.zig): Zig refuses imports outside
//! the root's folder.
const std = @import("std");
const engine = @import("engine");
const openssl = engine.openssl;
const tls = engine.quic_tls;
const tls_context = engine.quic_tls_context;

const allocator = std.heap.c_allocator;

/// 0 when libssl.so.3 loaded, -1 otherwise.
export fn zq_load() c_int {
    openssl.load(openssl.default_library) catch return -1;
    return 0;
}

/// QUIC's context from PEM files; null with the reason in `err_buf` (NUL-terminated).
export fn zq_context_new(
    certfile: [*:0]const u8,
    keyfile: [*:0]const u8,
    err_buf: [*]u8,
    err_cap: usize,
) ?*openssl.SSL_CTX {
    var err: openssl.ContextError = .{};
    const ctx = tls_context.newContext(.{
        .certfile = certfile,
        .keyfile = keyfile,
        .password = null,
        .min_version = openssl.TLS1_3_VERSION,
        .max_version = openssl.TLS1_3_VERSION,
        .ciphers = null,
        .cert_reqs = 0,
        .ca_certs = null,
        .http2 = false,
    }, &err);
    if (ctx == null and err_cap > 0) {
        const n = @min(err.text().len, err_cap - 1);
        @memcpy(err_buf[0..n], err.text()[0..n]);
        err_buf[n] = 0;
    }
    return ctx;
}

export fn zq_context_free(ctx: *openssl.SSL_CTX) void {
    openssl.freeContext(ctx);
}

export fn zq_handshake_new(ctx: *openssl.SSL_CTX, params: [*]const u8, len: usize) ?*tls.Handshake {
    if (len > tls.transport_params_max_bytes) return null;
    return tls.Handshake.init(allocator, ctx, params[0..len]);
}

export fn zq_handshake_free(hs: *tls.Handshake) void {
    hs.deinit();
}

fn level(n: c_int) ?tls.Level {
    return switch (n) {
        0 => .initial,
        1 => .handshake,
        2 => .application,
        else => null,
    };
}

/// 0: taken; -1: the handshake failed (see zq_error_code); -2: no such level.
export fn zq_provide(hs: *tls.Handshake, lvl: c_int, data: [*]const u8, len: usize) c_int {
    const l = level(lvl) orelse return -2;
    hs.provide(l, data[0..len]) catch return -1;
    return 0;
}

/// Copies (and takes) up to `cap` bytes of our output at `lvl`; returns how many.
export fn zq_take_output(hs: *tls.Handshake, lvl: c_int, buf: [*]u8, cap: usize) isize {
    const l = level(lvl) orelse return -2;
    const out = hs.output(l);
    const n = @min(out.len, cap);
    @memcpy(buf[0..n], out[0..n]);
    hs.consumeOutput(l, n);
    return @intCast(n);
}

/// The secret of `lvl` and `direction` (0 read: the client's, 1 write: ours) into `buf`;
/// its length, or -1 while there is none.
export fn zq_secret(
    hs: *tls.Handshake,
    lvl: c_int,
    direction: c_int,
    buf: [*]u8,
    cap: usize,
) isize {
    const l = level(lvl) orelse return -2;
    const d: tls.Direction = if (direction == 0) .read else .write;
    const s = hs.secret(l, d) orelse return -1;
    return copyOut(s.slice(), buf, cap);
}

/// The negotiated suite's TLS number (0x1301...), 0 while unknown.
export fn zq_suite(hs: *tls.Handshake) c_int {
    const s = hs.suite orelse return 0;
    return @intFromEnum(s);
}

/// 0 running, 1 done, 2 failed.
export fn zq_state(hs: *tls.Handshake) c_int {
    return @intFromEnum(hs.state);
}

export fn zq_error_code(hs: *tls.Handshake) u64 {
    return hs.errorCode() orelse 0;
}

/// Whether the SSL object is still held (it must be gone once done or failed).
export fn zq_holds_ssl(hs: *tls.Handshake) c_int {
    return @intFromBool(hs.ssl != null);
}

export fn zq_peer_params(hs: *tls.Handshake, buf: [*]u8, cap: usize) isize {
    return copyOut(hs.peerTransportParams() orelse return -1, buf, cap);
}

export fn zq_alpn(hs: *tls.Handshake, buf: [*]u8, cap: usize) isize {
    return copyOut(hs.alpn() orelse return -1, buf, cap);
}

export fn zq_server_name(hs: *tls.Handshake, buf: [*]u8, cap: usize) isize {
    return copyOut(hs.serverName() orelse return -1, buf, cap);
}

fn copyOut(bytes: []const u8, buf: [*]u8, cap: usize) isize {
    if (bytes.len > cap) return -3;
    @memcpy(buf[0..bytes.len], bytes);
    return @intCast(bytes.len);
}
