"""Byte ranges of one object in an fsspec file system (``s3://``, ``gs://``,
``az://``...), held to what was asked as :mod:`tensorplay._http` holds a
server's answers: what a scan reads is the object it names, or the scan says
it could not read it.

Explicit range reads only, never ``fs.open()``: fsspec's buffered files read
ahead 5-50 MB blocks, and a scan by ranges must not become a download.
``fs.info()`` names the object (its size, ETag, version id and modification
time: its :class:`~tensorplay._http.Identity`); each wave's ranges go
together, one round trip.

- On S3 (s3fs), the first round trip asks ``info()`` and the first ranges at
  once (the last bytes by a suffix range, which needs no size). Every later
  range is a ``GetObject`` pinned to the object's version id when the bucket
  gives one (versioning on: an overwrite leaves that version, and it is what
  is read), else conditional on its ETag (``IfMatch``: S3 refuses with 412
  once the object was replaced). Each answer's ``Content-Range``, ETag,
  version id and length must be what was asked, of that object
  (:func:`tensorplay._http.checked_range`).
- On the other file systems (gcsfs, adlfs: untested here), ``info()`` comes
  first (fsspec's generic ranges need the size), ``cat_ranges`` reads a wave,
  each answer must be as long as its range, and ``info()`` is asked again
  after it: a changed ETag, version, modification time or size is an error,
  and an object whose info names none of the three is refused, since its
  replacement could not be seen (a modification time alone sees it to the
  second). So the first wave takes three requests one after the other, and
  each later one a request more.

A missing object, a folder, a short or long answer, a timeout (the file
system's own, with its retries: s3fs's are 5 s to connect, 15 s to read, 5
attempts) or any other failure of the store is a RemoteError: the file is
UNREADABLE, never CLEAN.

A scan session makes one file system per scheme (:class:`Store`, by
``fsspec.core.url_to_fs`` outside fsspec's cache of instances), reused for
every file, with no options but those the environment gives, as the file
system reads it. For S3 that is botocore's: ``AWS_ENDPOINT_URL`` (an
S3-compatible store), ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, ``AWS_REGION``...; and fsspec's,
read when it is imported: ``FSSPEC_S3`` (a JSON object of s3fs options,
``{"anon": true}``). fsspec and its file systems are optional (:data:`INSTALL`).
"""
from __future__ import annotations

import asyncio
import datetime
import email.utils

from ._http import Identity, NotFound, RemoteError, checked_range

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

INSTALL = ("pip install 'tensorplay-serialization[s3]' (fsspec and s3fs; gcsfs for gs://, "
           "adlfs for az:// and abfs://)")

# Where the file systems' info() keeps each validator: s3fs, gcsfs, adlfs,
# fsspec's local and memory ones. The first present is the object's.
_ETAG = ("ETag", "etag")
_VERSION = ("VersionId", "version_id", "generation")
_MODIFIED = ("LastModified", "last_modified", "updated", "mtime", "created")


class Store:
    """The objects of one fsspec file system (``fs``): a
    :class:`tensorplay._remote.Reader` of their ranges, and :meth:`list` of a
    folder's objects."""

    def __init__(self, fs: Any):
        self.fs = fs
        self._s3 = callable(getattr(fs, "_call_s3", None))

    @classmethod
    def for_url(cls, url: str) -> Store:
        """A store of a new file system of ``url``'s scheme, configured by the
        environment alone."""
        try:
            import fsspec.core
        except ImportError:
            raise RemoteError(f"{url}: reading this URL needs fsspec: {INSTALL}") from None
        try:
            fs, _ = fsspec.core.url_to_fs(url, skip_instance_cache=True)
        except ImportError as e:
            raise RemoteError(f"{url}: {e}: {INSTALL}") from None
        except Exception as e:
            raise _failed(url, e) from None
        return cls(fs)

    # --- the Reader protocol ------------------------------------------------------------

    def open(self, url: str, tail: int, head: int, also_allowed: Iterable[str] = (),
             ) -> tuple[Identity, list[tuple[int, bytes]]]:
        """The object's identity, its last ``tail`` and first ``head`` bytes
        (fewer of a smaller object, none of an empty one). ``also_allowed``
        is for redirects, which a file system does not give."""
        path = self.fs._strip_protocol(url)
        try:
            if self._s3:
                return self._sync(self._s3_open, url, path, tail, head)
            identity = self._identity(url, path)
            size = identity.size
            if size == 0:
                return identity, []
            starts = [max(size - tail, 0), 0]
            bodies = self._cat(identity, path, [(starts[0], size - starts[0]), (0, min(head, size))])
            return identity, list(zip(starts, bodies))
        except Exception as e:
            raise _failed(url, e) from None

    def read(self, identity: Identity, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)`` of the object, asked at once,
        each checked."""
        path = self.fs._strip_protocol(identity.url)
        try:
            if self._s3:
                return self._sync(self._s3_read, identity, path, ranges)
            return self._cat(identity, path, ranges)
        except Exception as e:
            raise _failed(identity.url, e) from None

    # --- listing ------------------------------------------------------------------------

    def list(self, url: str) -> list[tuple[str, str, int | None]]:
        """Every object under the folder ``url`` names (``s3://bucket/prefix/``;
        its trailing slash may be left out), at any depth: ``(relative name,
        object URL, size)``, sorted by relative name; ``[]`` for a folder that
        holds none (a prefix no key starts with). A relative name is the rest
        of the object's key, as stored: not a path (``..``, empty parts and any
        character may be in it), so never joined to a local folder."""
        prefix = self.fs._strip_protocol(url).rstrip("/") + "/"
        try:
            # A listing read before (or an info of one of its objects) must not answer for it.
            self.fs.invalidate_cache(prefix)
            found = self.fs.find(prefix, detail=True)
        except Exception as e:
            raise _failed(url, e) from None
        rows = []
        for name, info in found.items():
            relative = name[len(prefix):] if name.startswith(prefix) else ""
            if relative and not relative.endswith("/") and info.get("type") == "file":
                rows.append((relative, self.fs.unstrip_protocol(name), info.get("size")))
        return sorted(rows)

    # --- every file system ----------------------------------------------------------------

    def _identity(self, url: str, path: str) -> Identity:
        """The object ``path`` names, from a fresh ``info()``."""
        self.fs.invalidate_cache(path)
        return _identity_of(url, self.fs.info(path))

    def _cat(self, identity: Identity, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The ranges by ``cat_ranges`` (concurrent on an async file system), each
        as long as asked, of an object whose ``info()`` after them names it still."""
        if not (identity.etag or identity.version_id or identity.last_modified):
            raise RemoteError(f"{identity.url}: the store names no ETag, version or modification time of the "
                              "object: a change between two reads could not be seen")
        try:
            bodies = self.fs.cat_ranges([path] * len(ranges), [offset for offset, _ in ranges],
                                        [offset + length for offset, length in ranges], on_error="raise")
        except Exception:
            # A range past the end of a shorter object put meanwhile fails:
            # the change, when it is one, is the reason to give.
            self._unchanged(identity, path)
            raise
        self._unchanged(identity, path)
        for (offset, length), body in zip(ranges, bodies):
            if len(body) != length:
                raise RemoteError(f"{identity.url}: bytes {offset}-{offset + length - 1} came as {len(body)} bytes "
                                  "(a short or long answer)")
        return bodies

    def _unchanged(self, identity: Identity, path: str) -> None:
        """RemoteError unless a fresh ``info()`` names the object ``identity`` names."""
        now = self._identity(identity.url, path)
        for name in ("size", "etag", "version_id", "last_modified"):
            if (mine := getattr(identity, name)) != (theirs := getattr(now, name)):
                raise RemoteError(f"{identity.url}: the object changed between two reads ({name} {mine} then "
                                  f"{theirs})")

    # --- S3 ---------------------------------------------------------------------------------

    def _sync(self, run: Any, *args: Any) -> Any:
        """``run(*args)``, a coroutine, on the file system's event loop."""
        from fsspec.asyn import sync

        return sync(self.fs.loop, run, *args)

    async def _s3_open(self, url: str, path: str, tail: int, head: int,
                       ) -> tuple[Identity, list[tuple[int, bytes]]]:
        # The object is not known yet, so the ranges are not pinned: each
        # answer's ETag and version, checked against the info's, pin them.
        info, tail_answer, head_answer = await asyncio.gather(
            self.fs._info(path, refresh=True), self._s3_get(path, f"bytes=-{tail}", None),
            self._s3_get(path, f"bytes=0-{head - 1}", None), return_exceptions=True)
        if isinstance(info, BaseException):
            raise info
        identity = _identity_of(url, info)
        if identity.size == 0:
            # S3 has no range of an empty object to give (416): nothing to read.
            return identity, []
        held = []
        for answer, asked, suffix in ((tail_answer, None, tail), (head_answer, (0, min(head, identity.size)), None)):
            if isinstance(answer, BaseException):
                raise answer
            headers, body = answer
            _, start = checked_range(url, headers, body, asked, suffix, identity)
            held.append((start, body))
        return identity, held

    async def _s3_read(self, identity: Identity, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        answers = await asyncio.gather(*(self._s3_get(path, f"bytes={offset}-{offset + length - 1}", identity)
                                         for offset, length in ranges))
        for (offset, length), (headers, body) in zip(ranges, answers):
            checked_range(identity.url, headers, body, (offset, length), None, identity)
        return [body for _, body in answers]

    async def _s3_get(self, path: str, byte_range: str, identity: Identity | None) -> tuple[dict[str, str], bytes]:
        """One ``GetObject`` of ``byte_range``, of the version ``identity``
        names, else only while its ETag is the same: the answer's headers as
        HTTP names them, and its body."""
        bucket, key, _ = self.fs.split_path(path)
        pinned: dict[str, str] = {}
        if identity is not None:
            # "null" is the version of a bucket without versioning, which an
            # overwrite replaces in place: it pins nothing.
            if identity.version_id and identity.version_id != "null":
                pinned["VersionId"] = identity.version_id
            elif identity.etag:
                pinned["IfMatch"] = identity.etag
            else:
                raise RemoteError(f"{identity.url}: S3 named no version or ETag of the object, which a later "
                                  "read could be held to")
        answer = await self.fs._call_s3("get_object", Bucket=bucket, Key=key, Range=byte_range, **pinned)
        try:
            body = await answer["Body"].read()
        finally:
            answer["Body"].close()
        headers = {"Content-Range": answer.get("ContentRange"), "ETag": answer.get("ETag"),
                   "x-amz-version-id": answer.get("VersionId"),
                   "Last-Modified": _http_date(answer.get("LastModified"))}
        return {name: value for name, value in headers.items() if value is not None}, body


def _identity_of(url: str, info: dict[str, Any]) -> Identity:
    """The object a file system's ``info()`` names, or RemoteError for a folder."""
    if info.get("type") != "file":
        raise RemoteError(f"{url}: names a folder ({info.get('type')}), not an object")
    size = info.get("size")
    if not isinstance(size, int) or size < 0:
        raise RemoteError(f"{url}: the store gives no size of the object ({size!r})")

    def first(names: tuple[str, ...]) -> Any:
        return next((info[name] for name in names if info.get(name) not in (None, "")), None)

    etag, version = first(_ETAG), first(_VERSION)
    return Identity(url, size, etag=None if etag is None else str(etag),
                    version_id=None if version is None else str(version), last_modified=_http_date(first(_MODIFIED)))


def _http_date(value: Any) -> str | None:
    """A modification time as HTTP dates it (``Last-Modified``, to the second),
    from the ``datetime``, POSIX time or text a file system gives."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        value = datetime.datetime.fromtimestamp(value, datetime.UTC)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return email.utils.format_datetime(value.astimezone(datetime.UTC), usegmt=True)
    return str(value)


def _failed(url: str, e: BaseException) -> RemoteError:
    """What a file system's failure says of the object, as a RemoteError."""
    if isinstance(e, RemoteError):
        return e
    code = getattr(e.__cause__, "response", {}).get("Error", {}).get("Code")
    if code == "PreconditionFailed":
        return RemoteError(f"{url}: the object changed between two reads (412 Precondition Failed)")
    if isinstance(e, FileNotFoundError):
        return NotFound(f"{url}: no such object ({e})")
    return RemoteError(f"{url}: {type(e).__name__}: {e or 'no answer'}")
