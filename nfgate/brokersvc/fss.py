"""``fss.service.broker``: files under one configured root, named by ``nf://`` URLs.

Tasks mirror NorFab's FileSharing worker (``norfab/workers/filesharing_worker``):

- ``list_files(url)``: names in a directory, sorted (NorFab: ``os.listdir``).
- ``file_details(url)``: ``{"md5hash", "size_bytes", "exists"}`` as NorFab, plus
  ``"sha256hash"`` and ``"modified"`` (mtime, Unix seconds). ``url`` may be a list:
  then a dict keyed by URL, a missing or refused file being
  ``{"md5hash": null, "size_bytes": null, "exists": false, "error": "..."}``.
- ``walk(url)``: ``nf://`` URLs of the regular files below, sorted, without dot-files
  and without dot- or ``__dunder__`` directories (NorFab skips ``__norfab__``-like paths).
- ``fetch_file(url, offset=0, chunk_size=256000)``: one chunk as
  ``{"url", "offset", "length", "size", "eof", "encoding": "base64", "data"}``. NorFab
  streams the whole file with STREAM messages and client PUTs; a request/reply service
  cannot, so the client asks again with ``offset + length`` until ``eof``. Chunks are
  capped at :data:`MAX_CHUNK` bytes (a larger ``chunk_size`` is cut down, not refused;
  ``length`` says what was sent).

Refused with 400 and the reason: anything but ``nf://``, NUL bytes, absolute paths
(``nf:///etc/passwd``, ``nf://C:/x``), ``..`` components, paths that resolve outside
the root through a symlink, paths longer than :data:`MAX_PATH` characters or with a
component over :data:`MAX_NAME`, and non-regular files (a FIFO would block the broker).
NorFab strips leading slashes instead; refusing says plainly that the URL was wrong.
Missing: 404. Other OS errors (permissions): 500.

Only the filesystem is touched, and only below the root. A path is checked once
resolved, then opened one component at a time from the root without following a
symlink (:func:`_open_beneath`), so a directory swapped for a symlink between the check
and the open is refused, not followed out of the root. Everything runs on the gateway's
loop, so every task is bounded: the path's length (resolving a path costs time in the
square of its components), the entries listed, the bytes read per chunk, and the bytes
``file_details`` hashes for one request (:data:`MAX_HASHED`; a file past what is left
of it is answered with ``"md5hash": null`` and the reason). A URL listed twice is
hashed once and a file's digests are kept (:data:`MAX_DIGESTS` files) while its inode,
size and mtime stay the same.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import io
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from nfgate.brokersvc import RequestError, param, unsupported
from nfgate.errors import ConfigError
from nfgate.model import Status

__all__ = ["DEFAULT_CHUNK", "MAX_CHUNK", "MAX_ENTRIES", "FileRoot", "handle"]

DEFAULT_CHUNK: Final = 256_000  # NorFab's default chunk_size
MAX_CHUNK: Final = 1024 * 1024  # one reply stays well under the transports' message limit
MAX_ENTRIES: Final = 10_000  # list_files/walk/file_details answers are bounded too
MAX_DIGESTS: Final = 4096  # files whose digests are remembered (by inode, size, mtime)
# Bytes one file_details request may hash: md5 and sha256 together read about 600 MB/s
# here, so this holds the loop (every other peer) for a few tenths of a second at most.
MAX_HASHED: Final = 256 * 1024 * 1024
# Linux's PATH_MAX and NAME_MAX. os.path.realpath takes time in the square of a path's
# components: a URL of 400,000 "a/" held the loop for 10 s before this bound.
MAX_PATH: Final = 4096
MAX_NAME: Final = 255
# The URL characters one file_details list may hold: realpath stats each component
# (about 2 us), so 10,000 URLs of 2,000 "a/" each held the loop for a minute.
MAX_LISTED: Final = 256 * 1024

_DIGESTS: dict[tuple[int, int, int, int], tuple[str, str]] = {}

_SCHEME: Final = "nf://"
_DRIVE: Final = re.compile(r"[A-Za-z]:")
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_OPEN_FLAGS: Final = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _NOFOLLOW
_DIR_FLAGS: Final = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW


def _root_dir(value: str | os.PathLike[str]) -> Path:
    real = os.path.realpath(value)
    if not os.path.isdir(real):
        reason = "does not exist" if not os.path.exists(real) else "is not a directory"
        raise ConfigError(f"{os.fspath(value)}: files_root {reason}")
    return Path(real)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON's "\ud800"): no file has that name
        return False
    return True


# Positional, unlike the house's kw_only classes: FileRoot(path) reads as what it is.
@attrs.frozen
class FileRoot:
    """The directory ``fss.service.broker`` serves; ``path`` is stored resolved
    (realpath), so symlinks in the root's own path do not count as leaving it.

    Raises:
        ConfigError: the directory does not exist or is not a directory.
    """

    path: Path = attrs.field(converter=_root_dir)

    def resolve(self, url: object) -> str:
        """The real path ``url`` names under the root (which may not exist yet).

        Raises:
            RequestError: 400 with the reason, for every refusal listed in the module
                docstring except "non-regular file", which is checked on open.
        """
        if not isinstance(url, str):
            raise RequestError(Status.UNKNOWN, f"url must be a string, not {type(url).__name__}")
        if "\x00" in url:
            raise RequestError(Status.UNKNOWN, f"{url!r}: NUL byte in URL")
        if not url.isascii() and not _is_text(url):
            raise RequestError(Status.UNKNOWN, f"{url!r}: not UTF-8 text (a lone surrogate)")
        if not url.startswith(_SCHEME):
            raise RequestError(Status.UNKNOWN, f"{url!r}: not an nf:// URL")
        # Backslashes are separators to Windows clients; treat them so everywhere, so
        # that nf://..\secret cannot slip past the ".." check below.
        rel = url[len(_SCHEME) :].replace("\\", "/")
        if rel.startswith("/") or _DRIVE.match(rel):
            raise RequestError(
                Status.UNKNOWN, f"{url!r}: absolute path; nf:// paths are relative to the files root"
            )
        parts = rel.split("/")
        if ".." in parts:
            raise RequestError(Status.UNKNOWN, f"{url!r}: '..' path components are not allowed")
        if len(rel) > MAX_PATH or any(len(p.encode("utf-8", "surrogatepass")) > MAX_NAME for p in parts):
            raise RequestError(
                Status.UNKNOWN,
                f"{url[:200]!r}: path too long (at most {MAX_PATH} characters, {MAX_NAME} bytes a name)",
            )
        root = str(self.path)
        try:
            real = os.path.realpath(os.path.join(root, *(p for p in parts if p not in ("", "."))))
        except OSError as exc:  # the tree changed under realpath (a directory removed mid-way)
            raise RequestError(Status.UNKNOWN, f"{url!r}: cannot resolve: {exc.strerror}") from None
        if os.path.commonpath([root, real]) != root:
            raise RequestError(Status.UNKNOWN, f"{url!r}: resolves outside the files root (symlink)")
        return real

    def url_of(self, real: str) -> str:
        """The ``nf://`` URL of ``real``, a resolved path under the root."""
        rel = os.path.relpath(real, self.path)
        return _SCHEME if rel == "." else _SCHEME + rel.replace(os.sep, "/")


def handle(task: str, kwargs: Mapping[str, Any], args: Sequence[Any], root: FileRoot) -> tuple[int, Any]:
    """Answer a ``fss.service.broker`` request; ``url`` is a kwarg or the first
    positional argument. Unknown task: 200 ``"Unsupported task '<task>'"`` (NorFab);
    refusals and bad arguments: 400; missing files: 404; never raises for a request."""
    run = _TASKS.get(task)
    if run is None:
        return unsupported(task)
    try:
        return run(task, kwargs, args, root)
    except RequestError as exc:
        return exc.status, exc.message


# ------------------------------------------------------------------------ tasks


def _list_files(task: str, kwargs: Mapping[str, Any], args: Sequence[Any], root: FileRoot) -> tuple[int, Any]:
    url = param(task, kwargs, args, "url", str, position=0)
    names: list[str] = []
    with _directory(root, url) as (_, fd):
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if len(names) > MAX_ENTRIES:
                        raise RequestError(Status.UNKNOWN, f"'{url}': more than {MAX_ENTRIES} entries")
        except OSError as exc:
            raise _os_error(url, exc) from None
    return Status.OK, sorted(names)


def _file_details(
    task: str, kwargs: Mapping[str, Any], args: Sequence[Any], root: FileRoot
) -> tuple[int, Any]:
    url = param(task, kwargs, args, "url", (str, list), position=0)
    if isinstance(url, str):
        return Status.OK, _details(root, url, _Budget())
    if len(url) > MAX_ENTRIES:
        raise RequestError(Status.UNKNOWN, f"{task}: more than {MAX_ENTRIES} URLs")
    if not all(isinstance(item, str) for item in url):
        raise RequestError(Status.UNKNOWN, f"{task}: 'url' must be a string or a list of strings")
    if sum(map(len, url)) > MAX_LISTED:
        raise RequestError(Status.UNKNOWN, f"{task}: URLs of more than {MAX_LISTED} characters in all")
    out: dict[str, Any] = {}
    budget = _Budget()
    for item in dict.fromkeys(url):  # a URL listed twice is hashed once
        try:
            out[item] = _details(root, item, budget)
        except RequestError as exc:
            # NorFab's per-URL failure, flattened: the client reads "exists".
            out[item] = {"md5hash": None, "size_bytes": None, "exists": False, "error": exc.message}
    return Status.OK, out


def _walk(task: str, kwargs: Mapping[str, Any], args: Sequence[Any], root: FileRoot) -> tuple[int, Any]:
    url = param(task, kwargs, args, "url", str, position=0)
    found: list[str] = []
    with _directory(root, url) as (top, fd):
        # os.fwalk from the descriptor opened beneath the root, not following symlinks:
        # a symlinked directory is not entered, and a directory swapped for a symlink
        # mid-walk is not followed (fwalk checks each one it opens), so the walk cannot
        # leave the root or go round in a loop; symlinked files are checked one by one.
        # Unreadable subdirectories are skipped (fwalk's default), as NorFab's walk does.
        for dirpath, dirnames, filenames, _ in os.fwalk(".", dir_fd=fd):
            dirnames[:] = sorted(
                d for d in dirnames if not _hidden(d) and not (d.startswith("__") and d.endswith("__"))
            )
            for name in filenames:
                if _hidden(name):
                    continue
                path = os.path.normpath(os.path.join(top, dirpath, name))
                real = os.path.realpath(path)
                if os.path.commonpath([str(root.path), real]) != str(root.path) or not os.path.isfile(real):
                    continue
                found.append(root.url_of(path))
                if len(found) > MAX_ENTRIES:
                    raise RequestError(
                        Status.UNKNOWN, f"'{url}': more than {MAX_ENTRIES} files; walk a subdirectory"
                    )
    return Status.OK, sorted(found)


def _fetch_file(task: str, kwargs: Mapping[str, Any], args: Sequence[Any], root: FileRoot) -> tuple[int, Any]:
    url = param(task, kwargs, args, "url", str, position=0)
    offset = param(task, kwargs, args, "offset", int, default=0)
    chunk_size = param(task, kwargs, args, "chunk_size", int, default=DEFAULT_CHUNK)
    if offset < 0:
        raise RequestError(Status.UNKNOWN, f"{task}: 'offset' must be 0 or more, not {offset}")
    if chunk_size < 1:
        raise RequestError(Status.UNKNOWN, f"{task}: 'chunk_size' must be 1 or more, not {chunk_size}")
    with _open_regular(root, url) as file:
        size = os.fstat(file.fileno()).st_size
        if offset > size:
            raise RequestError(Status.UNKNOWN, f"'{url}': offset {offset} is past the end ({size} bytes)")
        file.seek(offset)
        data = file.read(min(chunk_size, MAX_CHUNK))
    return Status.OK, {
        "url": url,
        "offset": offset,
        "length": len(data),
        "size": size,
        "eof": offset + len(data) >= size,
        "encoding": "base64",
        "data": base64.b64encode(data).decode("ascii"),
    }


_Task = Callable[[str, Mapping[str, Any], Sequence[Any], FileRoot], tuple[int, Any]]

_TASKS: Final[Mapping[str, _Task]] = {
    "list_files": _list_files,
    "file_details": _file_details,
    "walk": _walk,
    "fetch_file": _fetch_file,
}


# ------------------------------------------------------------------------ helpers


@contextlib.contextmanager
def _directory(root: FileRoot, url: str) -> Iterator[tuple[str, int]]:
    """The directory ``url`` names: its resolved path and a descriptor opened beneath
    the root (closed on exit). Raises RequestError: 404 missing, 400 not a directory."""
    real = root.resolve(url)
    try:
        fd = _open_beneath(root, real, _DIR_FLAGS)
    except NotADirectoryError:
        kind = "not a directory" if os.path.lexists(real) else "directory not found"
        raise RequestError(
            Status.UNKNOWN if os.path.lexists(real) else Status.NOT_FOUND, f"'{url}': {kind}"
        ) from None
    except FileNotFoundError:
        raise RequestError(Status.NOT_FOUND, f"'{url}': directory not found") from None
    except OSError as exc:
        raise _os_error(url, exc) from None
    try:
        yield real, fd
    finally:
        os.close(fd)


@attrs.define
class _Budget:
    """What one file_details request may still hash (:data:`MAX_HASHED`)."""

    left: int = attrs.field(factory=lambda: MAX_HASHED)  # read when made: tests lower it


def _details(root: FileRoot, url: str, budget: _Budget) -> dict[str, Any]:
    with _open_regular(root, url) as file:
        info = os.fstat(file.fileno())
        # The loop hashes on its own thread: a file unchanged since it was last hashed
        # (same inode, size and mtime) is not read again. NorFab's clients ask for the
        # details of the same files before every fetch.
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        digests = _DIGESTS.pop(key, None)
        if digests is None:
            if info.st_size > budget.left:
                # Not hashed rather than the loop held for seconds: the size still says
                # what is there, and the client can hash what it fetches.
                return {
                    "md5hash": None,
                    "size_bytes": info.st_size,
                    "exists": True,
                    "sha256hash": None,
                    "modified": info.st_mtime,
                    "error": f"not hashed: past the {MAX_HASHED} bytes one request may hash on the broker",
                }
            md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
            while chunk := file.read(65536):
                md5.update(chunk)
                sha256.update(chunk)
            budget.left -= info.st_size
            digests = md5.hexdigest(), sha256.hexdigest()
        _DIGESTS[key] = digests  # most recently used last
        if len(_DIGESTS) > MAX_DIGESTS:
            del _DIGESTS[next(iter(_DIGESTS))]
    return {
        "md5hash": digests[0],  # NorFab's client compares this with its cached copy
        "size_bytes": info.st_size,
        "exists": True,
        "sha256hash": digests[1],
        "modified": info.st_mtime,
    }


def _open_beneath(root: FileRoot, real: str, flags: int) -> int:
    """A descriptor for ``real`` (a path :meth:`FileRoot.resolve` returned), opened one
    component at a time from the root with ``O_NOFOLLOW``: had a directory on the way
    become a symlink since the path was resolved, the open fails (ELOOP, ENOTDIR)
    instead of following it out of the root. (``O_NOFOLLOW`` on the whole path guards
    only its last component.)

    Raises OSError as ``os.open`` does.
    """
    rel = os.path.relpath(real, root.path)
    parts = [] if rel == "." else rel.split(os.sep)
    if os.open not in os.supports_dir_fd:  # no openat here: the resolved path, as before
        return os.open(real, flags)
    fd = os.open(root.path, _DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            try:
                step = os.open(name, flags if i == len(parts) - 1 else _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                # Linux says ENOTDIR for a symlink opened O_DIRECTORY | O_NOFOLLOW: say
                # what happened, so that it reads as a refusal (400), not a missing file.
                if exc.errno in (errno.ENOTDIR, errno.ELOOP) and _is_link(name, fd):
                    raise OSError(errno.ELOOP, "a symbolic link on the path since it was checked") from None
                raise
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_regular(root: FileRoot, url: str) -> io.BufferedReader:
    """``url`` opened for binary reading, checked to be a regular file on the open
    descriptor itself (checking the path first would leave a window to swap it).

    Raises RequestError: 404 missing, 400 directory or other non-regular file, 500
    other OS errors.
    """
    real = root.resolve(url)
    try:
        fd = _open_beneath(root, real, _OPEN_FLAGS)
    except OSError as exc:
        raise _os_error(url, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "is a directory" if stat.S_ISDIR(mode) else "is not a regular file"
            raise RequestError(Status.UNKNOWN, f"'{url}': {kind}")
        return open(fd, "rb")  # the caller's `with` closes it
    except BaseException:
        os.close(fd)
        raise


def _os_error(url: str, exc: OSError) -> RequestError:
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        return RequestError(Status.NOT_FOUND, f"'{url}': file not found")
    if isinstance(exc, IsADirectoryError):
        return RequestError(Status.UNKNOWN, f"'{url}': is a directory")
    if exc.errno in (errno.ENAMETOOLONG, errno.ELOOP):  # the URL is wrong: retrying cannot help
        return RequestError(Status.UNKNOWN, f"'{url[:200]}': {exc.strerror}")
    return RequestError(Status.ERROR, f"'{url}': {exc.strerror or exc}")


def _hidden(name: str) -> bool:
    return name.startswith(".")
