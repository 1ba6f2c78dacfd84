//! The server's wiring: each TCP protocol's table of verbs and the engine's own answer
//! before the app (`--static`), which the engine (and a test's server) hands to
//! `Server.init`. The core calls them through this value (`core/protocol.zig` `Wiring`),
//! so it imports none of them; this file, above them all, is where the one list of TCP
//! protocols is written. HTTP/3 is plugged beside them by its worker (`Server.quic`).
const protocol = @import("../core/protocol.zig");
const http1 = @import("../http1/session.zig");
const http2 = @import("../http2/session.zig");
const websocket = @import("../websocket/session.zig");
const static_files = @import("static_files.zig");

pub const verbs: protocol.Wiring = .{
    .http1 = &http1.verbs,
    .http2 = &http2.verbs,
    .websocket = &websocket.verbs,
    .answerFirst = static_files.answer,
};
