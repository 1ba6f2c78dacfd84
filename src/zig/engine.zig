//! The engine as one named module (`engine`) for the roots built on their own, outside
//! this folder: the fuzzers and the ctypes test libraries in fuzz/. Zig 0.15 lets a root
//! file import only files below its own folder, so they reach the engine through this
//! file instead (docs/FUZZING.md has the command line):
//!
//!     zig build-exe -OReleaseSafe --dep engine -Mroot=src/zig/fuzz/quic_main.zig \
//!         -OReleaseSafe -Mengine=src/zig/engine.zig
//!
//! Per-module options (-O, -ffuzz, -fPIC, -I) are given again before `-Mengine`.
pub const fuzz_http1 = @import("testing/fuzz_http1.zig");
pub const fuzz_http2 = @import("testing/fuzz_http2.zig");
pub const fuzz_http3 = @import("testing/fuzz_http3.zig");
pub const fuzz_quic = @import("testing/fuzz_quic.zig");
pub const fuzz_quic_conn = @import("testing/fuzz_quic_conn.zig");
pub const fuzz_h3_session = @import("testing/fuzz_h3_session.zig");
pub const fuzz_support = @import("testing/fuzz_support.zig");
pub const openssl = @import("transport/openssl.zig");
pub const quic_tls = @import("quic/tls.zig");
pub const quic_tls_context = @import("quic/tls_context.zig");
pub const quic_connection = @import("quic/connection.zig");
