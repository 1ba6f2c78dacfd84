"""Sends one input's bytes on a fresh connection and reads back everything the server
answered: the outcome is the list of responses (the echoed reading, or the status of a
refusal) and how the connection ended."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field


@dataclass
class Outcome:
    #: one item per final response: {"reading": {...}} from the echo app, or {"status": 400}
    items: list = field(default_factory=list)
    #: "closed" (the server closed), "open" (still open after the idle wait)
    end: str = "open"
    #: interim responses seen (100 Continue), for the report only
    interim: list = field(default_factory=list)
    #: bytes that did not parse as a response (a server answering garbage)
    garbage: bytes = b""

    def to_json(self) -> dict:
        return {"items": self.items, "end": self.end, "interim": self.interim,
                "garbage": self.garbage.decode("latin-1")}


def exchange(port: int, data: bytes, first: float = 1.5, idle: float = 0.3, host: str = "127.0.0.1") -> Outcome:
    """Sends `data` at once, then reads until the server closes or is quiet for `idle`
    seconds after its last byte (`first` seconds if it has sent nothing yet)."""
    received = bytearray()
    closed = False
    with socket.create_connection((host, port), timeout=5) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server may refuse and close before taking it all; read what it said
        wait = first
        while True:
            sock.settimeout(wait)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            received += chunk
            wait = idle
    outcome = parse_responses(bytes(received))
    outcome.end = "closed" if closed else "open"
    return outcome


def _read_line(buf: bytes, pos: int) -> tuple[bytes, int] | None:
    end = buf.find(b"\n", pos)
    if end < 0:
        return None
    return buf[pos:end].rstrip(b"\r"), end + 1


def parse_responses(buf: bytes) -> Outcome:
    outcome = Outcome()
    pos = 0
    while pos < len(buf):
        start = pos
        line = _read_line(buf, pos)
        if line is None or not line[0].startswith(b"HTTP/"):
            outcome.garbage = buf[start:]
            break
        status_line, pos = line
        try:
            status = int(status_line.split()[1])
        except (IndexError, ValueError):
            outcome.garbage = buf[start:]
            break
        headers = {}
        while True:
            line = _read_line(buf, pos)
            if line is None:
                outcome.garbage = buf[start:]
                return outcome
            text, pos = line
            if not text:
                break
            name, _, value = text.partition(b":")
            headers.setdefault(name.strip().lower().decode("latin-1"), value.strip().decode("latin-1"))
        if 100 <= status < 200:
            outcome.interim.append(status)
            continue
        if "content-length" in headers:
            try:
                length = int(headers["content-length"])
            except ValueError:
                length = len(buf) - pos
            body, pos = buf[pos:pos + length], pos + length
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = bytearray()
            while True:
                line = _read_line(buf, pos)
                if line is None:
                    break
                size_text, pos = line
                try:
                    size = int(size_text.split(b";")[0], 16)
                except ValueError:
                    break
                if size == 0:
                    while True:  # trailers
                        line = _read_line(buf, pos)
                        if line is None:
                            break
                        text, pos = line
                        if not text:
                            break
                    break
                body += buf[pos:pos + size]
                pos += size + 2
            body = bytes(body)
        elif status in (204, 304):
            body = b""
        else:
            body, pos = buf[pos:], len(buf)
        if status == 200 and headers.get("x-diff-echo") == "1":
            try:
                outcome.items.append({"reading": json.loads(body)})
                continue
            except ValueError:
                pass
        outcome.items.append({"status": status})
    return outcome
