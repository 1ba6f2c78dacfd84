//! QUIC's own SSL_CTX (RFC 9001): TLS 1.3 only, ALPN "h3", the quic_transport_parameters
//! extension, the keylog callback the handshake shim (tls.zig) takes its secrets from, no
//! middlebox compatibility (no ChangeCipherSpec, RFC 9001 8.4), no early data. The
//! certificate chain, key and client-certificate settings are TCP's (`--ssl-certfile`,
//! `--ssl-keyfile`, `--ssl-keyfile-password`, `--ssl-cert-reqs`, `--ssl-ca-certs`, `--ssl-crl`),
//! loaded by the same code (transport/openssl.zig), and so are resumption's (the session id
//! context and the ticket keys every worker shares, `--ssl-session-tickets`): a ticket one
//! worker issued resumes on any other. TCP-only settings (versions, the TLS 1.2 cipher list,
//! "h2", session cache) do not apply.
const std = @import("std");
const openssl = @import("../transport/openssl.zig");
const tls = @import("tls.zig");

const SSL_CTX = openssl.SSL_CTX;

// Values of OpenSSL 3's public ABI (ssl.h).
const SSL_CTRL_MODE = 33;
const SSL_CTRL_SET_MIN_PROTO_VERSION = 123;
const SSL_CTRL_SET_MAX_PROTO_VERSION = 124;
const SSL_CTRL_SET_GROUPS_LIST = 92;
const SSL_CTRL_SET_SESS_CACHE_MODE = 44;
const SSL_MODE_RELEASE_BUFFERS = 0x10;
const SSL_OP_ENABLE_MIDDLEBOX_COMPAT: u64 = 1 << 20;
const SSL_OP_NO_RENEGOTIATION: u64 = 1 << 30;
const SSL_OP_CIPHER_SERVER_PREFERENCE: u64 = 1 << 22;
const SSL_EXT_CLIENT_HELLO: c_uint = 0x0080;
const SSL_EXT_TLS1_3_ENCRYPTED_EXTENSIONS: c_uint = 0x0400;

/// The suites suite.zig implements (RFC 9001 5.3 also allows AES-128-CCM, which we do not).
const ciphersuites = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
/// Key-exchange groups, ours first. Finite-field groups are left out: their key shares
/// make a ClientHello of several packets. X25519MLKEM768 only where OpenSSL has it (3.5+).
const groups_hybrid = "X25519MLKEM768:X25519:P-256:P-384";
const groups = "X25519:P-256:P-384";
/// Session tickets issued after a handshake (resumption without 0-RTT).
const tickets = 1;

pub fn newContext(opts: openssl.ContextOptions, err: *openssl.ContextError) ?*SSL_CTX {
    const f = openssl.functions();
    f.ERR_clear_error();
    const ctx = f.SSL_CTX_new(f.TLS_server_method()) orelse {
        err.set("could not create the QUIC TLS context");
        return null;
    };
    if (!configure(ctx, opts, err)) {
        f.SSL_CTX_free(ctx);
        return null;
    }
    return ctx;
}

fn configure(ctx: *SSL_CTX, opts: openssl.ContextOptions, err: *openssl.ContextError) bool {
    const f = openssl.functions();
    _ = f.SSL_CTX_ctrl(ctx, SSL_CTRL_MODE, SSL_MODE_RELEASE_BUFFERS, null);
    _ = f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_SESS_CACHE_MODE, 0, null);
    _ = f.SSL_CTX_clear_options(ctx, SSL_OP_ENABLE_MIDDLEBOX_COMPAT);
    _ = f.SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
    if (f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, openssl.TLS1_3_VERSION, null) != 1 or
        f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, openssl.TLS1_3_VERSION, null) != 1)
    {
        err.set("QUIC: TLS 1.3 is not available");
        return false;
    }
    if (f.SSL_CTX_set_ciphersuites(ctx, ciphersuites) != 1) {
        err.set("QUIC: could not set the TLS 1.3 cipher suites");
        return false;
    }
    if (f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_GROUPS_LIST, 0, @constCast(groups_hybrid)) != 1) {
        f.ERR_clear_error();
        if (f.SSL_CTX_ctrl(ctx, SSL_CTRL_SET_GROUPS_LIST, 0, @constCast(groups)) != 1) {
            err.set("QUIC: could not set the key exchange groups");
            return false;
        }
    }
    if (f.SSL_CTX_set_max_early_data(ctx, 0) != 1) {
        err.set("QUIC: could not refuse early data");
        return false;
    }
    if (f.SSL_CTX_set_num_tickets(ctx, if (opts.session_tickets) tickets else 0) != 1) {
        err.set("QUIC: could not set the number of session tickets");
        return false;
    }
    if (!openssl.configureResumption(ctx, opts, err)) return false;
    if (!openssl.loadCertificate(ctx, opts, err) or !openssl.configureVerify(ctx, opts, err)) return false;
    f.SSL_CTX_set_alpn_select_cb(ctx, tls.alpnCallback, null);
    f.SSL_CTX_set_client_hello_cb(ctx, tls.clientHelloCallback, null);
    f.SSL_CTX_set_keylog_callback(ctx, tls.keylogCallback);
    const context = SSL_EXT_CLIENT_HELLO | SSL_EXT_TLS1_3_ENCRYPTED_EXTENSIONS;
    if (f.SSL_CTX_add_custom_ext(ctx, tls.transport_parameters_ext, context, tls.paramsAddCallback, null, null, tls.paramsParseCallback, null) != 1) {
        // OpenSSL refuses a custom extension of a type it implements itself; 3.0 to 3.6
        // implement 0x39 only inside their own QUIC stack, so a TLS server takes ours.
        err.set("QUIC: could not add the quic_transport_parameters extension");
        return false;
    }
    return true;
}
