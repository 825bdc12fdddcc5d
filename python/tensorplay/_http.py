"""Byte ranges of one object over HTTP(S), checked so that what a scan reads is
the object it names, or the scan says it could not read it.

Every response is held to the request: a range asked for must come back as
``206`` with the ``Content-Range`` asked for, of the object's size, with as many
bytes as it says; a server that answers ``200`` (ignoring ``Range``) is refused,
never read on as a download. The first response names the object (its ``ETag``,
else its ``Last-Modified``); every later one must name the same, and asks for it
with ``If-Match`` (or ``If-Unmodified-Since``), so an object replaced between
two reads is an error, not a mix of two files. Redirects are followed by hand:
to the same origin always, to another host only where the caller allows it,
and never with the ``Authorization`` header. Transient failures (a dropped
connection, a timeout, ``429``, ``502``-``504``) are retried a bounded number of
times, ``Retry-After`` honoured up to a cap. TLS certificates are verified
(``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` name other authorities).

Only the standard library: no buffered file object that reads ahead (fsspec's
read 5-50 MB blocks), no transparent decompression (``Accept-Encoding:
identity``: a range of a gzip'd body is not a range of the object).
"""
from __future__ import annotations

import http.client
import queue
import re
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime

from ._core import __version__

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

USER_AGENT = f"tensorplay/{__version__}"
# Statuses worth a retry: the server or a proxy on the way is busy or restarting.
TRANSIENT = frozenset({429, 502, 503, 504})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)\Z")
_UNSATISFIABLE_EMPTY = "bytes */0"
# An answer's headers: an HTTP message's, or an object store's answer named as HTTP names them.
Headers = http.client.HTTPMessage | Mapping[str, str]


# Validators a redirect may carry for the object it leads to.
CHAIN_HEADERS = ("X-Linked-Etag", "X-Linked-Size", "X-Repo-Commit")


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether ``allowed`` names ``host``: ``*``, the host, or ``.domain`` for
    every host under it."""
    host = host.lower()
    return any(a == "*" or a.lower() == host or (a.startswith(".") and host.endswith(a.lower())) for a in allowed)


class RemoteError(OSError):
    """An object that could not be read as asked: the reason says which request
    and what came back. A scan reports the file UNREADABLE with it."""


# A body no range asked for (a folder's index, the Hub's listing, an error page)
# is read up to this size; past it the answer is refused, not read on.
MAX_DOCUMENT = 256 << 20
MAX_ERROR_BODY = 64 << 10
_RANGE = re.compile(r"bytes=(\d*)-(\d*)\Z")


def _bounded_body(response: http.client.HTTPResponse, asked: str | None) -> tuple[bytes, bool]:
    """The answer's body, bounded by what was asked, and whether it was read to
    its end (else the connection is closed, not reused). A ``206`` longer than
    its range, or a document longer than ``MAX_DOCUMENT``, is refused; a ``200``
    to a range (the whole object: a server that ignores ``Range``) is not read
    at all; any other answer to a range (a redirect, an error page) is read up
    to ``MAX_ERROR_BODY``: a scan by ranges never becomes a download."""
    match = _RANGE.match(asked) if asked is not None else None
    if match is not None and response.status == 200:
        return b"", False
    if match is not None and response.status != 206:
        body = response.read(MAX_ERROR_BODY)
        return body, response.isclosed()
    most = MAX_DOCUMENT
    if match is not None:
        first, last = match.groups()
        most = int(last) if not first else int(last) - int(first) + 1 if last else MAX_DOCUMENT
    body = response.read(most + 1)
    if len(body) > most:
        raise RemoteError(f"asked for {asked or 'a document'} ({most} bytes at most), the server sent more")
    return body, response.isclosed()


class NotFound(RemoteError):
    """The server has no such object (404, 410): a missing file, as a local
    scan reports one."""


class Identity:
    """What names the bytes read: the object's size and the validators its
    server gave (``ETag``; the Hub's ``X-Linked-Etag``, a hash of the content;
    ``x-amz-version-id``; ``Last-Modified``, as an HTTP date), and the URL that
    served them. :meth:`from_headers` reads them from an HTTP answer; an object
    store gives them as values (see :mod:`tensorplay._objects`)."""

    __slots__ = ("url", "size", "etag", "linked_etag", "commit", "version_id", "last_modified", "allowed")

    def __init__(self, url: str, size: int, *, etag: str | None = None, linked_etag: str | None = None,
                 commit: str | None = None, version_id: str | None = None, last_modified: str | None = None,
                 allowed: Iterable[str] = ()):
        self.url = url
        self.size = size
        self.etag = etag
        self.linked_etag = linked_etag
        self.commit = commit
        self.version_id = version_id
        self.last_modified = last_modified
        # Hosts a later read may be redirected to, as the first read was allowed.
        self.allowed = tuple(allowed)

    @classmethod
    def from_headers(cls, url: str, size: int, headers: http.client.HTTPMessage, chain: dict[str, str],
                     allowed: Iterable[str] = ()) -> Identity:
        """The object an HTTP answer names; ``chain``: the validators its redirects gave."""
        return cls(url, size, etag=headers.get("ETag"),
                   linked_etag=chain.get("X-Linked-Etag") or headers.get("X-Linked-Etag"),
                   commit=chain.get("X-Repo-Commit") or headers.get("X-Repo-Commit"),
                   version_id=headers.get("x-amz-version-id"), last_modified=headers.get("Last-Modified"),
                   allowed=allowed)

    def preconditions(self) -> dict[str, str]:
        """Headers that make a server refuse (``412``) if the object changed."""
        if self.etag and not self.etag.startswith("W/"):
            return {"If-Match": self.etag}
        if self.last_modified:
            return {"If-Unmodified-Since": self.last_modified}
        return {}

    def same_object(self, headers: Headers) -> str | None:
        """Why ``headers`` may name another object than this one, or None."""
        for name, mine in (("ETag", self.etag), ("Last-Modified", self.last_modified),
                           ("x-amz-version-id", self.version_id)):
            theirs = headers.get(name)
            if mine is not None and theirs is not None and theirs != mine:
                return f"the object changed between two reads ({name} {mine} then {theirs})"
        return None

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if name != "allowed"}


class Client:
    """Connections kept alive per origin, shared by threads; every request as the
    module's documentation says. ``allowed_hosts``: other hosts a redirect may
    lead to (``"*"`` for any, ``".example.com"`` for the hosts under it);
    ``credentials``: headers (``Authorization``) by the host they are for, sent
    to that host alone, wherever a redirect leads; ``concurrency``: requests of a
    wave in flight at once, across every scan the client serves."""

    def __init__(self, *, timeout: float = 30.0, retries: int = 3, backoff: float = 0.5,
                 max_retry_after: float = 30.0, allowed_hosts: Iterable[str] = (),
                 credentials: dict[str, dict[str, str]] | None = None, context: ssl.SSLContext | None = None,
                 concurrency: int = 16):
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_retry_after = max_retry_after
        self.allowed_hosts = frozenset(allowed_hosts)
        self.credentials = {host.lower(): dict(h) for host, h in (credentials or {}).items()}
        self.concurrency = concurrency
        self._threads: ThreadPoolExecutor | None = None
        self.context = context or ssl.create_default_context()
        self._idle: dict[tuple[str, str, int], queue.SimpleQueue[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()
        # What was asked of servers: a scan's cost, for reports and benchmarks.
        self.requests = 0
        self.bytes_read = 0

    # --- connections ---------------------------------------------------------------------

    def _origin(self, url: str) -> tuple[str, str, int]:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteError(f"{url}: not an http or https URL")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as e:
            raise RemoteError(f"{url}: {e}") from None
        return parts.scheme, parts.hostname, port

    def _connection(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.setdefault(origin, queue.SimpleQueue())
        try:
            return idle.get_nowait()
        except queue.Empty:
            scheme, host, port = origin
            if scheme == "https":
                return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=self.context)
            return http.client.HTTPConnection(host, port, timeout=self.timeout)

    def _release(self, origin: tuple[str, str, int], connection: http.client.HTTPConnection) -> None:
        self._idle[origin].put(connection)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
            threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown()
        for connections in idle.values():
            while not connections.empty():
                connections.get_nowait().close()

    # --- one request -----------------------------------------------------------------

    def _once(self, url: str, headers: dict[str, str]) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One GET on a kept-alive connection (a fresh one if the kept one was
        closed by the server meanwhile): status, headers and the whole body."""
        origin = self._origin(url)
        parts = urllib.parse.urlsplit(url)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        for attempt in (0, 1):
            connection = self._connection(origin)
            try:
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                body, whole = _bounded_body(response, headers.get("Range"))
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                connection.close()
                if attempt:
                    raise
                continue
            except BaseException:
                connection.close()
                raise
            with self._lock:
                self.requests += 1
                self.bytes_read += len(body)
            if response.will_close or not whole:
                connection.close()
            else:
                self._release(origin, connection)
            return response.status, response.headers, body
        raise AssertionError("unreachable")

    def get(self, url: str, headers: dict[str, str], also_allowed: Iterable[str] = (),
            ) -> tuple[str, int, http.client.HTTPMessage, bytes, dict[str, str]]:
        """GET with retries and redirects: the URL that answered, its answer, and
        the validators the redirects on the way gave (the Hub names a file's
        content by ``X-Linked-Etag`` on its redirect to the CDN)."""
        start_host = self._origin(url)[1]
        allowed = self.allowed_hosts | frozenset(also_allowed)
        seen, chain = {url}, {}
        for _ in range(MAX_REDIRECTS + 1):
            status, response_headers, body = self._retrying(url, self._headers_for(url, headers))
            if status not in REDIRECTS:
                return url, status, response_headers, body, chain
            for name in CHAIN_HEADERS:
                if name in response_headers and name not in chain:
                    chain[name] = response_headers[name]
            location = response_headers.get("Location")
            if not location:
                raise RemoteError(f"{url}: a {status} redirect without a Location")
            target = urllib.parse.urljoin(url, location)
            if target in seen:
                raise RemoteError(f"{url}: a redirect loop (back to {target})")
            seen.add(target)
            host = self._origin(target)[1]
            if host != start_host and not host_allowed(host, allowed):
                raise RemoteError(f"{url}: redirected to another host, {host}, which was not allowed "
                                  "(allow it to follow: --redirect-host)")
            url = target
        raise RemoteError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _headers_for(self, url: str, headers: dict[str, str]) -> dict[str, str]:
        """The request's headers, with the credentials for the URL's host alone."""
        own = self.credentials.get(self._origin(url)[1].lower(), {})
        return {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **own, **headers}

    def _retrying(self, url: str, headers: dict[str, str]) -> tuple[int, http.client.HTTPMessage, bytes]:
        delay = self.backoff
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                status, response_headers, body = self._once(url, headers)
            except ssl.SSLCertVerificationError as e:
                raise RemoteError(f"{url}: {e.verify_message or e} (the certificate is not trusted: "
                                  "SSL_CERT_FILE names other authorities)") from None
            except (OSError, http.client.HTTPException) as e:
                if last:
                    raise RemoteError(f"{url}: {type(e).__name__}: {e or 'no answer'} "
                                      f"(after {attempt + 1} attempts)") from None
                time.sleep(delay)
                delay *= 2
                continue
            if status not in TRANSIENT or last:
                return status, response_headers, body
            time.sleep(self._retry_after(response_headers, delay))
            delay *= 2
        raise AssertionError("unreachable")

    def _retry_after(self, headers: http.client.HTTPMessage, default: float) -> float:
        value = headers.get("Retry-After")
        if value is None:
            return default
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = parsedate_to_datetime(value).timestamp() - time.time()
            except (TypeError, ValueError):
                return default
        return min(max(seconds, 0.0), self.max_retry_after)

    # --- objects ---------------------------------------------------------------------------

    def open(self, url: str, tail: int, head: int, also_allowed: Iterable[str] = (),
             ) -> tuple[Identity, list[tuple[int, bytes]]]:
        """The object's identity, its last ``tail`` bytes and its first ``head``
        bytes (fewer of a smaller object; ``(offset, bytes)`` each), in one round trip: the first request
        asks for the tail (its answer gives the size), the second, sent at once,
        for the head; both must name the same object."""
        head_answer = self._pool().submit(self.get, url, {"Range": f"bytes=0-{head - 1}"}, also_allowed)
        final_url, status, headers, body, chain = self.get(url, {"Range": f"bytes=-{tail}"}, also_allowed)
        head_reply = head_answer.result()
        # An empty object has no range to give: 416 with its size, or the
        # (empty) whole, which is no download.
        empty = status == 416 and headers.get("Content-Range") == _UNSATISFIABLE_EMPTY
        if empty or (status == 200 and not body and headers.get("Content-Length") == "0"):
            return Identity.from_headers(final_url, 0, headers, chain, also_allowed), []
        size, start = self._checked(url, status, headers, body, None, tail)
        identity = Identity.from_headers(final_url, size, headers, chain, also_allowed)
        _, head_status, head_headers, head_body, _ = head_reply
        self._checked(url, head_status, head_headers, head_body, (0, min(head, size)), None, identity)
        return identity, [(start, body), (0, head_body)]

    def read(self, identity: Identity, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)`` of the object, asked for at
        once (one round trip), each checked."""
        def one(offset: int, length: int) -> bytes:
            headers = {"Range": f"bytes={offset}-{offset + length - 1}", **identity.preconditions()}
            _, status, answer_headers, body, _ = self.get(identity.url, headers, identity.allowed)
            self._checked(identity.url, status, answer_headers, body, (offset, length), None, identity)
            return body

        # All but the first sent from the shared pool, the first from this thread.
        later = [self._pool().submit(one, *r) for r in ranges[1:]]
        return [one(*ranges[0]), *(answer.result() for answer in later)]

    def _pool(self) -> ThreadPoolExecutor:
        """The threads that send a wave's requests at once, shared by every scan
        this client serves (made on first use)."""
        with self._lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="tensorplay-http")
            return self._threads

    def _checked(self, url: str, status: int, headers: http.client.HTTPMessage, body: bytes,
                 asked: tuple[int, int] | None, suffix: int | None, identity: Identity | None = None,
                 ) -> tuple[int, int]:
        """The size and start of a range answer that is what was asked (a range
        ``asked``, or the last ``suffix`` bytes), or RemoteError saying how not."""
        what = _asked(asked, suffix)
        if status == 200:
            raise RemoteError(f"{url}: asked for {what}, the server sent the whole object (200): "
                              "it ignores Range, and a scan by ranges does not download")
        if status == 412:
            raise RemoteError(f"{url}: the object changed between two reads (412 Precondition Failed)")
        if status != 206:
            reason = headers.get("X-Error-Message") or ""
            error = NotFound if status in (404, 410) else RemoteError
            raise error(f"{url}: HTTP {status} for {what}{': ' + reason if reason else ''}")
        if headers.get_content_maintype() == "multipart":
            raise RemoteError(f"{url}: asked for {what}, the answer's Content-Range is "
                              f"{headers.get('Content-Range', '')!r}")
        return checked_range(url, headers, body, asked, suffix, identity)


def _asked(asked: tuple[int, int] | None, suffix: int | None) -> str:
    return f"bytes {asked[0]}-{asked[0] + asked[1] - 1}" if asked else f"the last {suffix} bytes"


def checked_range(url: str, headers: Headers, body: bytes, asked: tuple[int, int] | None, suffix: int | None,
                  identity: Identity | None = None) -> tuple[int, int]:
    """The size and start of a range answer (its ``Content-Range`` and
    validators in ``headers``, as HTTP names them, and its ``body``) that is
    what was asked (a range ``asked``, or the last ``suffix`` bytes) of the
    object ``identity`` names, or RemoteError saying how not. An object store's
    answer (see :mod:`tensorplay._objects`) is held to it as a server's is."""
    what = _asked(asked, suffix)
    if identity is not None and (changed := identity.same_object(headers)) is not None:
        raise RemoteError(f"{url}: {changed}")
    content_range = headers.get("Content-Range") or ""
    match = _CONTENT_RANGE.match(content_range)
    if match is None:
        raise RemoteError(f"{url}: asked for {what}, the answer's Content-Range is {content_range!r}")
    first, last, size = map(int, match.groups())
    if identity is not None and size != identity.size:
        raise RemoteError(f"{url}: the object's size changed between two reads ({identity.size} then {size})")
    if asked is not None:
        expected = (asked[0], min(asked[0] + asked[1], size) - 1)
    else:
        expected = (max(size - (suffix or 0), 0), size - 1)
    if (first, last) != expected:
        raise RemoteError(f"{url}: asked for {what}, the server sent bytes {first}-{last}")
    if len(body) != last - first + 1:
        raise RemoteError(f"{url}: bytes {first}-{last} came as {len(body)} bytes (a short or long body)")
    return size, first
