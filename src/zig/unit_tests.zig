//! The one root of the engine's Zig unit tests: every file with `test` blocks is named
//! here, so one compile runs them all (a file below this folder cannot be a test root of
//! its own: Zig keeps imports inside the root file's folder).
//!
//!     python -m ziglang test -lc -I "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" src/zig/unit_tests.zig
//!
//! `--test-filter` picks some (e.g. "fuzz:" for the parser's corpus, "h2 windows").
//! `ZIGCORN_IO_BACKEND=io_uring` runs the connection tests on the io_uring backend.
test {
    // os: system calls, the I/O backends, buffers, deadlines
    _ = @import("os/buffer_pool.zig");
    _ = @import("os/small_pool.zig");
    _ = @import("os/deadlines.zig");
    _ = @import("os/sys.zig");
    _ = @import("os/zlib.zig");
    _ = @import("os/io_uring.zig");
    _ = @import("os/io_uring_slots.zig");
    _ = @import("os/io_uring_tests.zig");
    // transport: connections, output queues, TLS
    _ = @import("transport/openssl.zig");
    _ = @import("transport/output_queue.zig");
    _ = @import("features/per_ip.zig");
    _ = @import("features/proxy_protocol.zig");
    _ = @import("transport/connection_age.zig");
    _ = @import("transport/udp.zig");
    _ = @import("transport/udp_tests.zig");
    _ = @import("transport/udp_steering.zig");
    // HTTP shared by the protocols
    _ = @import("features/forwarded.zig");
    _ = @import("features/metrics.zig");
    _ = @import("http/response.zig");
    _ = @import("server/static_files.zig");
    _ = @import("features/static_paths.zig");
    _ = @import("features/static_fields.zig");
    _ = @import("features/tracing.zig");
    _ = @import("features/rate_limit.zig");
    _ = @import("features/compression.zig");
    _ = @import("features/decompression.zig");
    _ = @import("http/huffman.zig");
    _ = @import("http/prefix_int.zig");
    // the protocols
    _ = @import("http/http1_parser.zig");
    _ = @import("http/http1_scan.zig");
    _ = @import("http/http1_chunked.zig");
    _ = @import("http/fields.zig");
    _ = @import("features/answers.zig");
    _ = @import("http/request_fields.zig");
    _ = @import("python/environ.zig");
    _ = @import("python/scope.zig");
    _ = @import("http1/session.zig");
    _ = @import("http2/hpack.zig");
    _ = @import("http2/frames.zig");
    _ = @import("http2/request.zig");
    _ = @import("http2/session.zig");
    _ = @import("http2/session_tests.zig");
    _ = @import("http2/session_life_tests.zig");
    _ = @import("http2/peer_integers_tests.zig");
    _ = @import("websocket/codec.zig");
    _ = @import("features/websocket_deflate.zig");
    // the seam: the hand-overs between protocols
    _ = @import("core/protocol.zig");
    _ = @import("websocket/session.zig"); // the upgrade's handshake checks on parsed HTTP/1.1 heads
    // QUIC (HTTP/3's transport)
    _ = @import("quic/suite.zig");
    _ = @import("quic/tls.zig");
    _ = @import("quic/tls_tests.zig");
    _ = @import("quic/ack_ranges.zig");
    _ = @import("quic/recovery.zig");
    _ = @import("quic/recovery_tests.zig");
    _ = @import("quic/congestion.zig");
    _ = @import("quic/varint.zig");
    _ = @import("quic/packet.zig");
    _ = @import("quic/protection_tests.zig");
    _ = @import("quic/frames.zig");
    _ = @import("quic/transport_params.zig");
    _ = @import("quic/stateless_reset.zig");
    _ = @import("quic/cid_table.zig");
    _ = @import("quic/retry_token.zig");
    _ = @import("quic/new_token.zig");
    _ = @import("quic/datagrams.zig");
    _ = @import("quic/pmtu.zig");
    _ = @import("quic/ecn.zig");
    _ = @import("http3/capsules.zig");
    _ = @import("quic/endpoint.zig");
    _ = @import("quic/endpoint_tests.zig");
    _ = @import("quic/reassembly.zig");
    _ = @import("quic/streams.zig");
    _ = @import("quic/sent_frames.zig");
    _ = @import("quic/crypto_stream.zig");
    _ = @import("quic/path.zig");
    _ = @import("quic/qlog.zig");
    _ = @import("quic/connection.zig");
    _ = @import("quic/connection_tests.zig");
    _ = @import("quic/conn_cids_tests.zig");
    _ = @import("quic/key_update_tests.zig");
    _ = @import("quic/pmtu_ecn_tests.zig");
    _ = @import("quic/peer_integers_tests.zig");
    // HTTP/3's wire layer: frames, QPACK
    _ = @import("http3/frames.zig");
    _ = @import("http3/frame_reader.zig");
    _ = @import("http3/frames_tests.zig");
    _ = @import("http3/qpack.zig");
    _ = @import("http3/qpack_decoder.zig");
    _ = @import("http3/qpack_decoder_tests.zig");
    _ = @import("http3/qpack_encoder.zig");
    _ = @import("http3/session.zig");
    _ = @import("http3/session_tests.zig");
    _ = @import("http3/session_qpack_tests.zig");
    _ = @import("http3/peer_integers_tests.zig");
    _ = @import("http3/streams.zig");
    _ = @import("http3/stream_verbs.zig");
    // zigcorn's event loop
    _ = @import("loop/queues.zig");
    _ = @import("loop/handle.zig");
    _ = @import("loop/core.zig");
    _ = @import("loop/task.zig");
    _ = @import("loop/task_api.zig");
    _ = @import("loop/wait.zig");
    // whole connections over a socketpair, and the fuzz targets' fixed runs
    _ = @import("testing/connection_tests.zig");
    _ = @import("testing/peer_integers_tests.zig");
    _ = @import("testing/fuzz_http1.zig");
    _ = @import("testing/fuzz_http2.zig");
    _ = @import("testing/fuzz_http3.zig");
    _ = @import("testing/fuzz_quic.zig");
    _ = @import("quic/error_paths_tests.zig");
    _ = @import("testing/fuzz_quic_conn.zig");
    _ = @import("testing/fuzz_h3_session.zig");
}
