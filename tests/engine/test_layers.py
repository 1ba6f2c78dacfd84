"""The engine's layers, as docs/ARCHITECTURE.md draws them, held by its imports.

Each folder of src/zig/ may import the folders below it: `core/` (connections, streams,
the seam) sits below the protocols and imports none of them, and `server/` above them
wires them in. No protocol folder imports another's (their hand-overs go through the
seam, core/protocol.zig), no two folders import each other even through others, and the
largest import cycle of files may only shrink.
"""

import re
from pathlib import Path

ZIG = Path(__file__).resolve().parents[2] / "src" / "zig"

# What each folder may import besides itself (and the standard library).
BELOW_PROTOCOLS = {"core", "features", "http", "transport", "os"}
ALLOWED = {
    "os": set(),
    "transport": {"os"},
    "http": {"transport", "os"},
    "features": {"http", "transport", "os"},
    "core": {"features", "http", "transport", "os"},
    "http1": BELOW_PROTOCOLS,
    "http2": BELOW_PROTOCOLS,
    "websocket": BELOW_PROTOCOLS,
    "quic": {"transport", "os"},
    "http3": {"quic"} | BELOW_PROTOCOLS,
    "server": {"http1", "http2", "http3", "quic", "websocket"} | BELOW_PROTOCOLS,
    "python": {"server", "http1", "http2", "http3", "quic", "websocket"} | BELOW_PROTOCOLS,
    "loop": {"python", "core", "os"},
    "testing": {"server", "http1", "http2", "http3", "quic", "websocket", "python"} | BELOW_PROTOCOLS,
}
PROTOCOLS = {"http1", "http2", "http3", "websocket"}
# The largest knot of files that import each other (the core's connection, server, stream,
# seam and hooks; HTTP/2's state and the four concerns under every frame; QUIC's
# connection and its halves: 5 each, ARCHITECTURE.md): it may only shrink.
LARGEST_CYCLE_MAX = 5


def imports() -> dict[str, set[str]]:
    """{file: the files it imports}, paths relative to src/zig."""
    graph = {}
    for path in sorted(ZIG.rglob("*.zig")):
        name = path.relative_to(ZIG).as_posix()
        graph[name] = set()
        for target in re.findall(r'@import\("([^"]+\.zig)"\)', path.read_text()):
            resolved = (path.parent / target).resolve()
            assert resolved.is_file(), f"{name} imports {target}, which does not exist"
            graph[name].add(resolved.relative_to(ZIG).as_posix())
    return graph


def folder(name: str) -> str:
    return name.split("/")[0] if "/" in name else ""


def test_each_folder_imports_only_the_layers_below_it():
    wrong = []
    for name, targets in imports().items():
        here = folder(name)
        if here not in ALLOWED:  # the roots (extension, unit tests, fuzz executables)
            continue
        for target in targets:
            there = folder(target)
            if there == here:
                continue
            if is_unit_test_edge(name, target):  # unit tests use the fixtures
                continue
            if there not in ALLOWED[here]:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports against the layers of docs/ARCHITECTURE.md:\n" + "\n".join(sorted(wrong))


def is_unit_test_edge(name: str, target: str) -> bool:
    """A protocol's unit tests use the fixtures of testing/: they are roots of the test
    build, not a layer of the engine."""
    return name.endswith("_tests.zig") and folder(target) == "testing"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph`, each sorted."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            components.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return components


def test_the_layers_themselves_have_no_cycle():
    knots = [c for c in strongly_connected(ALLOWED) if len(c) > 1]
    assert not knots, f"ALLOWED lets folders import each other: {knots}"


def test_no_two_folders_import_each_other():
    """The folder graph has no cycle, even through other folders (the core below the
    protocols, the server above them; a unit test's use of testing/ aside)."""
    folders: dict[str, set[str]] = {}
    for name, targets in imports().items():
        for target in targets:
            if folder(name) and folder(name) != folder(target) and not is_unit_test_edge(name, target):
                folders.setdefault(folder(name), set()).add(folder(target))
    knots = [c for c in strongly_connected(folders) if len(c) > 1]
    assert not knots, f"folders that import each other: {knots}"


def test_the_core_imports_no_protocol():
    """The core reaches each protocol through its table of verbs (core/protocol.zig), never
    by an import."""
    found = sorted(f"{name} -> {t}" for name, targets in imports().items() for t in targets
                   if folder(name) == "core" and folder(t) in PROTOCOLS | {"server", "quic"})
    assert not found, found


def test_transport_knows_no_http():
    graph = imports()
    for name, targets in graph.items():
        if folder(name) == "transport":
            assert {folder(t) for t in targets} <= {"transport", "os"}, (name, targets)


def test_no_protocol_folder_imports_another():
    """Hand-overs (HTTP/1.1 starting HTTP/2 or WebSocket, a stream carrying a WebSocket) go
    through the seam, core/protocol.zig, and websocket/carrier.zig (ARCHITECTURE.md)."""
    found = {(name, t) for name, targets in imports().items() for t in targets
             if folder(name) in PROTOCOLS and folder(t) in PROTOCOLS and folder(t) != folder(name)}
    assert not found, f"imports between protocols: {sorted(found)}"


def test_the_largest_import_cycle_does_not_grow():
    largest = max(strongly_connected(imports()), key=len)
    print(f"largest import cycle: {len(largest)} files: {largest}")
    assert len(largest) <= LARGEST_CYCLE_MAX, largest


# The house rule: every engine file short enough to read whole (ARCHITECTURE.md). A file
# that grows past it is split where its subjects part, not at the line count.
LINES_MAX = 1000


def test_no_engine_file_passes_the_line_limit():
    long = {path.relative_to(ZIG).as_posix(): n for path in sorted(ZIG.rglob("*.zig"))
            if (n := len(path.read_text().splitlines())) > LINES_MAX}
    assert not long, f"files over {LINES_MAX} lines: {long}"
