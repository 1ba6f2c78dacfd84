from fastapi import FastAPI
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
