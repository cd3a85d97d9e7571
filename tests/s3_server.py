"""A local S3-compatible server (moto's server mode) for the object-storage tests, with its requests counted.

The server listens on 127.0.0.1 only, on a free port the system picks; the
clients get fake credentials and its address through the environment.  Every
request it answers is counted, with the bytes of its response body, so a test
asserts what a read cost on the wire.  Skips cleanly where moto or s3fs is
missing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest


@dataclass
class Logged:
    method: str
    path: str
    range: str | None
    nbytes: int


@dataclass
class S3Server:
    """The running server: its endpoint, and the requests it answered since :meth:`mark`."""

    endpoint: str
    log: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _mark: int = 0

    def mark(self) -> None:
        with self.lock:
            self._mark = len(self.log)

    def since_mark(self) -> list[Logged]:
        with self.lock:
            return list(self.log[self._mark:])


class CountingApp:
    """WSGI middleware: records each request and the bytes of the body it sends back."""

    def __init__(self, app, server: S3Server):
        self.app = app
        self.server = server

    def __call__(self, environ, start_response):
        body = b"".join(self.app(environ, start_response))
        with self.server.lock:
            self.server.log.append(Logged(environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                                          environ.get("HTTP_RANGE"), len(body)))
        return [body]


def start_server(threaded_moto_server) -> tuple:
    """Start moto's ``ThreadedMotoServer`` on 127.0.0.1 (a free port the system picks), every request counted;
    returns ``(server, S3Server)`` (``server.stop()`` ends it).  Used by the tests and benchmarks/bench_remote.py."""
    server = threaded_moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    running = S3Server(f"http://{host}:{port}")
    server._server.app = CountingApp(server._server.app, running)  # the WSGI app every request goes through
    return server, running


@pytest.fixture(scope="session")
def s3_endpoint():
    """Start moto's S3 server on 127.0.0.1 (a free port) for the session; yield the :class:`S3Server`."""
    pytest.importorskip("s3fs", reason="the remote extra (s3fs) is not installed")
    threaded = pytest.importorskip("moto.moto_server.threaded_moto_server",
                                   reason="moto[server] is not installed")
    server, running = start_server(threaded)
    try:
        yield running
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path_factory):
    """A fresh bucket on the local server, fake credentials and the endpoint in the environment; yields
    ``(server, "s3://bucket")``."""
    import uuid

    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path_factory.mktemp("aws") / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path_factory.mktemp("aws") / "none"))
    s3fs.S3FileSystem.clear_instance_cache()
    bucket = f"lodtool-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(endpoint_url=s3_endpoint.endpoint).mkdir(bucket)
    yield s3_endpoint, f"s3://{bucket}"
    s3fs.S3FileSystem.clear_instance_cache()
