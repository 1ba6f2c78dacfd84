"""A page a real browser loads over HTTPS: it downloads a file, opens a WebSocket and
echoes through it, and reports what it saw (and over which protocol) in the page."""

import os

from starlette.applications import Starlette
from starlette.responses import FileResponse, HTMLResponse
from starlette.routing import Route, WebSocketRoute

FILES = os.environ.get("ZIGCORN_TEST_FILES", ".")

PAGE = """<!doctype html>
<html><head><title>zigcorn</title></head>
<body><h1>zigcorn in a browser</h1><pre id="result">running</pre>
<script>
(async () => {
  const out = {};
  try {
    const r = await fetch("/files/data.bin");
    out.download = (await r.arrayBuffer()).byteLength;
    out.protocol = performance.getEntriesByType("navigation")[0].nextHopProtocol;
    out.echo = await new Promise((resolve, reject) => {
      const ws = new WebSocket(`wss://${location.host}/ws`);
      const got = [];
      ws.onopen = () => ws.send("hello from the browser");
      ws.onmessage = (e) => { got.push(e.data); if (got.length === 2) { ws.close(); resolve(got); } };
      ws.onerror = () => reject(new Error("websocket error"));
    });
  } catch (e) { out.error = String(e); }
  document.getElementById("result").textContent = JSON.stringify(out);
})();
</script></body></html>"""


async def page(request):
    return HTMLResponse(PAGE)


async def files(request):
    return FileResponse(os.path.join(FILES, request.path_params["name"]))


async def ws(websocket):
    await websocket.accept()
    message = await websocket.receive_text()
    await websocket.send_text(f"http_version {websocket.scope['http_version']}")
    await websocket.send_text(f"echo: {message}")
    try:
        await websocket.receive_text()
    except Exception:
        pass


app = Starlette(routes=[Route("/", page), Route("/files/{name}", files), WebSocketRoute("/ws", ws)])
