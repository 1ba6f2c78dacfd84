//! Proxy headers: who the client really is, when a trusted proxy says so.
//!
//! Only a peer inside `--forwarded-allow-ips` is believed. From such a peer the RFC 7239
//! `Forwarded` header (preferred) or `X-Forwarded-For` / `-Proto` / `-Host` name the
//! client, scheme and host. Proxies append to these lists, so they are read right to
//! left: the first hop that is not itself a trusted proxy is the client (uvicorn's
//! rule). Values that are not IP addresses or known schemes are ignored, never echoed.
const std = @import("std");
const Header = @import("../http/fields.zig").Header;

/// A bound on the configuration, like every other list in the engine.
pub const networks_max = 64;

pub const Network = struct {
    /// 4 or 6
    version: u8,
    addr: [16]u8,
    prefix_bits: u8,

    fn contains(self: Network, version: u8, addr: *const [16]u8) bool {
        if (self.version != version) return false;
        const full_bytes = self.prefix_bits / 8;
        if (!std.mem.eql(u8, self.addr[0..full_bytes], addr[0..full_bytes])) return false;
        const rest_bits: u3 = @intCast(self.prefix_bits % 8);
        if (rest_bits == 0) return true;
        const mask: u8 = @as(u8, 0xff) << @intCast(8 - @as(u4, rest_bits));
        return (self.addr[full_bytes] & mask) == (addr[full_bytes] & mask);
    }
};

pub const Ip = struct {
    version: u8,
    addr: [16]u8,
};

/// An IPv4 or IPv6 literal (IPv6 without brackets or zone), or null.
pub fn parseIp(text: []const u8) ?Ip {
    if (text.len == 0 or text.len > 45) return null;
    var ip = Ip{ .version = 4, .addr = [_]u8{0} ** 16 };
    if (std.mem.indexOfScalar(u8, text, ':') == null) {
        const a = std.net.Ip4Address.parse(text, 0) catch return null;
        @memcpy(ip.addr[0..4], std.mem.asBytes(&a.sa.addr));
        return ip;
    }
    if (std.mem.indexOfScalar(u8, text, '%') != null) return null;
    const a = std.net.Ip6Address.parse(text, 0) catch return null;
    ip.version = 6;
    ip.addr = a.sa.addr;
    return ip;
}

pub const Trust = struct {
    all: bool = false,
    /// Peers on a Unix socket (a proxy on the same host).
    unix: bool = false,
    networks: [networks_max]Network = undefined,
    count: usize = 0,

    /// Adds "*", "unix:", an address or a CIDR network.
    pub fn add(self: *Trust, text_raw: []const u8) error{ Invalid, TooMany }!void {
        const text = std.mem.trim(u8, text_raw, " \t");
        if (std.mem.eql(u8, text, "*")) {
            self.all = true;
            return;
        }
        if (std.mem.eql(u8, text, "unix:")) {
            self.unix = true;
            return;
        }
        if (self.count == networks_max) return error.TooMany;
        const slash = std.mem.indexOfScalar(u8, text, '/');
        const ip = parseIp(if (slash) |s| text[0..s] else text) orelse return error.Invalid;
        const bits_max: u8 = if (ip.version == 4) 32 else 128;
        var bits = bits_max;
        if (slash) |s| bits = std.fmt.parseUnsigned(u8, text[s + 1 ..], 10) catch return error.Invalid;
        if (bits > bits_max) return error.Invalid;
        self.networks[self.count] = .{ .version = ip.version, .addr = ip.addr, .prefix_bits = bits };
        self.count += 1;
    }

    pub fn trustsIp(self: *const Trust, ip: Ip) bool {
        if (self.all) return true;
        for (self.networks[0..self.count]) |n| {
            if (n.contains(ip.version, &ip.addr)) return true;
        }
        return false;
    }

    /// Whether a connection's peer (its socket family and address bytes, IPv4 in the
    /// first four) is a trusted proxy; Unix-socket peers only with "unix:" or "*".
    pub fn trustsPeer(self: *const Trust, family: u16, addr: *const [16]u8) bool {
        return switch (family) {
            std.os.linux.AF.UNIX => self.unix or self.all,
            std.os.linux.AF.INET => self.trustsIp(.{ .version = 4, .addr = addr[0..4].* ++ [_]u8{0} ** 12 }),
            std.os.linux.AF.INET6 => self.trustsIp(.{ .version = 6, .addr = addr.* }),
            else => false,
        };
    }

    fn trustsText(self: *const Trust, host: []const u8) bool {
        if (self.all) return true;
        const ip = parseIp(host) orelse return false;
        return self.trustsIp(ip);
    }
};

pub const Scheme = enum { http, https };

/// What the trusted proxies told us. Slices point into the request's header values.
pub const Forwarded = struct {
    client_host: ?[]const u8 = null,
    client_port: u16 = 0,
    scheme: ?Scheme = null,
    host: ?[]const u8 = null,

    pub fn any(self: Forwarded) bool {
        return self.client_host != null or self.scheme != null or self.host != null;
    }
};

/// Reads the proxy headers of a request that came from a trusted peer.
pub fn resolve(trust: *const Trust, headers: []const Header) Forwarded {
    var rfc: ?[]const u8 = null;
    var xff: ?[]const u8 = null;
    var proto: ?[]const u8 = null;
    var host: ?[]const u8 = null;
    for (headers) |h| {
        // Every name looked for starts with 'f' or 'x' and has at least 9 bytes: most
        // fields of a request are passed over without a comparison.
        if (h.name.len < "forwarded".len or (h.name[0] != 'f' and h.name[0] != 'x')) continue;
        if (std.mem.eql(u8, h.name, "forwarded")) {
            rfc = h.value;
        } else if (std.mem.eql(u8, h.name, "x-forwarded-for")) {
            xff = h.value;
        } else if (std.mem.eql(u8, h.name, "x-forwarded-proto")) {
            proto = h.value;
        } else if (std.mem.eql(u8, h.name, "x-forwarded-host")) {
            host = h.value;
        }
    }
    if (rfc) |value| return fromForwarded(trust, value);
    var out = Forwarded{};
    if (xff) |value| out.client_host = clientFromList(trust, value);
    if (proto) |value| out.scheme = schemeOf(lastItem(value));
    if (host) |value| out.host = hostOf(lastItem(value));
    return out;
}

/// X-Forwarded-For: the rightmost untrusted hop, else the leftmost.
fn clientFromList(trust: *const Trust, list: []const u8) ?[]const u8 {
    var chosen: ?[]const u8 = null;
    var it = std.mem.splitBackwardsScalar(u8, list, ',');
    while (it.next()) |raw| {
        const item = std.mem.trim(u8, raw, " \t");
        if (parseIp(item) == null) return chosen; // garbage ends the walk: keep what we know
        chosen = item;
        if (!trust.trustsText(item)) return item;
    }
    return chosen;
}

fn lastItem(list: []const u8) []const u8 {
    const comma = std.mem.lastIndexOfScalar(u8, list, ',') orelse return std.mem.trim(u8, list, " \t");
    return std.mem.trim(u8, list[comma + 1 ..], " \t");
}

fn schemeOf(text: []const u8) ?Scheme {
    if (std.ascii.eqlIgnoreCase(text, "http") or std.ascii.eqlIgnoreCase(text, "ws")) return .http;
    if (std.ascii.eqlIgnoreCase(text, "https") or std.ascii.eqlIgnoreCase(text, "wss")) return .https;
    return null;
}

/// A host[:port] as a Host header would carry it: visible ASCII without separators.
fn hostOf(text: []const u8) ?[]const u8 {
    if (text.len == 0 or text.len > 255) return null;
    for (text) |ch| {
        if (ch <= ' ' or ch >= 0x7f or ch == ',' or ch == ';' or ch == '"' or ch == '/' or ch == '\\') return null;
    }
    return text;
}

const Element = struct {
    for_host: ?[]const u8 = null,
    for_port: u16 = 0,
    proto: ?Scheme = null,
    host: ?[]const u8 = null,
    valid_for: bool = false,
};

/// RFC 7239: the element added by the proxy that met the client is the rightmost one
/// whose `for` is not a trusted proxy; its proto and host describe the original request.
fn fromForwarded(trust: *const Trust, value: []const u8) Forwarded {
    var chosen: ?Element = null;
    var it = std.mem.splitBackwardsScalar(u8, value, ',');
    while (it.next()) |raw| {
        const el = parseElement(raw) orelse break;
        if (!el.valid_for) {
            if (chosen == null) chosen = el; // a proxy that hides the client: still its proto/host
            break;
        }
        chosen = el;
        if (!trust.trustsText(el.for_host.?)) break;
    }
    const el = chosen orelse return .{};
    return .{ .client_host = el.for_host, .client_port = el.for_port, .scheme = el.proto, .host = el.host };
}

fn parseElement(raw: []const u8) ?Element {
    var el = Element{};
    var pairs = std.mem.splitScalar(u8, raw, ';');
    while (pairs.next()) |pair_raw| {
        const pair = std.mem.trim(u8, pair_raw, " \t");
        if (pair.len == 0) continue;
        const eq = std.mem.indexOfScalar(u8, pair, '=') orelse return null;
        const name = pair[0..eq];
        var v = pair[eq + 1 ..];
        if (v.len >= 2 and v[0] == '"' and v[v.len - 1] == '"') v = v[1 .. v.len - 1];
        if (std.ascii.eqlIgnoreCase(name, "for")) {
            splitNode(v, &el);
        } else if (std.ascii.eqlIgnoreCase(name, "proto")) {
            el.proto = schemeOf(v);
        } else if (std.ascii.eqlIgnoreCase(name, "host")) {
            el.host = hostOf(v);
        }
    }
    return el;
}

/// node = "192.0.2.43" / "192.0.2.43:47011" / "[2001:db8::1]" / "[2001:db8::1]:4711" / "unknown" / "_hidden"
fn splitNode(v: []const u8, el: *Element) void {
    var host = v;
    var port: []const u8 = "";
    if (v.len > 0 and v[0] == '[') {
        const close = std.mem.indexOfScalar(u8, v, ']') orelse return;
        host = v[1..close];
        if (close + 1 < v.len) {
            if (v[close + 1] != ':') return;
            port = v[close + 2 ..];
        }
    } else if (std.mem.indexOfScalar(u8, v, ':')) |colon| {
        if (std.mem.indexOfScalarPos(u8, v, colon + 1, ':') != null) return; // bare IPv6 is not allowed here
        host = v[0..colon];
        port = v[colon + 1 ..];
    }
    if (parseIp(host) == null) return;
    el.for_host = host;
    el.for_port = decimalPort(port);
    el.valid_for = true;
}

// ---- tests -------------------------------------------------------------------

fn testTrust(entries: []const []const u8) Trust {
    var t = Trust{};
    for (entries) |e| t.add(e) catch unreachable;
    return t;
}

fn hdrs(comptime pairs: anytype) [pairs.len]Header {
    var out: [pairs.len]Header = undefined;
    inline for (pairs, 0..) |p, i| out[i] = .{ .name = p[0], .value = p[1] };
    return out;
}

/// A port of one to five digits, or 0 (none, or an obfuscated one: RFC 7239 6.3).
/// `parseUnsigned` alone would take "8_0" as 80.
fn decimalPort(text: []const u8) u16 {
    if (text.len == 0 or text.len > 5) return 0;
    for (text) |ch| if (!std.ascii.isDigit(ch)) return 0;
    return std.fmt.parseUnsigned(u16, text, 10) catch 0;
}

test "networks and addresses" {
    const t = testTrust(&.{ "127.0.0.1", "10.0.0.0/8", "2001:db8::/32", "192.168.1.128/25" });
    try std.testing.expect(t.trustsText("127.0.0.1"));
    try std.testing.expect(!t.trustsText("127.0.0.2"));
    try std.testing.expect(t.trustsText("10.200.3.4"));
    try std.testing.expect(t.trustsText("2001:db8:ffff::1"));
    try std.testing.expect(!t.trustsText("2001:db9::1"));
    try std.testing.expect(t.trustsText("192.168.1.200"));
    try std.testing.expect(!t.trustsText("192.168.1.100"));
    try std.testing.expect(!t.trustsText("not-an-ip"));
    var bad = Trust{};
    try std.testing.expectError(error.Invalid, bad.add("10.0.0.0/33"));
    try std.testing.expectError(error.Invalid, bad.add("example.com"));
    try std.testing.expectError(error.Invalid, bad.add("1.2.3.4/x"));
    for (0..networks_max) |_| try bad.add("1.2.3.4");
    try std.testing.expectError(error.TooMany, bad.add("1.2.3.4"));
}

test "x-forwarded-for: rightmost untrusted hop" {
    const t = testTrust(&.{ "127.0.0.1", "10.0.0.0/8" });
    const h = hdrs(.{ .{ "x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.1.1.1" }, .{ "x-forwarded-proto", "https" }, .{ "x-forwarded-host", "example.com" } });
    const f = resolve(&t, &h);
    try std.testing.expectEqualStrings("198.51.100.7", f.client_host.?);
    try std.testing.expectEqual(Scheme.https, f.scheme.?);
    try std.testing.expectEqualStrings("example.com", f.host.?);
    // All hops trusted: the leftmost is the client.
    const h2 = hdrs(.{.{ "x-forwarded-for", "10.0.0.5,10.0.0.6" }});
    try std.testing.expectEqualStrings("10.0.0.5", resolve(&t, &h2).client_host.?);
    // Garbage is never echoed.
    const h3 = hdrs(.{ .{ "x-forwarded-for", "<script>" }, .{ "x-forwarded-proto", "gopher" }, .{ "x-forwarded-host", "a b" } });
    try std.testing.expect(!resolve(&t, &h3).any());
}

test "forwarded: elements, quoting, ports, ipv6" {
    const t = testTrust(&.{"10.0.0.0/8"});
    const h = hdrs(.{.{ "forwarded", "for=192.0.2.60;proto=https;host=shop.example, for=\"[2001:db8:cafe::17]:4711\";proto=http, for=10.0.0.1" }});
    const f = resolve(&t, &h);
    try std.testing.expectEqualStrings("2001:db8:cafe::17", f.client_host.?);
    try std.testing.expectEqual(@as(u16, 4711), f.client_port);
    try std.testing.expectEqual(Scheme.http, f.scheme.?);
    const all = testTrust(&.{"*"});
    const g = resolve(&all, &h);
    try std.testing.expectEqualStrings("192.0.2.60", g.client_host.?);
    try std.testing.expectEqualStrings("shop.example", g.host.?);
    try std.testing.expectEqual(Scheme.https, g.scheme.?);
    // Forwarded wins over X-Forwarded-*.
    const h2 = hdrs(.{ .{ "x-forwarded-for", "1.1.1.1" }, .{ "forwarded", "for=2.2.2.2:80" } });
    try std.testing.expectEqualStrings("2.2.2.2", resolve(&t, &h2).client_host.?);
    // A hidden client: its proxy's proto still counts, the client stays unknown.
    const h3 = hdrs(.{.{ "forwarded", "for=_hidden;proto=https" }});
    const k = resolve(&t, &h3);
    try std.testing.expect(k.client_host == null);
    try std.testing.expectEqual(Scheme.https, k.scheme.?);
    const h4 = hdrs(.{.{ "forwarded", "garbage, for=[::1" }});
    try std.testing.expect(!resolve(&t, &h4).any());
    // Ports: digits only, up to 65535; anything else is no port.
    const ports = .{
        .{ "for=\"2.2.2.2:65535\"", 65535 }, .{ "for=\"2.2.2.2:65536\"", 0 },
        .{ "for=\"2.2.2.2:8_0\"", 0 },       .{ "for=\"2.2.2.2:+80\"", 0 },
        .{ "for=\"2.2.2.2:_p\"", 0 },        .{ "for=\"2.2.2.2:000080\"", 0 },
    };
    inline for (ports) |c| {
        const hp = hdrs(.{.{ "forwarded", c[0] }});
        try std.testing.expectEqual(@as(u16, c[1]), resolve(&t, &hp).client_port);
    }
}
