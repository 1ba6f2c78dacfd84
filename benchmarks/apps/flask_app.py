"""A Flask (WSGI) app: `GET /` says hello, `POST /upload` reads the whole body and
answers its length, `POST /echo` answers the body itself."""

from flask import Flask, request

app = Flask(__name__)


@app.get("/")
def hello():
    return {"message": "Hello, world!"}


@app.post("/upload")
def upload():
    return str(len(request.get_data()))


@app.post("/echo")
def echo():
    return request.get_data(), 200, {"content-type": "application/octet-stream"}
