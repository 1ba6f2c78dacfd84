//! Sans-IO WebSocket codec (RFC 6455): the opening handshake's checks, frame headers,
//! unmasking, incremental UTF-8 validation, close payloads, and the
//! permessage-deflate offer (RFC 7692). Nothing here reads a socket or allocates;
//! `websocket/session.zig` drives it for a live connection.
const std = @import("std");
const http_fields = @import("../http/fields.zig");

/// RFC 6455 1.3: appended to the client's key before hashing.
const accept_guid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Sec-WebSocket-Accept is base64 of a 20-byte SHA-1: always 28 characters.
pub const accept_bytes = 28;
/// Control frame payloads are at most this long (RFC 6455 5.5).
pub const control_payload_bytes_max = 125;
/// The largest frame header: 2 bytes, 8 bytes of length, 4 bytes of mask.
pub const header_bytes_max = 14;

pub const Opcode = enum(u4) {
    continuation = 0,
    text = 1,
    binary = 2,
    close = 8,
    ping = 9,
    pong = 10,
    _,

    pub fn isControl(op: Opcode) bool {
        return @intFromEnum(op) >= 8;
    }
};

/// Why a connection is failed; each maps to one close code.
pub const Failure = error{
    /// 1002: a frame breaks the protocol (unmasked, reserved bits, bad sequence...).
    ProtocolError,
    /// 1007: text that is not UTF-8.
    InvalidData,
    /// 1009: a message larger than the configured maximum.
    TooBig,
};

pub fn closeCodeFor(err: Failure) u16 {
    return switch (err) {
        error.ProtocolError => 1002,
        error.InvalidData => 1007,
        error.TooBig => 1009,
    };
}

// ---- the opening handshake ---------------------------------------------------------

pub const HandshakeError = error{
    /// 400: not a valid WebSocket opening handshake.
    BadRequest,
    /// 426 with `Sec-WebSocket-Version: 13`: a version we do not speak.
    VersionNotSupported,
};

pub fn statusFor(err: HandshakeError) u16 {
    return switch (err) {
        error.BadRequest => 400,
        error.VersionNotSupported => 426,
    };
}

/// permessage-deflate as agreed for one connection.
pub const DeflateParams = struct {
    /// The client resets its compressor after each message: we need no inflate context between messages.
    client_no_context_takeover: bool = false,
    /// Echoed when the client named a value for client_max_window_bits.
    client_max_window_bits: ?u4 = null,
    /// The window we compress with (the client may ask for a smaller one).
    server_max_window_bits: u4 = 15,
    /// True when the client named server_max_window_bits (so we echo it).
    server_window_named: bool = false,

    /// The Sec-WebSocket-Extensions response value. We always reset our compressor
    /// per message (one shared compressor serves every connection), so we say so.
    pub fn response(self: DeflateParams, buf: []u8) []const u8 {
        var w = std.io.Writer.fixed(buf);
        w.writeAll("permessage-deflate; server_no_context_takeover") catch return "";
        if (self.client_no_context_takeover) w.writeAll("; client_no_context_takeover") catch return "";
        if (self.server_window_named) w.print("; server_max_window_bits={d}", .{self.server_max_window_bits}) catch return "";
        if (self.client_max_window_bits) |bits| w.print("; client_max_window_bits={d}", .{bits}) catch return "";
        return w.buffered();
    }
};

pub const Handshake = struct {
    accept: [accept_bytes]u8,
    deflate: ?DeflateParams,
};

/// True when the request asks to become a WebSocket: `upgrade` is its Upgrade field's
/// value when Connection names "upgrade" (HTTP/1.1's parser finds both), and must list
/// websocket. Other upgrades stay plain HTTP requests.
pub fn isUpgrade(upgrade: ?[]const u8) bool {
    return http_fields.connectionHas(upgrade orelse return false, "websocket");
}

/// What the opening handshake's checks read of a request (RFC 6455 4.2.1); HTTP/1.1's
/// session fills it from the head it parsed.
pub const HandshakeRequest = struct {
    method: []const u8,
    http11: bool,
    /// A body (content-length above 0, or chunked) was announced.
    has_body: bool,
    headers: []const http_fields.Header,
};

/// Checks an upgrade request (RFC 6455 4.2.1) and computes the answer's key.
pub fn validate(req: HandshakeRequest, offer_deflate: bool) HandshakeError!Handshake {
    if (!std.mem.eql(u8, req.method, "GET") or !req.http11) return error.BadRequest;
    if (req.has_body) return error.BadRequest;
    var version: ?[]const u8 = null;
    var key: ?[]const u8 = null;
    for (req.headers) |h| {
        if (std.mem.eql(u8, h.name, "sec-websocket-version")) {
            if (version != null) return error.BadRequest;
            version = h.value;
        } else if (std.mem.eql(u8, h.name, "sec-websocket-key")) {
            if (key != null) return error.BadRequest;
            key = h.value;
        }
    }
    if (!std.mem.eql(u8, version orelse "", "13")) return error.VersionNotSupported;
    const k = key orelse return error.BadRequest;
    if (!validKey(k)) return error.BadRequest;
    var hs = Handshake{ .accept = undefined, .deflate = null };
    acceptKey(k, &hs.accept);
    if (offer_deflate) hs.deflate = negotiateDeflate(req.headers);
    return hs;
}

/// The key must be base64 of exactly 16 bytes.
pub fn validKey(key: []const u8) bool {
    if (key.len != 24) return false;
    const dec = std.base64.standard.Decoder;
    const n = dec.calcSizeForSlice(key) catch return false;
    if (n != 16) return false;
    var raw: [16]u8 = undefined;
    dec.decode(&raw, key) catch return false;
    return true;
}

pub fn acceptKey(key: []const u8, out: *[accept_bytes]u8) void {
    var sha = std.crypto.hash.Sha1.init(.{});
    sha.update(key);
    sha.update(accept_guid);
    var digest: [20]u8 = undefined;
    sha.final(&digest);
    _ = std.base64.standard.Encoder.encode(out, &digest);
}

/// The first acceptable permessage-deflate offer over all Sec-WebSocket-Extensions headers.
pub fn negotiateDeflate(headers: []const http_fields.Header) ?DeflateParams {
    for (headers) |h| {
        if (!std.mem.eql(u8, h.name, "sec-websocket-extensions")) continue;
        var offers = std.mem.splitScalar(u8, h.value, ',');
        while (offers.next()) |offer| {
            if (parseDeflateOffer(offer)) |p| return p;
        }
    }
    return null;
}

fn trim(s: []const u8) []const u8 {
    return std.mem.trim(u8, s, " \t");
}

/// One offer: `permessage-deflate; param[=value]; ...`. Null when it is another
/// extension, or has unknown, repeated or out-of-range parameters (RFC 7692 7.1).
fn parseDeflateOffer(offer: []const u8) ?DeflateParams {
    var parts = std.mem.splitScalar(u8, offer, ';');
    if (!std.ascii.eqlIgnoreCase(trim(parts.first()), "permessage-deflate")) return null;
    var p = DeflateParams{};
    var seen = [_]bool{false} ** 4;
    while (parts.next()) |part| {
        const item = trim(part);
        const eq = std.mem.indexOfScalar(u8, item, '=');
        const name = trim(if (eq) |i| item[0..i] else item);
        var value: ?[]const u8 = if (eq) |i| trim(item[i + 1 ..]) else null;
        if (value) |v| {
            if (v.len >= 2 and v[0] == '"' and v[v.len - 1] == '"') value = v[1 .. v.len - 1];
        }
        const names = [_][]const u8{ "server_no_context_takeover", "client_no_context_takeover", "server_max_window_bits", "client_max_window_bits" };
        const idx = for (names, 0..) |n, i| {
            if (std.ascii.eqlIgnoreCase(name, n)) break i;
        } else return null;
        if (seen[idx]) return null;
        seen[idx] = true;
        switch (idx) {
            0, 1 => {
                if (value != null) return null;
                if (idx == 1) p.client_no_context_takeover = true;
            },
            2 => {
                const bits = windowBits(value orelse return null) orelse return null;
                // zlib cannot produce a raw deflate stream with a 256-byte window.
                if (bits == 8) return null;
                p.server_max_window_bits = bits;
                p.server_window_named = true;
            },
            3 => if (value) |v| {
                p.client_max_window_bits = windowBits(v) orelse return null;
            },
            else => unreachable,
        }
    }
    return p;
}

fn windowBits(v: []const u8) ?u4 {
    if (v.len == 0 or v.len > 2) return null;
    // 1*DIGIT (RFC 7692 7.1.2): `parseInt` alone would take "+9".
    for (v) |ch| if (!std.ascii.isDigit(ch)) return null;
    const n = std.fmt.parseInt(u8, v, 10) catch return null;
    if (n < 8 or n > 15) return null;
    return @intCast(n);
}

// ---- frames --------------------------------------------------------------------------

pub const FrameHeader = struct {
    fin: bool,
    rsv1: bool,
    opcode: Opcode,
    mask: [4]u8,
    payload_len: u64,
    /// Bytes of header before the payload.
    header_len: u8,
};

/// Parses a client frame header. Null when more bytes are needed. `allow_rsv1` is
/// true when permessage-deflate was negotiated.
pub fn parseHeader(buf: []const u8, allow_rsv1: bool) Failure!?FrameHeader {
    if (buf.len < 2) return null;
    const b0 = buf[0];
    const b1 = buf[1];
    const op: Opcode = @enumFromInt(@as(u4, @truncate(b0)));
    const fin = b0 & 0x80 != 0;
    const rsv1 = b0 & 0x40 != 0;
    if (b0 & 0x30 != 0) return error.ProtocolError;
    if (rsv1 and !allow_rsv1) return error.ProtocolError;
    switch (op) {
        .continuation, .text, .binary, .close, .ping, .pong => {},
        _ => return error.ProtocolError,
    }
    // Clients must mask every frame (RFC 6455 5.1).
    if (b1 & 0x80 == 0) return error.ProtocolError;
    const len7: u7 = @truncate(b1);
    var at: usize = 2;
    var len: u64 = len7;
    if (len7 == 126) {
        if (buf.len < 4) return null;
        len = std.mem.readInt(u16, buf[2..4], .big);
        at = 4;
    } else if (len7 == 127) {
        if (buf.len < 10) return null;
        len = std.mem.readInt(u64, buf[2..10], .big);
        if (len >> 63 != 0) return error.ProtocolError;
        at = 10;
    }
    if (op.isControl()) {
        if (!fin or rsv1 or len > control_payload_bytes_max) return error.ProtocolError;
    }
    if (buf.len < at + 4) return null;
    // What the session relies on: a control frame small enough for `Session.ctrl`, a
    // header no longer than `header_bytes_max` (both checked above as protocol errors).
    std.debug.assert(at + 4 <= header_bytes_max);
    std.debug.assert(!op.isControl() or (fin and len <= control_payload_bytes_max));
    return .{
        .fin = fin,
        .rsv1 = rsv1,
        .opcode = op,
        .mask = buf[at..][0..4].*,
        .payload_len = len,
        .header_len = @intCast(at + 4),
    };
}

/// Unmasks `data` in place; `offset` is how many payload bytes came before it.
pub fn unmask(data: []u8, mask: [4]u8, offset: u64) void {
    var key: [4]u8 = undefined;
    const shift: usize = @intCast(offset % 4);
    for (0..4) |i| key[i] = mask[(i + shift) % 4];
    const key8: u64 = @bitCast(key ++ key);
    var i: usize = 0;
    while (i + 8 <= data.len) : (i += 8) {
        const w = std.mem.readInt(u64, data[i..][0..8], .little);
        std.mem.writeInt(u64, data[i..][0..8], w ^ std.mem.littleToNative(u64, key8), .little);
    }
    while (i < data.len) : (i += 1) data[i] ^= key[i % 4];
}

/// Encodes a server frame header (servers never mask). Returns the bytes written.
pub fn encodeHeader(out: *[10]u8, fin: bool, rsv1: bool, opcode: Opcode, len: u64) []const u8 {
    // Contract: we frame only the six opcodes RFC 6455 5.2 defines; a control frame is
    // whole (FIN), uncompressed and at most 125 bytes; a length fits 63 bits.
    std.debug.assert(switch (opcode) {
        .continuation, .text, .binary, .close, .ping, .pong => true,
        _ => false,
    });
    std.debug.assert(!opcode.isControl() or (fin and !rsv1 and len <= control_payload_bytes_max));
    std.debug.assert(len >> 63 == 0);
    out[0] = @as(u8, @intFromEnum(opcode)) | (if (fin) @as(u8, 0x80) else 0) | (if (rsv1) @as(u8, 0x40) else 0);
    if (len < 126) {
        out[1] = @intCast(len);
        return out[0..2];
    }
    if (len <= 0xffff) {
        out[1] = 126;
        std.mem.writeInt(u16, out[2..4], @intCast(len), .big);
        return out[0..4];
    }
    out[1] = 127;
    std.mem.writeInt(u64, out[2..10], len, .big);
    return out[0..10];
}

/// Tracks fragmentation across data frames: which message is open, whether it is
/// compressed. Control frames may come between fragments and do not touch it.
pub const Sequence = struct {
    /// The opcode of the message in progress (text/binary), or null between messages.
    message: ?Opcode = null,
    compressed: bool = false,

    /// Checks a data frame header against the message in progress.
    pub fn onDataFrame(self: *Sequence, h: FrameHeader) Failure!void {
        std.debug.assert(!h.opcode.isControl());
        if (h.opcode == .continuation) {
            if (self.message == null) return error.ProtocolError;
            // RSV1 marks a compressed message on its first frame only (RFC 7692 6.1).
            if (h.rsv1) return error.ProtocolError;
        } else {
            if (self.message != null) return error.ProtocolError;
            self.message = h.opcode;
            self.compressed = h.rsv1;
        }
        std.debug.assert(self.message == .text or self.message == .binary);
    }

    /// The message's last frame was processed.
    pub fn endMessage(self: *Sequence) void {
        self.* = .{};
    }
};

// ---- UTF-8 ----------------------------------------------------------------------------

/// Incremental UTF-8 validation (RFC 3629: no overlongs, no surrogates, nothing past
/// U+10FFFF), so text split across fragments, reads or inflate output is checked
/// as it arrives.
pub const Utf8 = struct {
    /// Continuation bytes still expected in the current sequence.
    need: u8 = 0,
    /// Allowed range of the next continuation byte (narrower right after E0, ED, F0, F4).
    lo: u8 = 0x80,
    hi: u8 = 0xbf,

    pub fn feed(self: *Utf8, bytes: []const u8) bool {
        var i: usize = 0;
        while (i < bytes.len) {
            if (self.need == 0) {
                // ASCII runs are the common case: skip them eight at a time.
                while (i + 8 <= bytes.len and std.mem.readInt(u64, bytes[i..][0..8], .little) & 0x8080808080808080 == 0) i += 8;
                if (i == bytes.len) break;
                const b = bytes[i];
                i += 1;
                if (b < 0x80) continue;
                self.lo = 0x80;
                self.hi = 0xbf;
                switch (b) {
                    0xc2...0xdf => self.need = 1,
                    0xe0 => {
                        self.need = 2;
                        self.lo = 0xa0;
                    },
                    0xe1...0xec, 0xee, 0xef => self.need = 2,
                    0xed => {
                        self.need = 2;
                        self.hi = 0x9f;
                    },
                    0xf0 => {
                        self.need = 3;
                        self.lo = 0x90;
                    },
                    0xf1...0xf3 => self.need = 3,
                    0xf4 => {
                        self.need = 3;
                        self.hi = 0x8f;
                    },
                    else => return false,
                }
            } else {
                const b = bytes[i];
                i += 1;
                if (b < self.lo or b > self.hi) return false;
                self.need -= 1;
                self.lo = 0x80;
                self.hi = 0xbf;
            }
        }
        return true;
    }

    /// True when the text so far ends on a character boundary.
    pub fn complete(self: *const Utf8) bool {
        return self.need == 0;
    }
};

pub fn validUtf8(bytes: []const u8) bool {
    var v = Utf8{};
    return v.feed(bytes) and v.complete();
}

// ---- close frames ---------------------------------------------------------------------

pub const Close = struct {
    /// 1005 when the frame carried no code.
    code: u16,
    reason: []const u8,
};

/// A code that may appear in a close frame (RFC 6455 7.4; 1012-1014 are registered too).
pub fn validCloseCode(code: u16) bool {
    return switch (code) {
        1000...1003, 1007...1014 => true,
        3000...4999 => true,
        else => false,
    };
}

pub fn parseClose(payload: []const u8) Failure!Close {
    if (payload.len == 0) return .{ .code = 1005, .reason = "" };
    if (payload.len == 1) return error.ProtocolError;
    const code = std.mem.readInt(u16, payload[0..2], .big);
    if (!validCloseCode(code)) return error.ProtocolError;
    const reason = payload[2..];
    if (!validUtf8(reason)) return error.InvalidData;
    return .{ .code = code, .reason = reason };
}

/// A close frame's payload: code then reason (cut to fit 125 bytes on a character boundary).
pub fn encodeClosePayload(out: *[control_payload_bytes_max]u8, code: u16, reason: []const u8) []const u8 {
    // Contract: a code we send is a sendable one (1005, "no code", goes as an empty payload).
    std.debug.assert(code == 1005 or validCloseCode(code));
    if (code == 1005) return out[0..0];
    std.mem.writeInt(u16, out[0..2], code, .big);
    var n = @min(reason.len, control_payload_bytes_max - 2);
    while (n > 0 and n < reason.len and reason[n] & 0xc0 == 0x80) n -= 1;
    @memcpy(out[2..][0..n], reason[0..n]);
    return out[0 .. 2 + n];
}

// ---- tests ----------------------------------------------------------------------------

const testing = std.testing;

const rfc_key = "dGhlIHNhbXBsZSBub25jZQ==";

test "accept key from RFC 6455 section 1.3" {
    var out: [accept_bytes]u8 = undefined;
    acceptKey(rfc_key, &out);
    try testing.expectEqualStrings("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", &out);
}

test "key must be base64 of 16 bytes" {
    try testing.expect(validKey(rfc_key));
    try testing.expect(!validKey("dGhlIHNhbXBsZSBub25jZQ"));
    try testing.expect(!validKey("dGhlIHNhbXBsZSBub25jZXg=")); // 17 bytes
    try testing.expect(!validKey("dGhlIHNhbXBsZSBub25j*Q=="));
    try testing.expect(!validKey(""));
}

test "permessage-deflate negotiation" {
    const H = http_fields.Header;
    var buf: [256]u8 = undefined;
    const plain = negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; client_max_window_bits" }}).?;
    try testing.expectEqualStrings("permessage-deflate; server_no_context_takeover", plain.response(&buf));
    const full = negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "x-foo, permessage-deflate; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=\"12\"" }}).?;
    try testing.expect(full.client_no_context_takeover);
    try testing.expectEqual(@as(u4, 10), full.server_max_window_bits);
    try testing.expectEqualStrings("permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=10; client_max_window_bits=12", full.response(&buf));
    // Unknown or repeated parameters and bad values decline that offer; the next one may fit.
    try testing.expect(negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; foo" }}) == null);
    try testing.expect(negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; server_max_window_bits=16" }}) == null);
    try testing.expect(negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; server_max_window_bits" }}) == null);
    try testing.expect(negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; client_no_context_takeover; client_no_context_takeover" }}) == null);
    const second = negotiateDeflate(&[_]H{.{ .name = "sec-websocket-extensions", .value = "permessage-deflate; server_max_window_bits=8, permessage-deflate" }}).?;
    try testing.expectEqual(@as(u4, 15), second.server_max_window_bits);
}

test "frame header lengths and mask" {
    const h = (try parseHeader(&[_]u8{ 0x81, 0x85, 1, 2, 3, 4 }, false)).?;
    try testing.expect(h.fin and h.opcode == .text and h.payload_len == 5 and h.header_len == 6);
    try testing.expectEqualSlices(u8, &.{ 1, 2, 3, 4 }, &h.mask);
    const h16 = (try parseHeader(&[_]u8{ 0x82, 0xfe, 0x01, 0x00, 0, 0, 0, 0 }, false)).?;
    try testing.expectEqual(@as(u64, 256), h16.payload_len);
    try testing.expectEqual(@as(u8, 8), h16.header_len);
    const h64 = (try parseHeader(&[_]u8{ 0x02, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 9, 9, 9, 9 }, false)).?;
    try testing.expectEqual(@as(u64, 1 << 32), h64.payload_len);
    try testing.expect(!h64.fin and h64.opcode == .binary);
    // Incomplete headers ask for more bytes.
    try testing.expect((try parseHeader(&[_]u8{0x81}, false)) == null);
    try testing.expect((try parseHeader(&[_]u8{ 0x81, 0xfe, 0x01 }, false)) == null);
    try testing.expect((try parseHeader(&[_]u8{ 0x81, 0x85, 1, 2 }, false)) == null);
}

test "frame header refusals" {
    const E = error.ProtocolError;
    try testing.expectError(E, parseHeader(&[_]u8{ 0x81, 0x05 }, false)); // unmasked
    try testing.expectError(E, parseHeader(&[_]u8{ 0xc1, 0x85 }, false)); // RSV1 without deflate
    try testing.expect((try parseHeader(&[_]u8{ 0xc1, 0x85, 0, 0, 0, 0 }, true)) != null);
    try testing.expectError(E, parseHeader(&[_]u8{ 0xa1, 0x85 }, true)); // RSV2
    try testing.expectError(E, parseHeader(&[_]u8{ 0x91, 0x85 }, true)); // RSV3
    try testing.expectError(E, parseHeader(&[_]u8{ 0x83, 0x80 }, false)); // reserved data opcode
    try testing.expectError(E, parseHeader(&[_]u8{ 0x8b, 0x80 }, false)); // reserved control opcode
    try testing.expectError(E, parseHeader(&[_]u8{ 0x09, 0x80 }, false)); // fragmented ping
    try testing.expectError(E, parseHeader(&[_]u8{ 0x89, 0xfe, 0, 126 }, false)); // control > 125
    try testing.expectError(E, parseHeader(&[_]u8{ 0xc9, 0x80 }, true)); // compressed control
    try testing.expectError(E, parseHeader(&[_]u8{ 0x82, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0 }, false)); // 64-bit MSB
}

test "fragment sequences" {
    var s = Sequence{};
    const frame = struct {
        fn f(op: Opcode, fin: bool, rsv1: bool) FrameHeader {
            return .{ .fin = fin, .rsv1 = rsv1, .opcode = op, .mask = .{ 0, 0, 0, 0 }, .payload_len = 0, .header_len = 6 };
        }
    }.f;
    try testing.expectError(error.ProtocolError, s.onDataFrame(frame(.continuation, true, false)));
    try s.onDataFrame(frame(.text, false, true));
    try testing.expect(s.compressed);
    try testing.expectError(error.ProtocolError, s.onDataFrame(frame(.binary, true, false)));
    try testing.expectError(error.ProtocolError, s.onDataFrame(frame(.continuation, true, true)));
    try s.onDataFrame(frame(.continuation, true, false));
    s.endMessage();
    try testing.expect(s.message == null);
}

test "unmask at any offset" {
    const mask = [4]u8{ 0x37, 0xfa, 0x21, 0x3d };
    var data = [_]u8{ 0x7f, 0x9f, 0x4d, 0x51, 0x58 }; // RFC 6455 5.7 "Hello"
    unmask(&data, mask, 0);
    try testing.expectEqualStrings("Hello", &data);
    var long: [37]u8 = undefined;
    for (&long, 0..) |*b, i| b.* = @intCast(i);
    var split = long;
    unmask(&long, mask, 0);
    unmask(split[0..11], mask, 0);
    unmask(split[11..], mask, 11);
    try testing.expectEqualSlices(u8, &long, &split);
}

test "frame encoding" {
    var out: [10]u8 = undefined;
    try testing.expectEqualSlices(u8, &.{ 0x81, 5 }, encodeHeader(&out, true, false, .text, 5));
    try testing.expectEqualSlices(u8, &.{ 0xc2, 126, 0x01, 0x00 }, encodeHeader(&out, true, true, .binary, 256));
    try testing.expectEqualSlices(u8, &.{ 0x02, 127, 0, 0, 0, 0, 0, 1, 0, 0 }, encodeHeader(&out, false, false, .binary, 65536));
    try testing.expectEqualSlices(u8, &.{ 0x88, 125 }, encodeHeader(&out, true, false, .close, 125));
}

test "utf-8 validation, incremental" {
    try testing.expect(validUtf8("hello, wörld €𝄞"));
    try testing.expect(!validUtf8("\xc0\xaf")); // overlong
    try testing.expect(!validUtf8("\xe0\x80\xaf")); // overlong
    try testing.expect(!validUtf8("\xed\xa0\x80")); // surrogate
    try testing.expect(!validUtf8("\xf4\x90\x80\x80")); // > U+10FFFF
    try testing.expect(!validUtf8("\xff"));
    try testing.expect(!validUtf8("abc\xe2\x82")); // truncated
    // Split anywhere, the same verdict.
    const text = "κόσμε 𝄞 and some ascii padding to pass eight bytes";
    for (0..text.len) |cut| {
        var v = Utf8{};
        try testing.expect(v.feed(text[0..cut]));
        try testing.expect(v.feed(text[cut..]));
        try testing.expect(v.complete());
    }
    var v = Utf8{};
    try testing.expect(v.feed("\xf0\x9d"));
    try testing.expect(!v.complete());
    try testing.expect(!v.feed("\x41"));
}

test "close payloads" {
    try testing.expectEqual(@as(u16, 1005), (try parseClose("")).code);
    try testing.expectError(error.ProtocolError, parseClose("\x03"));
    const c = try parseClose("\x03\xe8bye");
    try testing.expectEqual(@as(u16, 1000), c.code);
    try testing.expectEqualStrings("bye", c.reason);
    try testing.expectError(error.ProtocolError, parseClose("\x03\xed")); // 1005 never on the wire
    try testing.expectError(error.ProtocolError, parseClose("\x03\xee")); // 1006
    try testing.expectError(error.ProtocolError, parseClose("\x03\xe7")); // 999
    try testing.expectError(error.ProtocolError, parseClose("\x13\x88")); // 5000
    try testing.expectEqual(@as(u16, 4000), (try parseClose("\x0f\xa0")).code);
    try testing.expectError(error.InvalidData, parseClose("\x03\xe8\xff"));
    var out: [control_payload_bytes_max]u8 = undefined;
    try testing.expectEqualSlices(u8, "\x03\xe8ok", encodeClosePayload(&out, 1000, "ok"));
    const long = "é" ** 100;
    const p = encodeClosePayload(&out, 1000, long);
    try testing.expect(p.len <= 125 and validUtf8(p[2..]));
    try testing.expectEqual(@as(usize, 0), encodeClosePayload(&out, 1005, "x").len);
}

test "hostile bytes never crash the frame parser, and UTF-8 matches std" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const r = prng.random();
    var buf: [32]u8 = undefined;
    for (0..200_000) |_| {
        const n = r.uintAtMost(usize, buf.len);
        r.bytes(buf[0..n]);
        if (parseHeader(buf[0..n], r.boolean()) catch null) |h| {
            try testing.expect(h.header_len <= header_bytes_max and h.header_len <= n);
            if (h.opcode.isControl()) try testing.expect(h.payload_len <= control_payload_bytes_max and h.fin);
        }
        const close_payload = buf[0..@min(n, control_payload_bytes_max)];
        if (parseClose(close_payload)) |c| {
            try testing.expect(c.code == 1005 or validCloseCode(c.code));
            try testing.expect(validUtf8(c.reason));
        } else |err| switch (err) {
            // Random bytes are mostly a code no one may send, or a reason that is not UTF-8.
            error.ProtocolError, error.InvalidData => {},
            else => return err,
        }
        // Mostly-valid text: random code points with a sprinkle of random bytes.
        var text: [64]u8 = undefined;
        var len: usize = 0;
        while (len + 4 < text.len) {
            if (r.uintLessThan(u8, 16) == 0) {
                text[len] = r.int(u8);
                len += 1;
            } else {
                const cp = r.uintAtMost(u21, 0x10ffff);
                if (cp >= 0xd800 and cp <= 0xdfff) continue;
                len += std.unicode.utf8Encode(cp, text[len..]) catch unreachable;
            }
        }
        try testing.expectEqual(std.unicode.utf8ValidateSlice(text[0..len]), validUtf8(text[0..len]));
        const cut = r.uintAtMost(usize, len);
        var v = Utf8{};
        const ok = v.feed(text[0..cut]) and v.feed(text[cut..len]) and v.complete();
        try testing.expectEqual(std.unicode.utf8ValidateSlice(text[0..len]), ok);
    }
}
