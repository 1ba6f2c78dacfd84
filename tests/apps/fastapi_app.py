from fastapi import FastAPI, WebSocket, WebSocketDisconnect, WebSocketException, status
from pydantic import BaseModel

app = FastAPI()


class Item(BaseModel):
    name: str
    price: float
    tags: list[str] = []


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None):
    return {"item_id": item_id, "q": q}


@app.post("/items", status_code=201)
async def create_item(item: Item):
    return {"name": item.name, "price": item.price, "tags": item.tags, "double": item.price * 2}


@app.get("/sync")
def sync_route():  # runs in the threadpool
    return {"sync": True}


@app.websocket("/ws/{room}")
async def ws_room(websocket: WebSocket, room: str, token: str | None = None):
    if token == "bad":
        raise WebSocketException(code=status.WS_1008_POLICY_VIOLATION)
    await websocket.accept()
    await websocket.send_json({"room": room, "token": token})
    try:
        async for data in websocket.iter_bytes():
            await websocket.send_bytes(data[::-1])
    except WebSocketDisconnect:
        pass
