//! The connection's framing decisions, driven with hand-built client packets.
const std = @import("std");
const connection = @import("connection.zig");

test "connection: compiles" {
    _ = connection.Connection;
}
