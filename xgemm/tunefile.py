"""The tuning file: what ``xgemm tune`` found fastest, per GPU, dtype and shape, kept on
disk for ``variant="auto"``. Processes may share it: writes merge under a file lock.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import filelock

from .registry import get_variant
from .version import __version__

#: Environment variable naming the tuning file, instead of the user's cache directory.
CACHE_ENV = "XGEMM_TUNE_CACHE"
#: The tuning file's format; a file of another format, or written by another version of
#: xgemm, is ignored with a warning (and replaced by the next tune).
CACHE_VERSION = 2
#: Seconds a tune waits for another process's write of the tuning file before giving up.
LOCK_TIMEOUT_S = 60


def cache_path() -> Path:
    """The tuning file: ``$XGEMM_TUNE_CACHE``, or ``tuned.json`` in the user cache directory."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("xgemm")) / "tuned.json"


def _pow2(x: int) -> int:
    return 1 << (x - 1).bit_length() if x > 1 else x


def shape_bucket(m: int, n: int, k: int) -> str:
    """Shapes that share tuned parameters: each dimension rounded up to a power of two.

    >>> shape_bucket(4096, 4096, 4096), shape_bucket(4097, 31, 1025)
    ('4096x4096x4096', '8192x32x2048')
    """
    return "x".join(str(_pow2(d)) for d in (m, n, k))


class TuneCache:
    """The tuning file: ``{"version": 2, "xgemm": "0.1.0", "entries": {"GPU|dtype|bucket":
    {...}}}``.

    A file that cannot be read, or that another version of xgemm (or of the format) wrote,
    or an entry that no longer fits the registry (a variant renamed, a constraint
    tightened), is ignored with a warning: never a crash, never a wrong kernel.

    Several processes may share the file (two ``xgemm tune`` runs, a tune and a program
    calling ``matmul``): a store merges its entries into what is on disk at that moment,
    under a lock file beside it (``filelock``), and replaces the file atomically through a
    temporary file of its own, so a reader sees the old file or the new one, never a part,
    and no process drops another's entries.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.entries = self._read(warn=True)

    @staticmethod
    def key(gpu: str, dtype: str, m: int, n: int, k: int, exact: bool = False) -> str:
        """The entry for a shape's bucket, or (``exact``) for the shape itself."""
        return f"{gpu}|{dtype}|" + (f"={m}x{n}x{k}" if exact else shape_bucket(m, n, k))

    def _read(self, warn: bool) -> dict[str, dict[str, Any]]:
        """The entries on disk now: none if there is no file, or (with a warning if
        ``warn``) if it cannot be read or another version wrote it."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            problem = str(exc)
        else:
            try:
                data = json.loads(text)
                if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
                    raise ValueError("no entries")
                if (data.get("version"), data.get("xgemm")) != (CACHE_VERSION, __version__):
                    raise ValueError(
                        f"written by xgemm {data.get('xgemm', 'before 0.1.0')} (format "
                        f"{data.get('version')!r}); this is xgemm {__version__} (format "
                        f"{CACHE_VERSION}): tune again, and the file is rewritten")
                return data["entries"]
            except ValueError as exc:
                problem = str(exc)
        if warn:
            warnings.warn(f"ignoring the xgemm tuning file {self.path}: {problem}",
                          stacklevel=4)
        return {}

    def lookup(self, gpu: str, dtype: str, m: int, n: int, k: int, exact: bool = False
               ) -> tuple[str, dict[str, int]] | None:
        """What was tuned for this very shape, else (unless ``exact``) for its bucket, else
        None."""
        if not self.entries:
            return None
        keys = [self.key(gpu, dtype, m, n, k, exact=True)]
        if not exact:
            keys.append(self.key(gpu, dtype, m, n, k))
        for key in keys:
            if key in self.entries:
                break
        else:
            return None
        entry = self.entries[key]
        try:
            variant = get_variant(entry["variant"])
            params = variant.resolve(entry["params"], dtype)
        except (KeyError, TypeError, ValueError) as exc:
            warnings.warn(f"ignoring the stale tuning entry {key!r} in {self.path}: {exc}",
                          stacklevel=3)
            del self.entries[key]
            return None
        return variant.name, params

    def store(self, gpu: str, dtype: str, m: int, n: int, k: int, variant: str,
              params: Mapping[str, int], ms: float) -> None:
        """Remember the winner for this shape and (the latest tuned in it wins) its bucket,
        merged into the file as it is on disk now."""
        entry = {"variant": variant, "params": dict(params), "ms": ms, "shape": [m, n, k],
                 "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        ours = {self.key(gpu, dtype, m, n, k, exact): entry for exact in (True, False)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self._file_lock():
            entries = {**self._read(warn=False), **ours}  # another's entries stay
            self._write({"version": CACHE_VERSION, "xgemm": __version__, "entries": entries})
            self.entries = entries
        _changed()

    def clear(self) -> None:
        with self._lock, self._file_lock():
            self.entries = {}
            self.path.unlink(missing_ok=True)
        _changed()

    def _file_lock(self) -> filelock.FileLock:
        """The lock every writer of the file takes (a ``.lock`` file beside it)."""
        return filelock.FileLock(f"{self.path}.lock", timeout=LOCK_TIMEOUT_S)

    def _write(self, data: dict[str, Any]) -> None:
        """Write through a temporary file of this process's own, then replace the file in
        one step (``os.replace``)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp",
                                   dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


_caches: dict[str | None, TuneCache] = {}  # by $XGEMM_TUNE_CACHE as it was read
_listeners: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever this process writes or clears a tuning file: what was
    chosen from the file before (``auto``'s cached choices and plans) is stale then."""
    _listeners.append(listener)


def _changed() -> None:
    for listener in _listeners:
        listener()


def tune_cache() -> TuneCache:
    """The tuning file in use (read once per path and process; looked up by the
    environment variable's text, so a lookup builds no path)."""
    override = os.environ.get(CACHE_ENV)
    found = _caches.get(override)
    if found is None:
        found = _caches[override] = TuneCache(cache_path())
    return found
