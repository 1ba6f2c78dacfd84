"""A Flask (WSGI) app: `GET /` says hello, `POST /upload` reads the whole body and
answers its length."""

from flask import Flask, request

app = Flask(__name__)


@app.get("/")
def hello():
    return {"message": "Hello, world!"}


@app.post("/upload")
def upload():
    return str(len(request.get_data()))
