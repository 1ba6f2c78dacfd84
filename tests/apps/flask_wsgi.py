"""A Flask app served as WSGI (--interface wsgi): sync views, a multipart file upload,
a streamed response and send_file (wsgi.file_wrapper)."""

import hashlib
import os

from flask import Flask, Response, jsonify, request, send_file

FILES = os.environ.get("ZIGCORN_TEST_FILES", os.path.dirname(__file__))

app = Flask(__name__)


@app.get("/hello")
def hello():
    return jsonify(framework="flask", q=request.args.get("q"), scheme=request.scheme)


@app.post("/upload")
def upload():
    f = request.files["file"]
    data = f.read()
    return jsonify(name=f.filename, size=len(data), sha256=hashlib.sha256(data).hexdigest(), field=request.form["note"])


@app.get("/stream")
def stream():
    def parts():
        for i in range(5):
            yield f"chunk{i};"

    return Response(parts(), mimetype="text/plain")


@app.get("/file")
def file():
    return send_file(os.path.join(FILES, "data.bin"), mimetype="application/octet-stream")
