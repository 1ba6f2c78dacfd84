"""A Django project in one module served as WSGI (--interface wsgi): sync views, a
multipart upload into request.FILES, a StreamingHttpResponse fed by a generator and a
FileResponse (wsgi.file_wrapper)."""

import hashlib
import os

import django
from django.conf import settings

FILES = os.environ.get("ZIGCORN_TEST_FILES", os.path.dirname(__file__))

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="tests-only",
        ALLOWED_HOSTS=["*"],
        ROOT_URLCONF=__name__,
        MIDDLEWARE=[],
        INSTALLED_APPS=[],
        FILE_UPLOAD_MAX_MEMORY_SIZE=1 << 20,
    )
    django.setup()

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import FileResponse, JsonResponse, StreamingHttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402


def hello(request):
    return JsonResponse({"framework": "django", "method": request.method, "q": request.GET.get("q"),
                         "script_name": request.META["SCRIPT_NAME"], "path": request.path})


@csrf_exempt
def upload(request):
    f = request.FILES["file"]
    data = f.read()
    return JsonResponse({"name": f.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                         "field": request.POST["note"]})


def stream(request):
    return StreamingHttpResponse((f"chunk{i};".encode() for i in range(5)), content_type="text/plain")


def file(request):
    return FileResponse(open(os.path.join(FILES, "data.bin"), "rb"), content_type="application/octet-stream")


urlpatterns = [
    path("hello", hello),
    path("upload", upload),
    path("stream", stream),
    path("file", file),
]

app = get_wsgi_application()
