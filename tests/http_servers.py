"""HTTP servers for the remote-scan tests: nginx from Debian's packages, serving
a folder with ``Range`` and ``ETag`` as production servers do (plain HTTP, and
HTTPS with a certificate made here), and a small misbehaving server for the
fail-closed cases. Both listen on 127.0.0.1 and live in a temporary folder."""
from __future__ import annotations

import http.server
import os
import pathlib
import re
import shutil
import socket
import subprocess
import threading
import time

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now (each socket held until all are chosen, so
    the system cannot hand the same one out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _wait_listening(port: int, process: subprocess.Popen | None = None, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def make_certificate(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, and its key."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return cert, key


class Nginx:
    """nginx serving ``root`` on ``url`` (HTTP) and ``tls_url`` (HTTPS, its
    certificate at ``cafile``); every request logged to ``access_log`` as
    ``METHOD URI "RANGE" STATUS BYTES "AUTHORIZATION"``."""

    def __init__(self, root: pathlib.Path, work: pathlib.Path):
        self.root, self.work = root, work
        work.mkdir(parents=True, exist_ok=True)
        self.cafile, self.key = make_certificate(work)
        self.access_log = work / "access.log"
        (work / "temp").mkdir(exist_ok=True)
        # A port chosen free may be taken before nginx binds it: another try, on others.
        for attempt in range(5):
            self.port, self.tls_port = free_ports(2)
            self.process = self._start()
            try:
                _wait_listening(self.port, self.process)
                _wait_listening(self.tls_port, self.process)
                break
            except RuntimeError as e:
                self.process.kill()
                self.process.wait()
                if attempt == 4:
                    log = work / "error.log"
                    raise RuntimeError(f"nginx did not start: {log.read_text() if log.exists() else ''}") from e
        self.url = f"http://127.0.0.1:{self.port}"
        self.tls_url = f"https://127.0.0.1:{self.tls_port}"

    def _start(self) -> subprocess.Popen:
        work, temp = self.work, self.work / "temp"
        config = work / "nginx.conf"
        config.write_text(f"""
daemon off;
user root;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 512; }}
http {{
    log_format ranges '$request_method $uri "$http_range" $status $body_bytes_sent "$http_authorization"';
    access_log {self.access_log} ranges;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{self.port};
        listen 127.0.0.1:{self.tls_port} ssl;
        ssl_certificate {self.cafile};
        ssl_certificate_key {self.key};
        root {self.root};
        # A folder's index as JSON: how a remote folder (a URL prefix) is listed.
        autoindex on;
        autoindex_format json;
    }}
}}
""")
        return subprocess.Popen([NGINX, "-c", str(config), "-p", str(work)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def requests(self) -> list[tuple[str, str, str, int, int, str]]:
        """The access log so far: (method, uri, range header, status, body
        bytes, authorization header; ``-`` for a header not sent)."""
        pattern = re.compile(r'(\S+) (\S+) "([^"]*)" (\d+) (\d+) "([^"]*)"')
        rows = []
        for line in self.access_log.read_text().splitlines():
            m = pattern.fullmatch(line)
            if m:
                rows.append((m[1], m[2], m[3], int(m[4]), int(m[5]), m[6]))
        return rows

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def publish_hub_repo(root: pathlib.Path, repo: str, folder: pathlib.Path, revision: str = "main",
                     kind: str = "models") -> str:
    """Lay ``folder`` out under ``root`` as the Hub serves a repository: the
    ``revision`` API naming its commit, the recursive ``tree`` listing at that
    commit, and each file under ``resolve/<commit>/``; the commit made up from
    the content. With ``HF_ENDPOINT`` at the server, ``hf://repo@revision`` is it."""
    import hashlib
    import json

    files = sorted(p for p in folder.rglob("*") if p.is_file())
    digest = hashlib.sha1()
    for p in files:
        digest.update(p.relative_to(folder).as_posix().encode() + b"\0" + p.read_bytes())
    commit = digest.hexdigest()
    prefix = "" if kind == "models" else f"{kind}/"
    api = root / "api" / kind / repo
    (api / "revision").mkdir(parents=True, exist_ok=True)
    (api / "revision" / revision).write_text(json.dumps({"id": repo, "sha": commit}))
    (api / "tree").mkdir(parents=True, exist_ok=True)
    listing = [{"type": "file", "path": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
                "oid": hashlib.sha1(p.read_bytes()).hexdigest()} for p in files]
    folders = sorted({q.as_posix() for p in files for q in p.relative_to(folder).parents if q.as_posix() != "."})
    listing += [{"type": "directory", "path": f, "size": 0, "oid": "0" * 40} for f in folders]
    (api / "tree" / commit).write_text(json.dumps(listing))
    resolved = root / f"{prefix}{repo}" / "resolve" / commit
    for p in files:
        target = resolved / p.relative_to(folder)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
    return commit


class Misbehaving:
    """A server that answers range requests for ``data`` the way ``mode`` says
    servers go wrong:

    - ``ignore-range``: 200 and the whole body, whatever was asked;
    - ``long-body``: the right ``Content-Range``, then the object to its end;
    - ``wrong-range``: 206 with a Content-Range other than the one asked for;
    - ``short-body``: 206 with the right Content-Range and fewer bytes;
    - ``changing``: another ETag (and other bytes) at every request;
    - ``redirect-loop``: 302 to itself by way of a second path;
    - ``stall``: sends nothing for ``stall`` seconds;
    - ``busy-once``: 429 with ``Retry-After: 0`` the first time each range is asked for, then right;
    - ``redirect-away``: 302 to the same server by another host name (``localhost``),
      recording the ``Authorization`` header each request brought;
    - ``right``: as a correct server.
    """

    def __init__(self, data: bytes, mode: str, stall: float = 5.0):
        self.data, self.mode, self.stall = data, mode, stall
        self.authorizations: list[tuple[str, str | None]] = []
        self.seen: set[str] = set()  # the ranges asked for so far
        self.count = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server.count += 1
                server.authorizations.append((self.headers.get("Host", ""), self.headers.get("Authorization")))
                server.answer(self)

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that gave up (a timeout case) breaks the pipe: expected

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/model.bin"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, h: http.server.BaseHTTPRequestHandler) -> None:
        mode, data = self.mode, self.data
        if mode == "redirect-loop":
            return self._send(h, 302, b"", {"Location": "/other" if h.path == "/model.bin" else "/model.bin"})
        if mode == "redirect-away" and h.headers.get("Host", "").startswith("127.0.0.1"):
            return self._send(h, 302, b"", {"Location": f"http://localhost:{self.port}{h.path}"})
        asked = f"{h.path} {h.headers.get('Range')}"
        if mode == "busy-once" and asked not in self.seen:
            self.seen.add(asked)
            return self._send(h, 429, b"", {"Retry-After": "0"})
        if mode == "stall":
            time.sleep(self.stall)
        etag = f'"v{self.count}"' if mode == "changing" else '"v1"'
        if mode == "changing":
            data = bytes([self.count % 256]) + data[1:]
        first, last = self._range(h.headers.get("Range", ""), len(data))
        if mode == "ignore-range" or first is None:
            return self._send(h, 200, data, {"ETag": etag})
        body = data[first:last + 1]
        content_range = f"bytes {first}-{last}/{len(data)}"
        if mode == "wrong-range":
            content_range = f"bytes {first + 1}-{last}/{len(data)}"
            body = body[1:]
        if mode == "long-body":
            # The Content-Range asked for, and the rest of the object after it.
            return self._send(h, 206, data[first:], {"ETag": etag, "Content-Range": content_range})
        if mode == "short-body":
            return self._send(h, 206, body[:-1], {"ETag": etag, "Content-Range": content_range},
                              length=len(body))
        self._send(h, 206, body, {"ETag": etag, "Content-Range": content_range})

    @staticmethod
    def _range(header: str, size: int) -> tuple[int | None, int]:
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", header)
        if m is None:
            return None, size - 1
        if m[1] == "":
            return max(size - int(m[2]), 0), size - 1
        return int(m[1]), min(int(m[2]) if m[2] else size - 1, size - 1)

    @staticmethod
    def _send(h: http.server.BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str],
              length: int | None = None) -> None:
        h.send_response(status)
        for name, value in headers.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(body) if length is None else length))
        h.end_headers()
        h.wfile.write(body)
        if length is not None and length != len(body):
            h.close_connection = True

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def has_nginx() -> bool:
    return os.path.exists(NGINX)
