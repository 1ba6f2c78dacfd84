"""A Django project in one module, served through Django's ASGI handler: async views, a
StreamingHttpResponse fed by an async iterator, a FileResponse, and a sync view."""

import asyncio
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
    )
    django.setup()

from django.http import FileResponse, HttpResponse, JsonResponse, StreamingHttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


async def hello(request):
    await asyncio.sleep(0)
    return JsonResponse({"framework": "django", "method": request.method, "q": request.GET.get("q")})


async def echo(request):
    return HttpResponse(request.body, content_type="application/octet-stream")


async def stream(request):
    async def parts():
        for i in range(5):
            await asyncio.sleep(0.01)
            yield f"chunk{i};".encode()

    return StreamingHttpResponse(parts(), content_type="text/plain")


def sync_view(request):
    return HttpResponse("sync ok")


async def file(request, name):
    return FileResponse(open(os.path.join(FILES, name), "rb"))


urlpatterns = [
    path("hello", hello),
    path("echo", echo),
    path("stream", stream),
    path("sync", sync_view),
    path("files/<str:name>", file),
]

from django.core.asgi import get_asgi_application  # noqa: E402

app = get_asgi_application()
