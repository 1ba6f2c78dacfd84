//! The server's wiring of the protocols: each one's table of verbs, which the engine (and
//! a test's server) hands to `Server.init`. The core calls every protocol through these
//! tables (`core/protocol.zig`), so it imports none of them; this file, above them all, is
//! where the one list of TCP protocols is written. HTTP/3 is plugged beside them by its
//! worker (`Server.quic`).
const protocol = @import("../core/protocol.zig");
const http1 = @import("../http1/session.zig");
const http2 = @import("../http2/session.zig");
const websocket = @import("../websocket/session.zig");

pub const verbs: protocol.Protocols = .{
    .http1 = &http1.verbs,
    .http2 = &http2.verbs,
    .websocket = &websocket.verbs,
};
