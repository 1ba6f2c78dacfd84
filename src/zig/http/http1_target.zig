//! The request-target's four forms (RFC 9112 3.2), split into path, query and authority
//! for the head parser (`http/http1_parser.zig`): origin-form, absolute-form, authority-form
//! (CONNECT only) and asterisk-form (OPTIONS only). Bytes were already checked against
//! the target's byte class; what is left here is each form's shape.
const std = @import("std");
const host_table = @import("http1_parser.zig").host_table;

pub const TargetParts = struct { path: []const u8, query: []const u8, authority: ?[]const u8 };

/// RFC 9112 3.2: origin-form, absolute-form, authority-form (CONNECT only) and
/// asterisk-form (OPTIONS only).
pub fn split(method: []const u8, target: []const u8) error{BadRequest}!TargetParts {
    std.debug.assert(target.len > 0);
    if (std.mem.eql(u8, method, "CONNECT")) {
        try validateAuthorityForm(target);
        return .{ .path = "", .query = "", .authority = null };
    }
    if (target[0] == '/') return splitQuery(target, null);
    if (std.mem.eql(u8, target, "*")) {
        if (!std.mem.eql(u8, method, "OPTIONS")) return error.BadRequest;
        return .{ .path = "*", .query = "", .authority = null };
    }
    return splitAbsoluteForm(target);
}

fn splitQuery(path_and_query: []const u8, authority: ?[]const u8) TargetParts {
    const question = std.mem.indexOfScalar(u8, path_and_query, '?') orelse
        return .{ .path = path_and_query, .query = "", .authority = authority };
    return .{
        .path = path_and_query[0..question],
        .query = path_and_query[question + 1 ..],
        .authority = authority,
    };
}

fn splitAbsoluteForm(target: []const u8) error{BadRequest}!TargetParts {
    const scheme_len: usize = if (std.ascii.startsWithIgnoreCase(target, "http://"))
        "http://".len
    else if (std.ascii.startsWithIgnoreCase(target, "https://"))
        "https://".len
    else
        return error.BadRequest;
    const rest = target[scheme_len..];
    const authority_len = std.mem.indexOfAny(u8, rest, "/?#") orelse rest.len;
    const authority = rest[0..authority_len];
    // RFC 9110 4.2.1: an http(s) URI with an empty host is invalid.
    if (authority.len == 0) return error.BadRequest;
    for (authority) |c| if (!host_table[c]) return error.BadRequest;
    const path_and_query = rest[authority_len..];
    var parts = splitQuery(path_and_query, authority);
    if (parts.path.len == 0) parts.path = "/";
    return parts;
}

/// authority-form = uri-host ":" port
fn validateAuthorityForm(target: []const u8) error{BadRequest}!void {
    const colon = std.mem.lastIndexOfScalar(u8, target, ':') orelse return error.BadRequest;
    const host = target[0..colon];
    const port = target[colon + 1 ..];
    if (host.len == 0 or port.len == 0) return error.BadRequest;
    for (host) |c| if (!host_table[c]) return error.BadRequest;
    for (port) |c| if (!std.ascii.isDigit(c)) return error.BadRequest;
}
