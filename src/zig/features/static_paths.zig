//! `--static` mounts: which mount a request path falls under, the path decoder, and
//! opening a file beneath the mount's DIR.
//!
//! Safety first: the request path is percent-decoded once and split into segments;
//! `..`, backslashes, NUL and control bytes are refused, dotfiles unless asked for.
//! The file is then opened relative to DIR's descriptor with openat2(RESOLVE_BENEATH),
//! so no symlink leads out of DIR either; where the kernel lacks openat2 a checked walk
//! opens one segment at a time and refuses every symlink.
const std = @import("std");
const linux = std.os.linux;
const sys = @import("../os/sys.zig");

/// One `--static ROUTE=DIR`.
pub const Mount = struct {
    /// "/static" (no trailing slash); "" for a mount at "/".
    route: []const u8,
    /// DIR, opened once (O_PATH | O_DIRECTORY) when the engine starts.
    dir_fd: i32,
};

pub const Config = struct {
    mounts: []const Mount = &.{},
    /// `--static-expires`: cache-control max-age in seconds; null: no cache-control.
    expires: ?u32 = null,
    /// `--static-dotfiles`: names starting with '.' are served too.
    dotfiles: bool = false,
    /// `--static-precompressed`: a `.br`, `.zst` or `.gz` sibling is sent to a client
    /// that accepts that coding.
    precompressed: bool = false,
    /// `--header` fields, added to every answer as to the app's (owned by the engine).
    extra: []const [2][]const u8 = &.{},
    /// How many mounts were allocated (python/options.zig frees them).
    mounts_cap: usize = 0,
};

/// The decoded relative path past this is refused (PATH_MAX).
pub const path_bytes_max = 4096;
/// A segment longer than this cannot name a file (NAME_MAX).
const segment_bytes_max = 255;

// ---- routing and the path decoder ---------------------------------------------------

/// The mount serving `path` (origin-form, before '?', still percent-encoded) and what
/// follows its route; the longest route wins.
pub fn match(cfg: *const Config, path: []const u8) ?struct { mount: *const Mount, rest: []const u8 } {
    var best: ?*const Mount = null;
    for (cfg.mounts) |*m| {
        if (!std.mem.startsWith(u8, path, m.route)) continue;
        if (path.len > m.route.len and path[m.route.len] != '/') continue;
        if (path.len == m.route.len and m.route.len == 0) continue;
        if (best == null or m.route.len > best.?.route.len) best = m;
    }
    const m = best orelse return null;
    return .{ .mount = m, .rest = path[m.route.len..] };
}

pub const DecodeError = error{
    /// A '%' not followed by two hex digits, or a NUL: 400.
    BadEncoding,
    /// `..`, a backslash, a control byte, or a dotfile: 404, as for a missing file.
    Forbidden,
    /// Longer than a path or a name can be: 404.
    TooLong,
};

pub const Decoded = struct {
    /// Segments joined by '/', relative to DIR; "." for DIR itself.
    rel: [:0]const u8,
};

/// Decodes what follows a route into a path relative to DIR, in `out`. Percent-decoding
/// happens exactly once (`%252e` stays the literal name `%2e`); a decoded '/' separates
/// segments as a raw one does. Empty and "." segments are skipped.
pub fn decodePath(rest: []const u8, out: []u8, dotfiles: bool) DecodeError!Decoded {
    std.debug.assert(out.len >= 2);
    var len: usize = 0;
    var seg_start: usize = 0;
    var i: usize = 0;
    while (true) {
        const at_end = i >= rest.len;
        var ch: u8 = '/';
        if (!at_end) {
            ch = rest[i];
            if (ch == '%') {
                if (i + 2 >= rest.len) return error.BadEncoding;
                const hi = std.fmt.charToDigit(rest[i + 1], 16) catch return error.BadEncoding;
                const lo = std.fmt.charToDigit(rest[i + 2], 16) catch return error.BadEncoding;
                ch = hi * 16 + lo;
                i += 3;
            } else i += 1;
        }
        if (ch == '/') {
            // A segment ends: check it, or drop it when empty or ".".
            const seg = out[seg_start..len];
            if (seg.len == 0 or std.mem.eql(u8, seg, ".")) {
                len = seg_start;
            } else {
                if (std.mem.eql(u8, seg, "..")) return error.Forbidden;
                if (seg[0] == '.' and !dotfiles) return error.Forbidden;
                if (seg.len > segment_bytes_max) return error.TooLong;
                if (len + 1 >= out.len) return error.TooLong;
                out[len] = '/';
                len += 1;
                seg_start = len;
            }
            if (at_end) break;
            continue;
        }
        if (ch == 0) return error.BadEncoding;
        if (ch == '\\' or ch < 0x20 or ch == 0x7f) return error.Forbidden;
        if (len + 2 >= out.len) return error.TooLong;
        out[len] = ch;
        len += 1;
    }
    // Drop the separator after the last segment.
    if (len > 0) len -= 1;
    if (len == 0) {
        out[0] = '.';
        len = 1;
    }
    out[len] = 0;
    return .{ .rel = out[0..len :0] };
}

// ---- opening beneath DIR --------------------------------------------------------------

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const OpenHow = extern struct { flags: u64, mode: u64, resolve: u64 };

/// openat2 is missing (ENOSYS) or filtered (a seccomp EPERM/ENOSYS): the walk is used
/// from then on. Tests set it to exercise the walk.
pub var openat2_missing: bool = false;

/// The flags a served file is opened with: never blocking (a FIFO in DIR must not stall
/// the loop), never a controlling terminal.
const file_flags: linux.O = .{ .ACCMODE = .RDONLY, .CLOEXEC = true, .NOCTTY = true, .NONBLOCK = true };

/// Opens `rel` beneath `dir_fd`; the descriptor or the errno (EXDEV/ELOOP: it would
/// leave DIR or follow a refused symlink).
pub fn openBeneath(dir_fd: i32, rel: [:0]const u8) sys.Result(i32) {
    if (!openat2_missing) {
        var how = OpenHow{ .flags = @as(u32, @bitCast(file_flags)), .mode = 0, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
        const rc = linux.syscall4(.openat2, @as(usize, @bitCast(@as(isize, dir_fd))), @intFromPtr(rel.ptr), @intFromPtr(&how), @sizeOf(OpenHow));
        const e = sys.E.init(rc);
        switch (e) {
            .SUCCESS => return .{ .ok = @intCast(rc) },
            .NOSYS, .PERM => openat2_missing = true,
            .INTR, .AGAIN => return openBeneath(dir_fd, rel),
            else => return .{ .err = e },
        }
    }
    return walk(dir_fd, rel);
}

/// The checked walk: each directory opened with O_NOFOLLOW, the file too; a symlink
/// anywhere on the way is refused (ELOOP/ENOTDIR).
fn walk(dir_fd: i32, rel: [:0]const u8) sys.Result(i32) {
    var name_buf: [segment_bytes_max + 1]u8 = undefined;
    var cur = dir_fd;
    var it = std.mem.splitScalar(u8, rel, '/');
    var seg = it.next().?;
    while (it.next()) |next| : (seg = next) {
        if (seg.len > segment_bytes_max or std.mem.eql(u8, seg, "..")) return closing(cur, dir_fd, .{ .err = .NOENT });
        @memcpy(name_buf[0..seg.len], seg);
        name_buf[seg.len] = 0;
        const rc = linux.openat(cur, name_buf[0..seg.len :0], .{ .PATH = true, .DIRECTORY = true, .NOFOLLOW = true, .CLOEXEC = true }, 0);
        if (cur != dir_fd) sys.close(cur);
        const e = sys.E.init(rc);
        if (e != .SUCCESS) return .{ .err = if (e == .NOTDIR) .LOOP else e };
        cur = @intCast(rc);
    }
    if (seg.len > segment_bytes_max or std.mem.eql(u8, seg, "..")) return closing(cur, dir_fd, .{ .err = .NOENT });
    @memcpy(name_buf[0..seg.len], seg);
    name_buf[seg.len] = 0;
    var flags = file_flags;
    // DIR itself ("."): no symlink can be met.
    flags.NOFOLLOW = !std.mem.eql(u8, seg, ".");
    const rc = linux.openat(cur, name_buf[0..seg.len :0], flags, 0);
    const e = sys.E.init(rc);
    return closing(cur, dir_fd, if (e == .SUCCESS) .{ .ok = @intCast(rc) } else .{ .err = e });
}

fn closing(cur: i32, dir_fd: i32, r: sys.Result(i32)) sys.Result(i32) {
    if (cur != dir_fd) sys.close(cur);
    return r;
}

// ---- tests -------------------------------------------------------------------------------

const tt = std.testing;

fn dec(rest: []const u8) DecodeError![]const u8 {
    const S = struct {
        var buf: [path_bytes_max]u8 = undefined;
    };
    const d = try decodePath(rest, &S.buf, false);
    return d.rel;
}

test "static: routes match whole segments, the longest wins" {
    const mounts = [_]Mount{ .{ .route = "/static", .dir_fd = 1 }, .{ .route = "/static/img", .dir_fd = 2 }, .{ .route = "", .dir_fd = 3 } };
    const cfg = Config{ .mounts = mounts[0..2] };
    try tt.expect(match(&cfg, "/staticx") == null);
    try tt.expect(match(&cfg, "/other") == null);
    try tt.expectEqual(@as(i32, 1), match(&cfg, "/static").?.mount.dir_fd);
    try tt.expectEqualStrings("/a.css", match(&cfg, "/static/a.css").?.rest);
    try tt.expectEqual(@as(i32, 2), match(&cfg, "/static/img/x.png").?.mount.dir_fd);
    try tt.expectEqual(@as(i32, 1), match(&cfg, "/static/imgs").?.mount.dir_fd);
    const root = Config{ .mounts = mounts[2..] };
    try tt.expectEqualStrings("/x", match(&root, "/x").?.rest);
    try tt.expectEqualStrings("/", match(&root, "/").?.rest);
}

test "static: the decoder joins segments and decodes once" {
    try tt.expectEqualStrings("a/b.txt", try dec("/a/b.txt"));
    try tt.expectEqualStrings("a/b.txt", try dec("//a///b.txt"));
    try tt.expectEqualStrings("a/b.txt", try dec("/./a/./b.txt"));
    try tt.expectEqualStrings(".", try dec(""));
    try tt.expectEqualStrings(".", try dec("/"));
    try tt.expectEqualStrings("dir", try dec("/dir/"));
    try tt.expectEqualStrings("a b.txt", try dec("/a%20b.txt"));
    try tt.expectEqualStrings("a/b", try dec("/a%2fb"));
    // Double-encoded stays literal after one decoding.
    try tt.expectEqualStrings("%2e%2e/x", try dec("/%252e%252e/x"));
    try tt.expectEqualStrings("%2e%2e%2fetc", try dec("/%252e%252e%252fetc"));
    try tt.expectEqualStrings("\xc3\xa9", try dec("/%C3%A9"));
    try tt.expectEqualStrings("etc/passwd", try dec("//etc/passwd"));
}

test "static: the decoder refuses traversal, backslashes, NUL, control bytes and dotfiles" {
    const forbidden = [_][]const u8{
        "/..",        "/../x",     "/a/../../x",     "/%2e%2e/x",    "/%2E%2E/x",    "/.%2e/x",
        "/%2e./x",    "/a/..%2fx", "/..%2f..%2fetc", "/a%2f..%2f..", "/..\\x",       "/a\\b",
        "/%5c..%5cx", "/%0a",      "/a%7f",          "/.env",        "/a/.git/HEAD", "/%2eenv",
        "/a/%2e%2e",
    };
    for (forbidden) |p| {
        if (dec(p)) |got| {
            std.debug.print("{s} decoded to {s}\n", .{ p, got });
            return error.TestUnexpectedResult;
        } else |e| try tt.expectEqual(error.Forbidden, e);
    }
    const bad = [_][]const u8{ "/a%00b", "/%", "/%2", "/%zz", "/a%2", "/%g0" };
    for (bad) |p| try tt.expectError(error.BadEncoding, dec(p));
    // Dotfiles when asked for; `..` never.
    var buf: [64]u8 = undefined;
    try tt.expectEqualStrings(".env", (try decodePath("/.env", &buf, true)).rel);
    try tt.expectError(error.Forbidden, decodePath("/..", &buf, true));
    try tt.expectError(error.Forbidden, decodePath("/%2e%2e", &buf, true));
}

test "static: the decoder bounds names and paths" {
    try tt.expectError(error.TooLong, dec("/" ++ "a" ** 256));
    _ = try dec("/" ++ "a" ** 255);
    var small: [8]u8 = undefined;
    try tt.expectError(error.TooLong, decodePath("/abcdefgh", &small, false));
    try tt.expectEqualStrings("abcde", (try decodePath("/abcde", &small, false)).rel);
    try tt.expectError(error.TooLong, decodePath("/abc/defg", &small, false));
}

test "static: fuzz the decoder: whatever it returns is a clean relative path" {
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const r = prng.random();
    const alphabet = "/.%25eE2fF5cC0a\\x";
    var input: [48]u8 = undefined;
    var out: [64]u8 = undefined;
    for (0..200_000) |_| {
        const n = r.uintLessThan(usize, input.len);
        for (input[0..n]) |*ch| ch.* = if (r.uintLessThan(u8, 8) == 0) r.int(u8) else alphabet[r.uintLessThan(usize, alphabet.len)];
        const d = decodePath(input[0..n], &out, r.boolean()) catch continue;
        const rel = d.rel;
        try tt.expect(rel.len > 0 and rel.len < out.len);
        try tt.expect(rel[0] != '/' and rel[rel.len - 1] != '/');
        try tt.expect(std.mem.indexOfScalar(u8, rel, 0) == null);
        try tt.expect(std.mem.indexOfScalar(u8, rel, '\\') == null);
        if (!std.mem.eql(u8, rel, ".")) {
            var it = std.mem.splitScalar(u8, rel, '/');
            while (it.next()) |seg| {
                try tt.expect(seg.len > 0);
                try tt.expect(!std.mem.eql(u8, seg, ".") and !std.mem.eql(u8, seg, ".."));
            }
        }
    }
}

test "static: opening beneath DIR, with openat2 and with the checked walk" {
    var tmp = tt.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.makePath("root/sub");
    try tmp.dir.writeFile(.{ .sub_path = "root/sub/f.txt", .data = "hi" });
    try tmp.dir.writeFile(.{ .sub_path = "secret.txt", .data = "no" });
    try tmp.dir.symLink("../secret.txt", "root/out", .{});
    try tmp.dir.symLink("sub/f.txt", "root/in", .{});
    try tmp.dir.symLink("../../secret.txt", "root/sub/up", .{});
    var root = try tmp.dir.openDir("root", .{});
    defer root.close();
    const saved = openat2_missing;
    defer openat2_missing = saved;
    for ([_]bool{ false, true }) |walk_only| {
        openat2_missing = walk_only;
        switch (openBeneath(root.fd, "sub/f.txt")) {
            .ok => |fd| sys.close(fd),
            .err => return error.TestUnexpectedResult,
        }
        switch (openBeneath(root.fd, ".")) {
            .ok => |fd| sys.close(fd),
            .err => return error.TestUnexpectedResult,
        }
        for ([_][:0]const u8{ "out", "sub/up", "../secret.txt", "sub/../../secret.txt", "/etc/passwd" }) |p| switch (openBeneath(root.fd, p)) {
            .ok => |fd| {
                sys.close(fd);
                std.debug.print("{s} opened (walk: {})\n", .{ p, walk_only });
                return error.TestUnexpectedResult;
            },
            .err => {},
        };
        try tt.expect(openBeneath(root.fd, "missing") == .err);
        try tt.expect(openBeneath(root.fd, "sub/f.txt/x") == .err);
        // A symlink that stays beneath DIR: followed by openat2, refused by the walk.
        switch (openBeneath(root.fd, "in")) {
            .ok => |fd| {
                sys.close(fd);
                try tt.expect(!openat2_missing);
            },
            .err => try tt.expect(openat2_missing),
        }
    }
}
