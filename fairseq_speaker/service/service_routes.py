"""What the service says of itself: ``GET /limits``, ``/health`` and ``/metrics`` (:func:`add_reads`); and its pages
(:func:`add_pages`): ``/`` to try it in a browser, ``/docs`` and ``/redoc`` to read its API."""

import importlib.resources

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles

from fairseq_speaker.service import schema
from fairseq_speaker.service.routing import served_models_of
from fairseq_speaker.service.served_models import ServedModels


def add_reads(router: APIRouter) -> None:
    """Add ``GET /limits``, ``/health`` and ``/metrics`` to ``router``."""

    @router.get("/limits", response_model=schema.ServiceLimits,
                summary="What one request may ask (a client, such as the page at /, splits its requests by it)")
    async def limits(served: ServedModels = Depends(served_models_of)):
        return served.get().limits_of_a_request()

    @router.get("/health", response_model=schema.Health,
                summary="200 when the models are loaded and the store answers")
    def health(request: Request, served: ServedModels = Depends(served_models_of)):
        return served.get().health(writes=request.app.state.token is not None, models=served.ids)

    @router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics of this process")
    def metrics(request: Request, served: ServedModels = Depends(served_models_of)):
        services = served.services
        text = request.app.state.metrics.render({s.model: s.counts() for s in services},
                                                {s.model: s.batcher.queued for s in services})
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")


def _static(name: str) -> bytes:
    return importlib.resources.files(__package__).joinpath("static", name).read_bytes()


#: where the API description pages' scripts and styles are served from (the fastapi-offline package's files)
DOCS_ASSETS = "/docs/static"


def add_pages(app: FastAPI) -> None:
    """``/`` (the page to try the service), ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) with their scripts and
    styles, and ``/favicon.ico``: all served by the service itself, nothing from the internet, so that they work where
    the service has none. Starlette routes: each answers HEAD too."""
    page = HTMLResponse(_static("index.html").decode("utf-8"))
    icon = Response(_static("favicon.png"), media_type="image/png", headers={"Cache-Control": "max-age=86400"})
    app.mount(DOCS_ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-static")

    def prefix(request: Request) -> str:  # behind a proxy that serves the service under a path (uvicorn's root_path)
        return request.scope.get("root_path", "").rstrip("/")

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = prefix(request)
        return get_swagger_ui_html(openapi_url=root + app.openapi_url, title=f"{app.title} - API",
                                   swagger_js_url=f"{root}{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/favicon.ico", oauth2_redirect_url=None)

    async def redoc(request: Request) -> HTMLResponse:
        root = prefix(request)
        html = get_redoc_html(openapi_url=root + app.openapi_url, title=f"{app.title} - API",
                              redoc_js_url=f"{root}{DOCS_ASSETS}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}/favicon.ico", with_google_fonts=False)
        # ReDoc shows its maker's logo from their CDN (and hides it when it does not load): not fetched at all
        html.headers["Content-Security-Policy"] = "img-src 'self' data:"
        return html

    app.add_route("/", lambda request: page, include_in_schema=False)
    app.add_route("/docs", swagger_ui, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)
    app.add_route("/favicon.ico", lambda request: icon, include_in_schema=False)
