//! Test-only: quic/connection.zig's `Connection` as C functions, built into a shared library
//! by tests/http3/test_quic_connection.py (`python -m ziglang build-lib -dynamic`) and driven
//! with ctypes against aioquic's QuicConnection. Never part of the `_core` extension. The
//! allocator counts the bytes it holds, so the test can read what a connection costs. It
//! reaches the engine as the named module `engine` (src/zig/engine.zig).
const std = @import("std");
const engine = @import("engine");
const openssl = engine.openssl;
const tls_context = engine.quic_tls_context;
const connection = engine.quic_connection;
const Connection = connection.Connection;

var live_bytes: usize = 0;

const counting: std.mem.Allocator = .{ .ptr = undefined, .vtable = &.{
    .alloc = countAlloc,
    .resize = countResize,
    .remap = countRemap,
    .free = countFree,
} };

fn countAlloc(_: *anyopaque, len: usize, alignment: std.mem.Alignment, ra: usize) ?[*]u8 {
    const p = std.heap.c_allocator.vtable.alloc(undefined, len, alignment, ra) orelse return null;
    live_bytes += len;
    return p;
}

fn countResize(
    _: *anyopaque,
    memory: []u8,
    alignment: std.mem.Alignment,
    new_len: usize,
    ra: usize,
) bool {
    if (!std.heap.c_allocator.vtable.resize(
        undefined,
        memory,
        alignment,
        new_len,
        ra,
    )) return false;
    live_bytes = live_bytes - memory.len + new_len;
    return true;
}

fn countRemap(
    _: *anyopaque,
    memory: []u8,
    alignment: std.mem.Alignment,
    new_len: usize,
    ra: usize,
) ?[*]u8 {
    const p = std.heap.c_allocator.vtable.remap(
        undefined,
        memory,
        alignment,
        new_len,
        ra,
    ) orelse return null;
    live_bytes = live_bytes - memory.len + new_len;
    return p;
}

fn countFree(_: *anyopaque, memory: []u8, alignment: std.mem.Alignment, ra: usize) void {
    std.heap.c_allocator.vtable.free(undefined, memory, alignment, ra);
    live_bytes -= memory.len;
}

export fn zc_load() c_int {
    openssl.load(openssl.default_library) catch return -1;
    return 0;
}

export fn zc_context_new(certfile: [*:0]const u8, keyfile: [*:0]const u8) ?*openssl.SSL_CTX {
    var err: openssl.ContextError = .{};
    return tls_context.newContext(.{
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
}

export fn zc_context_free(ctx: *openssl.SSL_CTX) void {
    openssl.freeContext(ctx);
}

/// Limits in the order of `connection.Config`; 0 keeps the default.
export fn zc_conn_new(
    ctx: *openssl.SSL_CTX,
    dcid: [*]const u8,
    dcid_len: usize,
    scid: [*]const u8,
    scid_len: usize,
    ours: [*]const u8,
    ours_len: usize,
    now_us: u64,
    idle_ms: u64,
    max_data: u64,
    max_stream_data: u64,
) ?*Connection {
    // The limits live as long as the connection (freed by `zc_conn_free`), outside the count.
    const config = std.heap.c_allocator.create(connection.Config) catch return null;
    config.* = .{};
    if (idle_ms != 0) config.max_idle_timeout_ms = idle_ms;
    if (max_data != 0) config.initial_max_data = max_data;
    if (max_stream_data != 0) config.initial_max_stream_data = max_stream_data;
    const c = Connection.init(
        counting,
        config,
        null,
        ctx,
        dcid[0..dcid_len],
        scid[0..scid_len],
        ours[0..ours_len],
        now_us,
        null,
    ) orelse {
        std.heap.c_allocator.destroy(config);
        return null;
    };
    return c;
}

export fn zc_conn_free(c: *Connection) void {
    const config = c.config;
    c.deinit();
    std.heap.c_allocator.destroy(@constCast(config));
}

export fn zc_receive(c: *Connection, data: [*]u8, len: usize, now_us: u64) void {
    c.receive(data[0..len], now_us);
}

export fn zc_send(c: *Connection, out: [*]u8, cap: usize, now_us: u64) usize {
    return c.send(out[0..cap], now_us);
}

/// The deadline, or u64 max when none.
export fn zc_next_deadline(c: *Connection) u64 {
    return c.nextDeadline() orelse std.math.maxInt(u64);
}

export fn zc_on_timeout(c: *Connection, now_us: u64) void {
    c.onTimeout(now_us);
}

/// 0: no event; else 1 readable, 2 writable, 3 reset, 4 stop_sending, 5 handshake_done,
/// 6 closed (code; `extra` 1 for an application close), 7 datagram, with the stream id in
/// `id`.
export fn zc_next_event(c: *Connection, id: *u64, code: *u64, extra: *u64) c_int {
    const e = c.nextEvent() orelse return 0;
    switch (e) {
        .readable => |s| id.* = s,
        .writable => |s| id.* = s,
        .reset => |r| {
            id.* = r.id;
            code.* = r.code;
            extra.* = r.final_size;
        },
        .stop_sending => |r| {
            id.* = r.id;
            code.* = r.code;
        },
        .handshake_done, .datagram => {},
        .closed => |r| {
            code.* = r.code;
            extra.* = @intFromBool(r.app);
        },
    }
    return @as(c_int, @intFromEnum(std.meta.activeTag(e))) + 1;
}

/// Bytes read (fin in `fin`), or -1 unknown stream, -2 closed, -3 limit.
export fn zc_stream_read(c: *Connection, id: u64, buf: [*]u8, cap: usize, fin: *c_int) isize {
    const r = c.streamRead(id, buf[0..cap]) catch |e| return errCode(e);
    fin.* = @intFromBool(r.fin);
    return @intCast(r.n);
}

export fn zc_stream_write(
    c: *Connection,
    id: u64,
    data: [*]const u8,
    len: usize,
    fin: c_int,
) isize {
    const n = c.streamWrite(id, data[0..len], fin != 0) catch |e| return errCode(e);
    return @intCast(n);
}

fn errCode(e: connection.StreamError) isize {
    return switch (e) {
        error.UnknownStream => -1,
        error.StreamClosed => -2,
        error.StreamLimit => -3,
    };
}

export fn zc_close_app(c: *Connection, code: u64, reason: [*]const u8, len: usize) void {
    c.closeApplication(code, reason[0..len]);
}

/// 0 handshaking, 1 established, 2 closing, 3 draining, 4 closed.
export fn zc_state(c: *Connection) c_int {
    return @intFromEnum(c.state);
}

export fn zc_stream_count(c: *Connection) usize {
    return c.stream_table.items.len;
}

/// Heap bytes the counting allocator holds (every connection alive, with their structs).
export fn zc_live_bytes() usize {
    return live_bytes;
}

/// Lowers RFC 9001 6.6's limits of this connection (its `Config` is its own here; 0 keeps
/// the suite's figure), so a test reaches a key update within a short transfer.
export fn zc_set_aead_limits(c: *Connection, confidentiality: u64, integrity: u64) void {
    const config: *connection.Config = @constCast(c.config);
    if (confidentiality != 0) config.confidentiality_limit = confidentiality;
    if (integrity != 0) config.integrity_limit = integrity;
}

/// The 1-RTT keys: [present, send phase, receive phase, packets sealed with the current
/// key, packets that failed authentication, previous receive keys kept].
export fn zc_keys(c: *Connection, out: *[6]u64) void {
    const k = c.one_rtt orelse {
        out.* = .{ 0, 0, 0, 0, 0, 0 };
        return;
    };
    const kept = k.previousDeadline() != null;
    out.* = .{ 1, k.tx_phase, k.rx_phase, k.tx_sealed, k.auth_failures, @intFromBool(kept) };
}

/// What `Recovery` (inside the struct) takes: the budget excludes it.
export fn zc_recovery_bytes() usize {
    return @sizeOf(connection.Recovery);
}

export fn zc_held_bytes(c: *Connection) usize {
    return c.heldBytes();
}

/// What the connection holds, for a test's diagnosis: [handshake held, crypto 0..2 present,
/// packets filed, stream table capacity, 1-RTT keys present, recovery records].
export fn zc_holdings(c: *Connection, out: *[8]usize) void {
    out[0] = if (c.hs) |hs| hs.heldBytes() else 0;
    for (0..3) |i| out[1 + i] = @intFromBool(c.crypto[i] != null);
    out[4] = c.sent.map.count();
    out[5] = c.stream_table.capacity;
    out[6] = @intFromBool(c.one_rtt != null);
    out[7] = c.recovery.packets_count;
}

/// The timers behind `nextDeadline`, for a test's diagnosis: [loss/PTO, Initial ACK,
/// Handshake ACK, Application ACK, pacer, idle, probes owed, PTO count].
export fn zc_timers(c: *Connection, out: *[8]u64) void {
    const r = &c.recovery;
    out.* = .{
        r.loss_timer_us,
        if (r.earlyAcks(.initial)) |a| a.ack_deadline_us else std.math.maxInt(u64),
        if (r.earlyAcks(.handshake)) |a| a.ack_deadline_us else std.math.maxInt(u64),
        r.application_acks.ack_deadline_us,
        c.pace_until_us,
        c.idle_deadline_us,
        r.probes_owed,
        r.pto_count,
    };
}

/// One stream's state by table index, for a test's diagnosis: [id, read offset, highest
/// received, final size (or max), recv finished, written, acked, sent, lost ranges,
/// fin/fin_sent/fin_acked bits, peer's limit, our limit].
export fn zc_stream_state(c: *Connection, index: usize, out: *[12]u64) c_int {
    if (index >= c.stream_table.items.len) return -1;
    const s = c.stream_table.items[index];
    out.* = .{
        s.id,
        s.recv().data.read_offset,
        s.recv().data.highest(),
        s.recv().finalSize() orelse std.math.maxInt(u64),
        @intFromBool(s.recv().finished),
        s.send().write_offset,
        s.send().acked_offset,
        s.send().sent_offset,
        s.send().lost.count,
        @as(
            u64,
            @intFromBool(s.send().fin),
        ) | @as(
            u64,
            @intFromBool(s.send().fin_sent),
        ) << 1 | @as(u64, @intFromBool(s.send().fin_acked)) << 2,
        s.send_max,
        s.recv().max_offset,
    };
    return 0;
}
