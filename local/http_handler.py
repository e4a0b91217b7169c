"""The request handler base shared by the local API and the fakes of the outside services."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler


class AnyMethodHandler(BaseHTTPRequestHandler):
    """Sends every HTTP method to `_serve`, which decides (the resolver answers 404 for the rest)."""

    def _serve(self) -> None:
        raise NotImplementedError

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def do_PATCH(self) -> None:
        self._serve()
