//! Starting HTTP/3 beside the TCP listener: QUIC's own TLS context, then the worker that
//! plugs itself into the server (`Server.quic`). The engine calls it once TCP's TLS
//! context is set, so a bad certificate fails at start-up once, for both.
const tls = @import("../transport/openssl.zig");
const quic_tls = @import("../quic/tls_context.zig");
const worker = @import("../http3/worker.zig");
const Server = @import("../core/server.zig").Server;

/// `ContextFailed`: QUIC's TLS context was refused (`err` says why); the rest are the
/// worker's (memory, timerfd, the event source, the socket's options).
pub const StartError = error{ContextFailed} || worker.StartError;

/// HTTP/3 on `server`, from the TCP context's options `o`: QUIC's context differs in
/// speaking TLS 1.3 only and offering no h2 (its ALPN is h3).
pub fn start(server: *Server, o: tls.ContextOptions, err: *tls.ContextError) StartError!void {
    var q = o;
    q.min_version = tls.TLS1_3_VERSION;
    q.max_version = tls.TLS1_3_VERSION;
    q.http2 = false;
    const ctx = quic_tls.newContext(q, err) orelse return error.ContextFailed;
    try worker.start(server, ctx);
}
