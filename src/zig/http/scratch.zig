//! The engine's module-level scratch buffers (decoded HTTP/2 header blocks, joined
//! cookies, engine-made answers, h2c settings, lower-cased names) serve every
//! connection. A use lasts one call, and only the thread that runs the engine (the one
//! holding the GIL while it polls) may make one: the writer thread never does. `claim`
//! asserts that rule where a scratch buffer is written.
const std = @import("std");

var owner: ?std.Thread.Id = null;

/// Asserts the caller is the engine's thread (the first thread that claimed a scratch buffer).
pub fn claim() void {
    const me = std.Thread.getCurrentId();
    const first = owner orelse blk: {
        owner = me;
        break :blk me;
    };
    std.debug.assert(first == me);
}
