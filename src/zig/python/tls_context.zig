//! HTTPS set-up from Python: loading OpenSSL (`tls_load`) and building the server's
//! TLS context from the options, so a bad certificate, key or password fails at start-up.
const std = @import("std");
const py = @import("capi.zig");
const c = py.c;
const Object = py.Object;
const tls = @import("../transport/openssl.zig");
const scope = @import("scope.zig");
const options = @import("options.zig");
const EngineObjectCore = @import("engine.zig").EngineObjectCore;
const http3 = @import("../server/http3.zig"); // QUIC's context and the worker, beside TCP

/// A str option as a C string (borrowed from the options dict), or null when absent/None.
fn optPath(opts: *Object, comptime key: [:0]const u8) error{Invalid}!?[*:0]const u8 {
    const v = options.required(opts, key) orelse return error.Invalid;
    if (py.isNone(v)) return null;
    if (c.PyUnicode_Check(v) == 0) {
        c.PyErr_SetString(c.PyExc_TypeError, key ++ " must be a str");
        return error.Invalid;
    }
    const p = c.PyUnicode_AsUTF8(v) orelse return error.Invalid;
    return @ptrCast(p);
}

/// With `ssl_certfile` in the options the server speaks HTTPS: the TLS context is
/// built here, so a bad certificate, key or password fails at start-up, once.
pub fn setTls(self: *EngineObjectCore, opts: *Object) bool {
    comptime std.debug.assert(options.limit("ssl_min_version").low == tls.TLS1_2_VERSION);
    comptime std.debug.assert(options.limit("ssl_max_version").high == tls.TLS1_3_VERSION);
    const certfile = (optPath(opts, "ssl_certfile") catch return false) orelse return true;
    if (!tls.isLoaded()) {
        _ = py.runtimeError("OpenSSL is not loaded: call zigcorn._core.tls_load() first");
        return false;
    }
    const pw = options.required(opts, "ssl_keyfile_password") orelse return false;
    // Borrowed for the duration of the key load only; never copied, never shown.
    const password: ?[]const u8 = if (py.isNone(pw)) null else py.bytesView(pw) orelse {
        _ = py.typeError("ssl_keyfile_password must be bytes");
        return false;
    };
    var o = tls.ContextOptions{
        .certfile = certfile,
        .keyfile = optPath(opts, "ssl_keyfile") catch return false,
        .ca_certs = optPath(opts, "ssl_ca_certs") catch return false,
        .ciphers = optPath(opts, "ssl_ciphers") catch return false,
        .password = password,
        .cert_reqs = options.optLimited(opts, "ssl_cert_reqs", u8) orelse return false,
        .min_version = options.optLimited(opts, "ssl_min_version", c_long) orelse return false,
        .max_version = options.optLimited(opts, "ssl_max_version", c_long) orelse return false,
        .http2 = options.optBool(opts, "http2") orelse return false,
        .session_tickets = options.optBool(opts, "ssl_session_tickets") orelse return false,
        .session_cache = options.optLimited(opts, "ssl_session_cache", u32) orelse return false,
        .crl = optPath(opts, "ssl_crl") catch return false,
    };
    const keys = options.required(opts, "ssl_ticket_keys") orelse return false;
    if (!py.isNone(keys)) {
        const bytes = py.bytesView(keys) orelse return false;
        if (bytes.len != tls.ticket_keys_len) {
            _ = py.typeError("ssl_ticket_keys must be 80 bytes");
            return false;
        }
        o.ticket_keys = bytes;
    }
    var err = tls.ContextError{};
    const ctx = tls.newContext(o, &err) orelse {
        setErrorText(c.PyExc_ValueError, err.text());
        return false;
    };
    self.server.?.useTls(ctx);
    self.info.tls_server_cert = scope.serverCertPem(ctx) orelse return false;
    if (self.server.?.opts.http3 != null) {
        var qerr = tls.ContextError{};
        http3.start(self.server.?, o, &qerr) catch |e| switch (e) {
            error.ContextFailed => {
                setErrorText(c.PyExc_ValueError, qerr.text());
                return false;
            },
            else => {
                _ = py.runtimeError("could not start HTTP/3 (memory, timerfd or the event source)");
                return false;
            },
        };
    }
    return true;
}

pub fn setErrorText(exc: ?*Object, text: []const u8) void {
    const msg = c.PyUnicode_DecodeUTF8(text.ptr, @intCast(text.len), "replace") orelse return;
    c.PyErr_SetObject(exc, msg);
    py.decref(msg);
}

/// tls_load(path: str) -> OpenSSL version: loads libssl (once per process). Raises
/// OSError with one line naming what is missing.
pub fn moduleTlsLoad(_: ?*Object, arg: ?*Object) callconv(.c) ?*Object {
    const path = c.PyUnicode_AsUTF8(arg) orelse return null;
    tls.load(path) catch |err| {
        const why: [:0]const u8 = switch (err) {
            error.LibraryNotFound => "not found",
            error.SymbolMissing => "not OpenSSL 3 (an older or different library)",
            error.TooOld => "older than OpenSSL 3.0",
            error.InitFailed => "OpenSSL failed to initialise",
        };
        var buf: [512]u8 = undefined;
        const text = std.fmt.bufPrint(&buf, "TLS needs OpenSSL 3: {s}: {s} ({s})", .{ std.mem.span(path), why, tls.loadErrorDetail() }) catch "TLS needs OpenSSL 3";
        setErrorText(c.PyExc_OSError, text);
        return null;
    };
    var buf: [32]u8 = undefined;
    return py.str(tls.versionText(&buf));
}

/// tls_loaded() -> whether this process's engine has loaded OpenSSL.
pub fn moduleTlsLoaded(_: ?*Object, _: ?*Object) callconv(.c) ?*Object {
    return py.boolean(tls.isLoaded());
}
