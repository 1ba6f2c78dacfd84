//! TLS on a connection's own non-blocking socket, with OpenSSL 3 loaded at run time.
//!
//! The extension does not link libssl: a plain-HTTP server must not pay for (or even
//! map) OpenSSL, and building must not need its headers. The few functions used are
//! declared here with opaque pointers and resolved with dlopen/dlsym the first time
//! TLS is configured (`load`).
//!
//! OpenSSL moves ciphertext through a BIO of ours (`transport`), not its socket BIO:
//! its reads and writes call back into the connection, which uses the engine's I/O
//! backend (`os/io.zig`). On epoll that is the socket call, so no bytes are copied between
//! buffers; a completion-based backend hands over the bytes its completions brought
//! instead. WANT_READ / WANT_WRITE become the connection's interest in core/connection.zig.
const std = @import("std");

pub const SSL_CTX = opaque {};
pub const SSL = opaque {};
pub const SSL_METHOD = opaque {};
pub const SSL_CIPHER = opaque {};
pub const SSL_SESSION = opaque {};
pub const X509_STORE = opaque {};
pub const X509 = opaque {};
pub const X509_NAME = opaque {};
pub const BIO = opaque {};
pub const BIO_METHOD = opaque {};
pub const STACK = opaque {};

// Values of OpenSSL 3's public ABI (ssl.h, tls1.h, bio.h, x509.h, asn1.h).
const SSL_FILETYPE_PEM = 1;
const SSL_CTRL_MODE = 33;
const SSL_CTRL_SET_SESS_CACHE_MODE = 44;
const SSL_CTRL_SET_SESS_CACHE_SIZE = 42;
const SSL_CTRL_SET_TLSEXT_TICKET_KEYS = 59;
const SSL_SESS_CACHE_SERVER = 0x2;
const SSL_OP_NO_TICKET: u64 = 1 << 14;
const X509_V_FLAG_CRL_CHECK: c_ulong = 0x4;
/// The bytes of session ticket keys OpenSSL 3 takes: a name, an HMAC key, an AES key.
pub const ticket_keys_len = 80;
/// A stack's item destructor (OPENSSL_sk_pop_free's).
const FreeFn = fn (?*anyopaque) callconv(.c) void;
const SSL_CTRL_SET_MIN_PROTO_VERSION = 123;
const SSL_CTRL_SET_MAX_PROTO_VERSION = 124;
const SSL_MODE_ENABLE_PARTIAL_WRITE = 0x1;
const SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER = 0x2;
const SSL_MODE_RELEASE_BUFFERS = 0x10;
const SSL_OP_IGNORE_UNEXPECTED_EOF: u64 = 1 << 7;
const SSL_OP_NO_COMPRESSION: u64 = 1 << 17;
const SSL_OP_CIPHER_SERVER_PREFERENCE: u64 = 1 << 22;
const SSL_OP_NO_RENEGOTIATION: u64 = 1 << 30;
const SSL_ERROR_WANT_READ = 2;
const SSL_ERROR_WANT_WRITE = 3;
const SSL_ERROR_ZERO_RETURN = 6;
const SSL_VERIFY_PEER = 1;
const SSL_VERIFY_FAIL_IF_NO_PEER_CERT = 2;
const SSL_TLSEXT_ERR_OK = 0;
const SSL_TLSEXT_ERR_NOACK = 3;
const TLSEXT_NAMETYPE_host_name = 0;
const BIO_CTRL_INFO = 3;
const BIO_CTRL_EOF = 2;
const BIO_CTRL_FLUSH = 11;
const BIO_TYPE_SOURCE_SINK = 0x0400;
const BIO_FLAGS_READ = 0x01;
const BIO_FLAGS_WRITE = 0x02;
const BIO_FLAGS_IO_SPECIAL = 0x04;
const BIO_FLAGS_SHOULD_RETRY = 0x08;
const BIO_FLAGS_IN_EOF = 0x800;
/// XN_FLAG_RFC2253 without ASN1_STRFLGS_ESC_MSB: non-ASCII stays UTF-8, as RFC 4514 allows.
const XN_FLAG_RFC4514: c_ulong = (0x1 | 0x2 | 0x10 | 0x100 | 0x200) | (1 << 16) | (1 << 20) | (1 << 24);
pub const TLS1_2_VERSION = 0x0303;
pub const TLS1_3_VERSION = 0x0304;
/// OpenSSL_version_num() of 3.0.0: anything older lacks the API declared here.
const openssl_3_version_num = 0x30000000;

const BioRead = fn (bio: *BIO, buf: [*]u8, len: c_int) callconv(.c) c_int;
const BioWrite = fn (bio: *BIO, buf: [*]const u8, len: c_int) callconv(.c) c_int;
const BioCtrl = fn (bio: *BIO, cmd: c_int, larg: c_long, parg: ?*anyopaque) callconv(.c) c_long;
const PasswordCb = fn (buf: [*]u8, size: c_int, rwflag: c_int, userdata: ?*anyopaque) callconv(.c) c_int;
pub const AlpnCb = fn (ssl: *SSL, out: *[*]const u8, outlen: *u8, in: [*]const u8, inlen: c_uint, arg: ?*anyopaque) callconv(.c) c_int;
// The callbacks QUIC's handshake shim (quic/tls.zig) gives OpenSSL.
pub const KeylogCb = fn (ssl: *const SSL, line: [*:0]const u8) callconv(.c) void;
pub const MsgCb = fn (write_p: c_int, version: c_int, content_type: c_int, buf: ?*const anyopaque, len: usize, ssl: *SSL, arg: ?*anyopaque) callconv(.c) void;
pub const ClientHelloCb = fn (ssl: *SSL, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int;
pub const ExtAddCb = fn (ssl: *SSL, ext_type: c_uint, context: c_uint, out: *?[*]const u8, outlen: *usize, x: ?*X509, chainidx: usize, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int;
pub const ExtFreeCb = fn (ssl: *SSL, ext_type: c_uint, context: c_uint, out: ?[*]const u8, arg: ?*anyopaque) callconv(.c) void;
pub const ExtParseCb = fn (ssl: *SSL, ext_type: c_uint, context: c_uint, in: [*]const u8, inlen: usize, x: ?*X509, chainidx: usize, alert: *c_int, arg: ?*anyopaque) callconv(.c) c_int;

/// The OpenSSL functions used, by their C names: resolved one by one with dlsym.
pub const Api = struct {
    OpenSSL_version_num: *const fn () callconv(.c) c_ulong,
    OPENSSL_init_ssl: *const fn (opts: u64, settings: ?*const anyopaque) callconv(.c) c_int,
    TLS_server_method: *const fn () callconv(.c) ?*const SSL_METHOD,
    SSL_CTX_new: *const fn (method: ?*const SSL_METHOD) callconv(.c) ?*SSL_CTX,
    SSL_CTX_free: *const fn (ctx: *SSL_CTX) callconv(.c) void,
    SSL_CTX_ctrl: *const fn (ctx: *SSL_CTX, cmd: c_int, larg: c_long, parg: ?*anyopaque) callconv(.c) c_long,
    SSL_CTX_set_options: *const fn (ctx: *SSL_CTX, op: u64) callconv(.c) u64,
    SSL_CTX_use_certificate_chain_file: *const fn (ctx: *SSL_CTX, file: [*:0]const u8) callconv(.c) c_int,
    SSL_CTX_use_PrivateKey_file: *const fn (ctx: *SSL_CTX, file: [*:0]const u8, kind: c_int) callconv(.c) c_int,
    SSL_CTX_check_private_key: *const fn (ctx: *const SSL_CTX) callconv(.c) c_int,
    SSL_CTX_set_default_passwd_cb: *const fn (ctx: *SSL_CTX, cb: ?*const PasswordCb) callconv(.c) void,
    SSL_CTX_set_default_passwd_cb_userdata: *const fn (ctx: *SSL_CTX, u: ?*anyopaque) callconv(.c) void,
    SSL_CTX_set_cipher_list: *const fn (ctx: *SSL_CTX, list: [*:0]const u8) callconv(.c) c_int,
    SSL_CTX_load_verify_locations: *const fn (ctx: *SSL_CTX, file: ?[*:0]const u8, path: ?[*:0]const u8) callconv(.c) c_int,
    SSL_CTX_set_verify: *const fn (ctx: *SSL_CTX, mode: c_int, cb: ?*const anyopaque) callconv(.c) void,
    SSL_CTX_set_alpn_select_cb: *const fn (ctx: *SSL_CTX, cb: ?*const AlpnCb, arg: ?*anyopaque) callconv(.c) void,
    SSL_CTX_get0_certificate: *const fn (ctx: *const SSL_CTX) callconv(.c) ?*X509,
    SSL_CTX_set_session_id_context: *const fn (ctx: *SSL_CTX, id: [*]const u8, len: c_uint) callconv(.c) c_int,
    SSL_CTX_get_cert_store: *const fn (ctx: *const SSL_CTX) callconv(.c) ?*X509_STORE,
    X509_STORE_load_file: *const fn (store: *X509_STORE, file: [*:0]const u8) callconv(.c) c_int,
    X509_STORE_set_flags: *const fn (store: *X509_STORE, flags: c_ulong) callconv(.c) c_int,
    SSL_new: *const fn (ctx: *SSL_CTX) callconv(.c) ?*SSL,
    SSL_free: *const fn (ssl: *SSL) callconv(.c) void,
    SSL_set_accept_state: *const fn (ssl: *SSL) callconv(.c) void,
    SSL_do_handshake: *const fn (ssl: *SSL) callconv(.c) c_int,
    SSL_is_init_finished: *const fn (ssl: *const SSL) callconv(.c) c_int,
    SSL_read: *const fn (ssl: *SSL, buf: *anyopaque, num: c_int) callconv(.c) c_int,
    SSL_write: *const fn (ssl: *SSL, buf: *const anyopaque, num: c_int) callconv(.c) c_int,
    SSL_get_error: *const fn (ssl: *const SSL, ret: c_int) callconv(.c) c_int,
    SSL_pending: *const fn (ssl: *const SSL) callconv(.c) c_int,
    SSL_shutdown: *const fn (ssl: *SSL) callconv(.c) c_int,
    SSL_version: *const fn (ssl: *const SSL) callconv(.c) c_int,
    SSL_get0_alpn_selected: *const fn (ssl: *const SSL, data: *?[*]const u8, len: *c_uint) callconv(.c) void,
    SSL_get_current_cipher: *const fn (ssl: *const SSL) callconv(.c) ?*const SSL_CIPHER,
    SSL_CIPHER_get_protocol_id: *const fn (cipher: *const SSL_CIPHER) callconv(.c) u16,
    SSL_get_servername: *const fn (ssl: *const SSL, kind: c_int) callconv(.c) ?[*:0]const u8,
    SSL_get1_peer_certificate: *const fn (ssl: *const SSL) callconv(.c) ?*X509,
    SSL_get_peer_cert_chain: *const fn (ssl: *const SSL) callconv(.c) ?*STACK,
    SSL_get_verify_result: *const fn (ssl: *const SSL) callconv(.c) c_long,
    ERR_get_error: *const fn () callconv(.c) c_ulong,
    ERR_clear_error: *const fn () callconv(.c) void,
    ERR_reason_error_string: *const fn (e: c_ulong) callconv(.c) ?[*:0]const u8,
    X509_free: *const fn (x: *X509) callconv(.c) void,
    X509_up_ref: *const fn (x: *X509) callconv(.c) c_int,
    X509_chain_up_ref: *const fn (chain: *STACK) callconv(.c) ?*STACK,
    OPENSSL_sk_pop_free: *const fn (sk: *STACK, free: *const FreeFn) callconv(.c) void,
    X509_get_subject_name: *const fn (x: *const X509) callconv(.c) ?*X509_NAME,
    X509_NAME_print_ex: *const fn (out: *BIO, name: *const X509_NAME, indent: c_int, flags: c_ulong) callconv(.c) c_int,
    X509_verify_cert_error_string: *const fn (n: c_long) callconv(.c) ?[*:0]const u8,
    PEM_write_bio_X509: *const fn (bio: *BIO, x: *X509) callconv(.c) c_int,
    BIO_s_mem: *const fn () callconv(.c) ?*const BIO_METHOD,
    BIO_get_new_index: *const fn () callconv(.c) c_int,
    BIO_meth_new: *const fn (kind: c_int, name: [*:0]const u8) callconv(.c) ?*BIO_METHOD,
    BIO_meth_set_read: *const fn (m: *BIO_METHOD, f: *const BioRead) callconv(.c) c_int,
    BIO_meth_set_write: *const fn (m: *BIO_METHOD, f: *const BioWrite) callconv(.c) c_int,
    BIO_meth_set_ctrl: *const fn (m: *BIO_METHOD, f: *const BioCtrl) callconv(.c) c_int,
    BIO_set_data: *const fn (bio: *BIO, ptr: ?*anyopaque) callconv(.c) void,
    BIO_get_data: *const fn (bio: *BIO) callconv(.c) ?*anyopaque,
    BIO_set_init: *const fn (bio: *BIO, init: c_int) callconv(.c) void,
    BIO_set_flags: *const fn (bio: *BIO, flags: c_int) callconv(.c) void,
    BIO_test_flags: *const fn (bio: *const BIO, flags: c_int) callconv(.c) c_int,
    BIO_clear_flags: *const fn (bio: *BIO, flags: c_int) callconv(.c) void,
    SSL_set_bio: *const fn (ssl: *SSL, rbio: ?*BIO, wbio: ?*BIO) callconv(.c) void,
    BIO_new: *const fn (method: ?*const BIO_METHOD) callconv(.c) ?*BIO,
    BIO_free: *const fn (bio: *BIO) callconv(.c) c_int,
    BIO_ctrl: *const fn (bio: *BIO, cmd: c_int, larg: c_long, parg: ?*anyopaque) callconv(.c) c_long,
    OPENSSL_sk_num: *const fn (sk: ?*const STACK) callconv(.c) c_int,
    OPENSSL_sk_value: *const fn (sk: ?*const STACK, i: c_int) callconv(.c) ?*anyopaque,
    // QUIC's handshake shim (quic/tls.zig): all public API of OpenSSL 3.0.
    SSL_CTX_set_keylog_callback: *const fn (ctx: *SSL_CTX, cb: ?*const KeylogCb) callconv(.c) void,
    SSL_CTX_set_client_hello_cb: *const fn (ctx: *SSL_CTX, cb: ?*const ClientHelloCb, arg: ?*anyopaque) callconv(.c) void,
    SSL_CTX_add_custom_ext: *const fn (ctx: *SSL_CTX, ext_type: c_uint, context: c_uint, add: ?*const ExtAddCb, free: ?*const ExtFreeCb, add_arg: ?*anyopaque, parse: ?*const ExtParseCb, parse_arg: ?*anyopaque) callconv(.c) c_int,
    SSL_CTX_clear_options: *const fn (ctx: *SSL_CTX, op: u64) callconv(.c) u64,
    SSL_CTX_set_ciphersuites: *const fn (ctx: *SSL_CTX, list: [*:0]const u8) callconv(.c) c_int,
    SSL_CTX_set_num_tickets: *const fn (ctx: *SSL_CTX, n: usize) callconv(.c) c_int,
    SSL_CTX_set_max_early_data: *const fn (ctx: *SSL_CTX, n: u32) callconv(.c) c_int,
    SSL_set_msg_callback: *const fn (ssl: *SSL, cb: ?*const MsgCb) callconv(.c) void,
    SSL_ctrl: *const fn (ssl: *SSL, cmd: c_int, larg: c_long, parg: ?*anyopaque) callconv(.c) c_long,
    SSL_set_ex_data: *const fn (ssl: *SSL, idx: c_int, data: ?*anyopaque) callconv(.c) c_int,
    SSL_get_ex_data: *const fn (ssl: *const SSL, idx: c_int) callconv(.c) ?*anyopaque,
    SSL_client_hello_get0_ext: *const fn (ssl: *SSL, ext_type: c_uint, out: *?[*]const u8, outlen: *usize) callconv(.c) c_int,
    SSL_get_pending_cipher: *const fn (ssl: *const SSL) callconv(.c) ?*const SSL_CIPHER,
    BIO_s_null: *const fn () callconv(.c) ?*const BIO_METHOD,
    BIO_write: *const fn (bio: *BIO, data: [*]const u8, len: c_int) callconv(.c) c_int,
    BIO_read: *const fn (bio: *BIO, data: [*]u8, len: c_int) callconv(.c) c_int,
    // The OpenSSL client of quic/tls.zig's tests.
    TLS_client_method: *const fn () callconv(.c) ?*const SSL_METHOD,
    SSL_set_connect_state: *const fn (ssl: *SSL) callconv(.c) void,
    SSL_set_ciphersuites: *const fn (ssl: *SSL, list: [*:0]const u8) callconv(.c) c_int,
    SSL_set_alpn_protos: *const fn (ssl: *SSL, protos: [*]const u8, len: c_uint) callconv(.c) c_int,
    SSL_get1_session: *const fn (ssl: *SSL) callconv(.c) ?*SSL_SESSION,
    SSL_set_session: *const fn (ssl: *SSL, session: ?*SSL_SESSION) callconv(.c) c_int,
    SSL_SESSION_free: *const fn (session: *SSL_SESSION) callconv(.c) void,
    SSL_session_reused: *const fn (ssl: *const SSL) callconv(.c) c_int,
    SSL_use_certificate_chain_file: *const fn (ssl: *SSL, file: [*:0]const u8) callconv(.c) c_int,
    SSL_use_PrivateKey_file: *const fn (ssl: *SSL, file: [*:0]const u8, kind: c_int) callconv(.c) c_int,
};

var api: Api = undefined;
var loaded_version: c_ulong = 0;

pub const default_library = "libssl.so.3";

pub const LoadError = error{ LibraryNotFound, SymbolMissing, TooOld, InitFailed };

/// Why the last `load` failed, for the one error line the user sees.
pub var load_error_detail: [256]u8 = undefined;
pub var load_error_len: usize = 0;

/// The function table, for quic/tls.zig, which drives OpenSSL's handshake itself (its
/// shim needs more of the API than the TCP path's wrappers below). Only once loaded.
pub fn functions() *const Api {
    std.debug.assert(isLoaded());
    return &api;
}

pub fn isLoaded() bool {
    return loaded_version != 0;
}

/// Loads OpenSSL 3 from `path` (a file name or path), once per process.
pub fn load(path: [*:0]const u8) LoadError!void {
    if (isLoaded()) return;
    load_error_len = 0;
    const handle = std.c.dlopen(path, .{ .NOW = true }) orelse {
        const why = std.c.dlerror();
        setDetail(if (why) |w| std.mem.span(w) else "dlopen failed");
        return error.LibraryNotFound;
    };
    var table: Api = undefined;
    inline for (@typeInfo(Api).@"struct".fields) |f| {
        const sym = std.c.dlsym(handle, f.name) orelse {
            _ = std.c.dlclose(handle);
            setDetail("missing " ++ f.name);
            return error.SymbolMissing;
        };
        @field(table, f.name) = @ptrCast(@alignCast(sym));
    }
    const version = table.OpenSSL_version_num();
    if (version < openssl_3_version_num) {
        _ = std.c.dlclose(handle);
        return error.TooOld;
    }
    if (table.OPENSSL_init_ssl(0, null) != 1) return error.InitFailed;
    // The handle stays open for the life of the process: sessions may outlive any engine.
    api = table;
    loaded_version = version;
}

fn setDetail(text: []const u8) void {
    const n = @min(text.len, load_error_detail.len);
    @memcpy(load_error_detail[0..n], text[0..n]);
    load_error_len = n;
}

pub fn loadErrorDetail() []const u8 {
    return load_error_detail[0..load_error_len];
}

/// "3.0.19" from OpenSSL_version_num()'s 0xMNN00PP0 layout.
pub fn versionText(buf: []u8) []const u8 {
    const v = loaded_version;
    return std.fmt.bufPrint(buf, "{d}.{d}.{d}", .{ (v >> 28) & 0xf, (v >> 20) & 0xff, (v >> 4) & 0xff }) catch "";
}

// ---- the context: one per server -------------------------------------------

pub const ContextOptions = struct {
    certfile: [*:0]const u8,
    /// The key's file; the certificate file when null (a combined PEM).
    keyfile: ?[*:0]const u8,
    password: ?[]const u8,
    min_version: c_long,
    max_version: c_long,
    /// TLS 1.2 cipher list (OpenSSL syntax); TLS 1.3 suites keep OpenSSL's defaults.
    ciphers: ?[*:0]const u8,
    /// 0 none, 1 optional, 2 required: the values of Python's ssl.CERT_*.
    cert_reqs: u8,
    ca_certs: ?[*:0]const u8,
    /// Offer "h2" in ALPN.
    http2: bool,
    /// Session tickets (stateless resumption) are issued.
    session_tickets: bool = true,
    /// The ticket keys (`ticket_keys_len` bytes), the same in every worker so that a
    /// ticket resumes whichever worker accepts; null: OpenSSL's own, per process.
    ticket_keys: ?[]const u8 = null,
    /// Sessions the server-side cache holds (0: no cache).
    session_cache: u32 = 0,
    /// Certificate revocation lists (PEM) that client certificates are checked against.
    crl: ?[*:0]const u8 = null,
};

/// What went wrong building a context, for the error the user sees. Never holds a key
/// or a password: only which step failed and OpenSSL's reason string.
pub const ContextError = struct {
    buf: [320]u8 = undefined,
    len: usize = 0,

    pub fn set(self: *ContextError, comptime what: []const u8) void {
        const code = api.ERR_get_error();
        const reason: []const u8 = if (api.ERR_reason_error_string(code)) |r| std.mem.span(r) else "unknown error";
        const s = std.fmt.bufPrint(&self.buf, what ++ ": {s}", .{reason}) catch self.buf[0..0];
        self.len = s.len;
        api.ERR_clear_error();
    }

    pub fn text(self: *const ContextError) []const u8 {
        return self.buf[0..self.len];
    }
};

pub fn newContext(opts: ContextOptions, err: *ContextError) ?*SSL_CTX {
    std.debug.assert(isLoaded());
    api.ERR_clear_error();
    const ctx = api.SSL_CTX_new(api.TLS_server_method()) orelse {
        err.set("could not create the TLS context");
        return null;
    };
    if (!configure(ctx, opts, err)) {
        api.SSL_CTX_free(ctx);
        return null;
    }
    return ctx;
}

fn configure(ctx: *SSL_CTX, opts: ContextOptions, err: *ContextError) bool {
    // Partial writes and a moving buffer let a queued response be retried from where it
    // stopped; released buffers keep an idle connection's OpenSSL state small.
    _ = api.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS, null);
    // The server-side session cache only when asked for, and bounded (OpenSSL's default
    // is 20,480 sessions); tickets resume without it.
    if (opts.session_cache > 0) {
        _ = api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, SSL_SESS_CACHE_SERVER, null);
        _ = api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_SIZE, opts.session_cache, null);
    } else {
        _ = api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, 0, null);
    }
    _ = api.SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
        SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF | (if (opts.session_tickets) 0 else SSL_OP_NO_TICKET));
    if (!configureResumption(ctx, opts, err)) return false;
    if (api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, opts.min_version, null) != 1 or
        api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, opts.max_version, null) != 1)
    {
        err.set("--ssl-version: unsupported protocol version");
        return false;
    }
    if (!loadCertificate(ctx, opts, err)) return false;
    if (opts.ciphers) |list| if (api.SSL_CTX_set_cipher_list(ctx, list) != 1) {
        err.set("--ssl-ciphers: no usable cipher");
        return false;
    };
    if (!configureVerify(ctx, opts, err)) return false;
    // The callback's argument says whether "h2" is offered (any non-null pointer).
    api.SSL_CTX_set_alpn_select_cb(ctx, alpnSelect, if (opts.http2) @ptrCast(@constCast(&alpn_h2_on)) else null);
    return true;
}

/// Resumption, the same for TCP and QUIC: the session id context (a resumed session is
/// only valid for this server; OpenSSL refuses to resume without one when it verifies
/// client certificates) and the ticket keys every worker shares, so that a ticket any
/// worker issued resumes on whichever worker the client reaches next.
pub fn configureResumption(ctx: *SSL_CTX, opts: ContextOptions, err: *ContextError) bool {
    const id_context = "zigcorn";
    if (api.SSL_CTX_set_session_id_context(ctx, id_context, id_context.len) != 1) {
        err.set("could not set the session id context");
        return false;
    }
    if (opts.ticket_keys) |keys| {
        std.debug.assert(keys.len == ticket_keys_len);
        const rc = api.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_TLSEXT_TICKET_KEYS, ticket_keys_len, @constCast(keys.ptr));
        if (rc != 1) {
            err.set("could not set the session ticket keys");
            return false;
        }
    }
    return true;
}

/// The certificate chain and its key (`certfile`, `keyfile`, `password`): QUIC's context
/// (quic/tls_context.zig) loads the same ones as TCP's.
pub fn loadCertificate(ctx: *SSL_CTX, opts: ContextOptions, err: *ContextError) bool {
    if (api.SSL_CTX_use_certificate_chain_file(ctx, opts.certfile) != 1) {
        err.set("--ssl-certfile: could not load the certificate chain");
        return false;
    }
    return loadKey(ctx, opts, err);
}

/// Client certificates (`cert_reqs`, `ca_certs`, `crl`), the same for TCP and QUIC.
pub fn configureVerify(ctx: *SSL_CTX, opts: ContextOptions, err: *ContextError) bool {
    if (opts.ca_certs) |file| if (api.SSL_CTX_load_verify_locations(ctx, file, null) != 1) {
        err.set("--ssl-ca-certs: could not load the CA certificates");
        return false;
    };
    if (opts.crl) |file| {
        const store = api.SSL_CTX_get_cert_store(ctx) orelse {
            err.set("--ssl-crl: no certificate store");
            return false;
        };
        if (api.X509_STORE_load_file(store, file) != 1 or api.X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK) != 1) {
            err.set("--ssl-crl: could not load the revocation list");
            return false;
        }
    }
    const verify: c_int = switch (opts.cert_reqs) {
        0 => 0,
        1 => SSL_VERIFY_PEER,
        else => SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
    };
    api.SSL_CTX_set_verify(ctx, verify, null);
    return true;
}

/// The password reaches OpenSSL only through this callback and only while the key is
/// read; it is never copied into our memory or any message.
fn loadKey(ctx: *SSL_CTX, opts: ContextOptions, err: *ContextError) bool {
    var password: []const u8 = opts.password orelse &.{};
    // Always our callback: OpenSSL's default would prompt on the terminal for an encrypted key.
    api.SSL_CTX_set_default_passwd_cb(ctx, passwordCallback);
    api.SSL_CTX_set_default_passwd_cb_userdata(ctx, @ptrCast(&password));
    defer api.SSL_CTX_set_default_passwd_cb_userdata(ctx, null);
    if (api.SSL_CTX_use_PrivateKey_file(ctx, opts.keyfile orelse opts.certfile, SSL_FILETYPE_PEM) != 1) {
        err.set("--ssl-keyfile: could not use the private key (wrong or missing --ssl-keyfile-password, or the key of another certificate?)");
        return false;
    }
    if (api.SSL_CTX_check_private_key(ctx) != 1) {
        err.set("--ssl-keyfile: the private key does not match the certificate");
        return false;
    }
    return true;
}

fn passwordCallback(buf: [*]u8, size: c_int, rwflag: c_int, userdata: ?*anyopaque) callconv(.c) c_int {
    _ = rwflag;
    const p = userdata orelse return 0;
    const password: *const []const u8 = @ptrCast(@alignCast(p));
    const n = password.len;
    if (size < 0 or n > @as(usize, @intCast(size))) return 0;
    @memcpy(buf[0..n], password.*);
    return @intCast(n);
}

pub fn freeContext(ctx: *SSL_CTX) void {
    api.SSL_CTX_free(ctx);
}

// ---- ALPN ------------------------------------------------------------------

/// Protocols offered, in our order of preference ("h2" only with HTTP/2 on).
const alpn_offered = [_][]const u8{ "h2", "http/1.1" };
const alpn_h2_on: u8 = 1;

/// The first of our protocols the client lists, as a slice of the client's list
/// (wire format: length-prefixed names). Null: no ALPN, the connection goes on.
pub fn selectAlpn(client: []const u8, http2: bool) ?[]const u8 {
    for (alpn_offered) |want| {
        if (!http2 and std.mem.eql(u8, want, "h2")) continue;
        var i: usize = 0;
        while (i < client.len) {
            const len = client[i];
            if (len == 0 or client.len - i - 1 < len) break;
            const name = client[i + 1 ..][0..len];
            if (std.mem.eql(u8, name, want)) return name;
            i += 1 + len;
        }
    }
    return null;
}

fn alpnSelect(ssl: *SSL, out: *[*]const u8, outlen: *u8, in: [*]const u8, inlen: c_uint, arg: ?*anyopaque) callconv(.c) c_int {
    _ = ssl;
    const name = selectAlpn(in[0..inlen], arg != null) orelse return SSL_TLSEXT_ERR_NOACK;
    out.* = name.ptr;
    outlen.* = @intCast(name.len);
    return SSL_TLSEXT_ERR_OK;
}

// ---- one connection ----------------------------------------------------------

/// A server-side session reading and writing `fd` itself; null when out of memory.
/// How a session's ciphertext moves: the connection's reads and writes through the
/// engine's I/O backend, called with the `io_ctx` given to `newSession`. `.err = .AGAIN`
/// means not now (OpenSSL then reports WANT_READ / WANT_WRITE); `.ok = 0` from `recv`
/// is the peer's end of stream.
pub const Transport = struct {
    recv: *const fn (io_ctx: *anyopaque, buf: []u8) Result,
    send: *const fn (io_ctx: *anyopaque, bytes: []const u8) Result,

    pub const Result = union(enum) { ok: usize, again, failed };
};

var transport: ?Transport = null;
var bio_method: ?*BIO_METHOD = null;

fn bioRead(bio: *BIO, buf: [*]u8, len: c_int) callconv(.c) c_int {
    api.BIO_clear_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY);
    if (len <= 0) return 0;
    const io_ctx = api.BIO_get_data(bio) orelse return -1;
    switch (transport.?.recv(io_ctx, buf[0..@intCast(len)])) {
        .ok => |n| {
            if (n == 0) api.BIO_set_flags(bio, BIO_FLAGS_IN_EOF);
            return @intCast(n);
        },
        .again => {
            api.BIO_set_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_SHOULD_RETRY);
            return -1;
        },
        .failed => return -1,
    }
}

fn bioWrite(bio: *BIO, buf: [*]const u8, len: c_int) callconv(.c) c_int {
    api.BIO_clear_flags(bio, BIO_FLAGS_READ | BIO_FLAGS_WRITE | BIO_FLAGS_IO_SPECIAL | BIO_FLAGS_SHOULD_RETRY);
    if (len <= 0) return 0;
    const io_ctx = api.BIO_get_data(bio) orelse return -1;
    switch (transport.?.send(io_ctx, buf[0..@intCast(len)])) {
        .ok => |n| return @intCast(n),
        .again => {
            api.BIO_set_flags(bio, BIO_FLAGS_WRITE | BIO_FLAGS_SHOULD_RETRY);
            return -1;
        },
        .failed => return -1,
    }
}

/// What OpenSSL asks of a byte stream: flushing (nothing is buffered here) and whether
/// the peer's end of stream was seen (an unexpected EOF then ends the session cleanly).
fn bioCtrl(bio: *BIO, cmd: c_int, _: c_long, _: ?*anyopaque) callconv(.c) c_long {
    return switch (cmd) {
        BIO_CTRL_FLUSH => 1,
        BIO_CTRL_EOF => @intFromBool(api.BIO_test_flags(bio, BIO_FLAGS_IN_EOF) != 0),
        else => 0,
    };
}

/// The BIO type of every session's transport, made once per process.
fn transportMethod() ?*BIO_METHOD {
    if (bio_method) |m| return m;
    const index = api.BIO_get_new_index();
    if (index == -1) return null;
    const m = api.BIO_meth_new(index | BIO_TYPE_SOURCE_SINK, "zigcorn transport") orelse return null;
    if (api.BIO_meth_set_read(m, bioRead) != 1 or api.BIO_meth_set_write(m, bioWrite) != 1 or
        api.BIO_meth_set_ctrl(m, bioCtrl) != 1) return null;
    bio_method = m;
    return m;
}

/// Sets how sessions move their bytes (once, before the first `newSession`).
pub fn setTransport(t: Transport) void {
    transport = t;
}

/// A server-side session whose ciphertext goes through `Transport` with `io_ctx`.
pub fn newSession(ctx: *SSL_CTX, io_ctx: *anyopaque) ?*SSL {
    std.debug.assert(transport != null);
    const method = transportMethod() orelse {
        api.ERR_clear_error();
        return null;
    };
    const ssl = api.SSL_new(ctx) orelse {
        api.ERR_clear_error();
        return null;
    };
    const bio = api.BIO_new(method) orelse {
        api.ERR_clear_error();
        api.SSL_free(ssl);
        return null;
    };
    api.BIO_set_data(bio, io_ctx);
    api.BIO_set_init(bio, 1);
    // One BIO both ways: the session owns it (freed with the session).
    api.SSL_set_bio(ssl, bio, bio);
    api.SSL_set_accept_state(ssl);
    return ssl;
}

pub fn freeSession(ssl: *SSL) void {
    api.SSL_free(ssl);
}

pub const Io = union(enum) {
    /// Bytes moved; 0 from a read is the end of the stream (close_notify or EOF).
    ok: usize,
    want_read,
    want_write,
    /// A protocol error or a broken socket: the connection must close.
    failed,
};

fn classify(ssl: *SSL, rc: c_int) Io {
    const e = api.SSL_get_error(ssl, rc);
    // Keep the thread's error queue empty: SSL_get_error (ours and Python's) depends on it.
    api.ERR_clear_error();
    return switch (e) {
        SSL_ERROR_WANT_READ => .want_read,
        SSL_ERROR_WANT_WRITE => .want_write,
        SSL_ERROR_ZERO_RETURN => .{ .ok = 0 },
        else => .failed,
    };
}

pub fn handshakeDone(ssl: *const SSL) bool {
    return api.SSL_is_init_finished(ssl) == 1;
}

/// Advances the handshake: `.ok` once it is complete.
pub fn handshake(ssl: *SSL) Io {
    const rc = api.SSL_do_handshake(ssl);
    if (rc == 1) return .{ .ok = 0 };
    const r = classify(ssl, rc);
    // A clean EOF in the middle of a handshake is still a failed handshake.
    return if (r == .ok) .failed else r;
}

pub fn read(ssl: *SSL, buf: []u8) Io {
    if (buf.len == 0) return .want_read;
    const n: c_int = @intCast(@min(buf.len, std.math.maxInt(c_int)));
    const rc = api.SSL_read(ssl, buf.ptr, n);
    if (rc > 0) return .{ .ok = @intCast(rc) };
    return classify(ssl, rc);
}

/// Writes the slices in order (one TLS record or more each); stops at the first that
/// could not be written whole. A retry after want_write must start with the same bytes.
pub fn writev(ssl: *SSL, parts: []const []const u8) Io {
    var total: usize = 0;
    for (parts) |part| {
        if (part.len == 0) continue;
        const n: c_int = @intCast(@min(part.len, 1 << 30));
        const rc = api.SSL_write(ssl, part.ptr, n);
        if (rc <= 0) {
            const r = classify(ssl, rc);
            if (total > 0 and r != .failed) return .{ .ok = total };
            return if (r == .ok) .failed else r;
        }
        total += @intCast(rc);
        if (rc < n) break;
    }
    return .{ .ok = total };
}

/// Decrypted bytes wait inside OpenSSL: the socket will not signal them. (A partial
/// record does not count: its rest is still to come from the socket. Without read-ahead
/// OpenSSL never holds a whole unread record.)
pub fn hasPending(ssl: *const SSL) bool {
    return api.SSL_pending(ssl) > 0;
}

/// Sends close_notify if the socket takes it now; never waits for the peer's.
pub fn shutdown(ssl: *SSL) void {
    if (!handshakeDone(ssl)) return;
    _ = api.SSL_shutdown(ssl);
    api.ERR_clear_error();
}

// ---- what the ASGI TLS extension reports ---------------------------------------

/// 0x0303 for TLS 1.2, 0x0304 for TLS 1.3.
pub fn protocolVersion(ssl: *const SSL) u16 {
    return @intCast(api.SSL_version(ssl) & 0xffff);
}

/// The protocol ALPN agreed on ("" when none).
pub fn alpnSelected(ssl: *const SSL) []const u8 {
    var data: ?[*]const u8 = null;
    var len: c_uint = 0;
    api.SSL_get0_alpn_selected(ssl, &data, &len);
    const p = data orelse return "";
    return p[0..len];
}

/// The IANA number of the cipher suite, e.g. 0x1301.
pub fn cipherSuite(ssl: *const SSL) ?u16 {
    const cipher = api.SSL_get_current_cipher(ssl) orelse return null;
    return api.SSL_CIPHER_get_protocol_id(cipher);
}

/// The host name the client asked for (SNI), if it sent one.
pub fn serverName(ssl: *const SSL) ?[]const u8 {
    const name = api.SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name) orelse return null;
    return std.mem.span(name);
}

pub fn serverCertificate(ctx: *const SSL_CTX) ?*X509 {
    return api.SSL_CTX_get0_certificate(ctx);
}

/// The client's certificate: the caller frees it with `freeCertificate`.
pub fn peerCertificate(ssl: *const SSL) ?*X509 {
    return api.SSL_get1_peer_certificate(ssl);
}

pub fn freeCertificate(x: *X509) void {
    api.X509_free(x);
}

/// The certificates the client sent after its own (server side: the leaf is not in it).
pub fn peerChainLen(ssl: *const SSL) usize {
    const sk = api.SSL_get_peer_cert_chain(ssl) orelse return 0;
    const n = api.OPENSSL_sk_num(sk);
    return if (n > 0) @intCast(n) else 0;
}

pub fn peerChainAt(ssl: *const SSL, i: usize) ?*X509 {
    const sk = api.SSL_get_peer_cert_chain(ssl) orelse return null;
    return @ptrCast(api.OPENSSL_sk_value(sk, @intCast(i)));
}

/// Why the client's certificate failed verification, or null when it did not.
pub fn verifyError(ssl: *const SSL) ?[]const u8 {
    return verifyErrorText(api.SSL_get_verify_result(ssl));
}

fn verifyErrorText(code: c_long) ?[]const u8 {
    if (code == 0) return null;
    const text = api.X509_verify_cert_error_string(code) orelse return "certificate verification failed";
    return std.mem.span(text);
}

fn freeStackCertificate(x: ?*anyopaque) callconv(.c) void {
    if (x) |p| api.X509_free(@ptrCast(p));
}

/// What the ASGI tls extension reads of a session, kept past its SSL object: QUIC's
/// handshake (quic/tls.zig) frees that as soon as it completes. The client's certificates
/// are OpenSSL's (a reference each, on OpenSSL's heap); the SNI is a copy on `allocator`.
pub const SessionSummary = struct {
    version: ?u16 = null,
    cipher: ?u16 = null,
    server_name: ?[]u8 = null,
    leaf: ?*X509 = null,
    /// The certificates the client sent after its own (each referenced), or null.
    chain: ?*STACK = null,
    verify_result: c_long = 0,

    /// What `ssl` says now (once its handshake is done). Out of memory: error, nothing held.
    pub fn capture(allocator: std.mem.Allocator, ssl: *const SSL) !SessionSummary {
        var s: SessionSummary = .{ .version = protocolVersion(ssl), .cipher = cipherSuite(ssl) };
        errdefer s.deinit(allocator);
        if (serverName(ssl)) |name| s.server_name = try allocator.dupe(u8, name);
        s.leaf = api.SSL_get1_peer_certificate(ssl);
        if (s.leaf != null) {
            s.verify_result = api.SSL_get_verify_result(ssl);
            if (api.SSL_get_peer_cert_chain(ssl)) |sk| {
                s.chain = api.X509_chain_up_ref(sk) orelse {
                    api.ERR_clear_error();
                    return error.OutOfMemory;
                };
            }
        }
        return s;
    }

    pub fn deinit(s: *SessionSummary, allocator: std.mem.Allocator) void {
        if (s.server_name) |name| allocator.free(name);
        if (s.leaf) |x| api.X509_free(x);
        if (s.chain) |sk| api.OPENSSL_sk_pop_free(sk, freeStackCertificate);
        s.* = .{};
    }
};

const top = @This();

/// A session as the ASGI tls extension reads it: a live SSL object (TCP) or what was kept
/// of one (`SessionSummary`, HTTP/3). Both answer alike.
pub const SessionView = union(enum) {
    live: *SSL,
    kept: *const SessionSummary,

    /// The client's certificate, a new reference: free it with `freeCertificate`.
    pub fn peerCertificate(v: SessionView) ?*X509 {
        switch (v) {
            .live => |ssl| return api.SSL_get1_peer_certificate(ssl),
            .kept => |s| {
                const x = s.leaf orelse return null;
                if (api.X509_up_ref(x) != 1) return null;
                return x;
            },
        }
    }

    pub fn chainLen(v: SessionView) usize {
        const sk = v.chain() orelse return 0;
        const n = api.OPENSSL_sk_num(sk);
        return if (n > 0) @intCast(n) else 0;
    }

    pub fn chainAt(v: SessionView, i: usize) ?*X509 {
        const sk = v.chain() orelse return null;
        return @ptrCast(api.OPENSSL_sk_value(sk, @intCast(i)));
    }

    fn chain(v: SessionView) ?*STACK {
        return switch (v) {
            .live => |ssl| api.SSL_get_peer_cert_chain(ssl),
            .kept => |s| s.chain,
        };
    }

    pub fn verifyError(v: SessionView) ?[]const u8 {
        return switch (v) {
            .live => |ssl| verifyErrorText(api.SSL_get_verify_result(ssl)),
            .kept => |s| verifyErrorText(s.verify_result),
        };
    }

    pub fn protocolVersion(v: SessionView) ?u16 {
        return switch (v) {
            .live => |ssl| top.protocolVersion(ssl),
            .kept => |s| s.version,
        };
    }

    pub fn cipherSuite(v: SessionView) ?u16 {
        return switch (v) {
            .live => |ssl| top.cipherSuite(ssl),
            .kept => |s| s.cipher,
        };
    }

    pub fn serverName(v: SessionView) ?[]const u8 {
        return switch (v) {
            .live => |ssl| top.serverName(ssl),
            .kept => |s| s.server_name,
        };
    }
};

/// Text produced by OpenSSL into a memory BIO; `bytes` is valid until `deinit`.
pub const Text = struct {
    bio: *BIO,

    pub fn bytes(self: Text) []const u8 {
        var ptr: ?[*]const u8 = null;
        const n = api.BIO_ctrl(self.bio, BIO_CTRL_INFO, 0, @ptrCast(&ptr));
        if (n <= 0 or ptr == null) return "";
        return ptr.?[0..@intCast(n)];
    }

    pub fn deinit(self: Text) void {
        _ = api.BIO_free(self.bio);
    }
};

pub fn pem(x: *X509) ?Text {
    const bio = api.BIO_new(api.BIO_s_mem()) orelse return null;
    if (api.PEM_write_bio_X509(bio, x) != 1) {
        _ = api.BIO_free(bio);
        api.ERR_clear_error();
        return null;
    }
    return .{ .bio = bio };
}

/// The certificate's subject as an RFC 4514 string ("CN=client,O=Example").
pub fn subjectName(x: *X509) ?Text {
    const name = api.X509_get_subject_name(x) orelse return null;
    const bio = api.BIO_new(api.BIO_s_mem()) orelse return null;
    if (api.X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC4514) < 0) {
        _ = api.BIO_free(bio);
        api.ERR_clear_error();
        return null;
    }
    return .{ .bio = bio };
}

test "ALPN picks http/1.1 from the client's list and ignores what we do not offer" {
    try std.testing.expectEqualStrings("http/1.1", selectAlpn("\x02h2\x08http/1.1", false).?);
    try std.testing.expectEqualStrings("h2", selectAlpn("\x08http/1.1\x02h2", true).?);
    try std.testing.expect(selectAlpn("\x02h2", false) == null);
    try std.testing.expect(selectAlpn("", true) == null);
    // Truncated or zero-length entries end the scan instead of reading past the list.
    try std.testing.expect(selectAlpn("\x09http/1.1", true) == null);
    try std.testing.expect(selectAlpn("\x00\x08http/1.1", true) == null);
}
