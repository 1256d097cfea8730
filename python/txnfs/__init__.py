"""Transactions on a txnfs mount: a Python binding of libtxnfs (include/txnfs/txnfs.h).

A transaction groups file-system calls on one txnfs mount so that all of them take
effect or none do::

    import txnfs

    with txnfs.transaction("/srv/txn") as t:   # commit on normal exit, abort on exception
        with open("/srv/txn/config", "w") as f:
            f.write(new_config)
        os.rename("/srv/txn/config.d/old", "/srv/txn/config.d/new")

It is bound to the thread that begins it (``bind="thread"``, the default): every
request that thread makes on the mount belongs to it. With ``bind="process"`` it is
bound to a process (default: this one) and every process it starts afterwards.

Every failure raises a :class:`TxnfsError` (an :class:`OSError`, ``errno`` set); the
subclass says what happened, e.g. :class:`TxnConflict` when the transaction lost a
deadlock or a lock wait and can only be retried from the start.

The shared library is ``$TXNFS_LIB`` if set, else ``libtxnfs.so.0`` as the dynamic
loader finds it (``meson install`` puts it in ``<prefix>/lib/<triplet>``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno as _errno
import json
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, TypeVar, Union

__all__ = [
    "TxnfsError", "TxnConflict", "NotTxnfs", "AlreadyInTransaction", "NoSuchTransaction",
    "NotOwner", "CommitFailed", "LimitExceeded",
    "TxnInfo", "Transaction", "transaction", "begin", "commit", "abort", "info", "status",
    "set_lock_timeout", "sync", "retry", "library_path", "view_path", "enter_view",
]

__version__ = "0.1.0"

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
T = TypeVar("T")

BIND_THREAD = 0
BIND_PROCESS = 1
_STATES = {1: "active", 2: "abort_only", 3: "committing", 4: "committed", 5: "aborted"}

# --------------------------------------------------------------------------- errors


class TxnfsError(OSError):
    """A txnfs call failed. ``errno`` holds the error number, ``filename`` the mount."""


class TxnConflict(TxnfsError):
    """The transaction lost a deadlock (EDEADLK) or a lock wait (ETIMEDOUT) and can only
    abort. Retry the whole transaction (see :func:`retry`)."""


class NotTxnfs(TxnfsError):
    """The path is not on a txnfs mount (ENOTTY)."""


class AlreadyInTransaction(TxnfsError):
    """The caller (thread or process) is already in a transaction (EBUSY)."""


class NoSuchTransaction(TxnfsError):
    """No open transaction has this id (ENOENT): it ended, or its owner exited."""


class NotOwner(TxnfsError):
    """Only the transaction's owner (same uid) or root may end it (EPERM)."""


class CommitFailed(TxnfsError):
    """The commit failed (EIO); the transaction was rolled back."""


class LimitExceeded(TxnfsError):
    """The transaction exceeded the mount's --max-txn-ops or --max-txn-backup-bytes
    (EDQUOT); it can only abort."""


_BY_ERRNO: dict[int, type[TxnfsError]] = {
    _errno.EDEADLK: TxnConflict,
    _errno.ETIMEDOUT: TxnConflict,
    _errno.ENOTTY: NotTxnfs,
    _errno.EBUSY: AlreadyInTransaction,
    _errno.ENOENT: NoSuchTransaction,
    _errno.EPERM: NotOwner,
    _errno.EIO: CommitFailed,
    _errno.EDQUOT: LimitExceeded,
}


def _error(rc: int, what: str, mount: PathLike) -> TxnfsError:
    err = -rc
    cls = _BY_ERRNO.get(err, TxnfsError)
    if what == "begin" and err == _errno.ENOENT:  # the mount path itself does not exist
        cls = TxnfsError
    return cls(err, f"txnfs_{what}: {os.strerror(err)}", os.fsdecode(mount))


# --------------------------------------------------------------------------- library


class _Info(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("state", ctypes.c_uint32),
                ("owner_uid", ctypes.c_uint32), ("pid", ctypes.c_int32),
                ("flags", ctypes.c_uint32), ("ops", ctypes.c_uint64),
                ("backup_bytes", ctypes.c_uint64), ("age_ms", ctypes.c_uint64),
                ("error", ctypes.c_int32), ("reserved", ctypes.c_uint32)]


_lib: Optional[ctypes.CDLL] = None
_lib_lock = threading.Lock()


def library_path() -> str:
    """The libtxnfs this module loads (or would load): ``$TXNFS_LIB``, else the soname."""
    return os.environ.get("TXNFS_LIB") or ctypes.util.find_library("txnfs") or "libtxnfs.so.0"


def _load() -> ctypes.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            try:
                lib = ctypes.CDLL(library_path())
            except OSError as e:
                raise ImportError(
                    f"cannot load libtxnfs ({e}); install txnfs (meson install, then ldconfig) "
                    f"or set TXNFS_LIB to the path of libtxnfs.so.0") from e
            u64, cstr = ctypes.c_uint64, ctypes.c_char_p
            lib.txnfs_begin.argtypes = [cstr, ctypes.c_uint, ctypes.c_int, ctypes.POINTER(u64)]
            lib.txnfs_commit.argtypes = [cstr, u64]
            lib.txnfs_commit2.argtypes = [cstr, u64, ctypes.c_uint]
            lib.txnfs_sync.argtypes = [cstr]
            lib.txnfs_abort.argtypes = [cstr, u64]
            lib.txnfs_info.argtypes = [cstr, u64, ctypes.POINTER(_Info)]
            lib.txnfs_set_lock_timeout.argtypes = [cstr, u64, ctypes.c_uint32]
            lib.txnfs_status_json.argtypes = [cstr, ctypes.c_char_p, ctypes.c_size_t]
            lib.txnfs_view_path.argtypes = [cstr, u64, ctypes.c_char_p, ctypes.c_size_t]
            lib.txnfs_enter_view.argtypes = [cstr, u64]
            for f in (lib.txnfs_begin, lib.txnfs_commit, lib.txnfs_abort, lib.txnfs_info,
                      lib.txnfs_set_lock_timeout, lib.txnfs_status_json, lib.txnfs_commit2,
                      lib.txnfs_sync, lib.txnfs_view_path, lib.txnfs_enter_view):
                f.restype = ctypes.c_int
            _lib = lib
        return _lib


def _path(mount: PathLike) -> bytes:
    return os.fsencode(mount)


# --------------------------------------------------------------------------- calls


def begin(mount: PathLike, *, bind: str = "thread", pid: int = 0) -> int:
    """Begin a transaction on the txnfs mount containing ``mount``; return its id.

    ``bind="thread"`` binds it to the calling OS thread; ``bind="process"`` to process
    ``pid`` (0: this one) and the processes it starts afterwards.
    Raises :class:`AlreadyInTransaction`, :class:`NotTxnfs`, or :class:`TxnfsError`."""
    if bind not in ("thread", "process"):
        raise ValueError(f"bind must be 'thread' or 'process', not {bind!r}")
    if bind == "thread" and pid:
        raise ValueError("pid is only meaningful with bind='process'")
    tid = ctypes.c_uint64(0)
    rc = _load().txnfs_begin(_path(mount), BIND_PROCESS if bind == "process" else BIND_THREAD,
                             pid, ctypes.byref(tid))
    if rc != 0:
        raise _error(rc, "begin", mount)
    return tid.value


def commit(mount: PathLike, txn_id: int, *, lazy: bool = False) -> None:
    """Commit transaction ``txn_id``: returns once its changes are durable.

    With ``lazy=True`` it returns once the transaction is final and visible; it becomes
    durable at the mount's next group commit (within its ``--lazy-flush-ms``) or at
    :func:`sync`. A crash before then rolls it back whole, and only together with every
    later lazy commit.

    Raises :class:`TxnConflict` if it can only abort (abort it then),
    :class:`CommitFailed` if the commit failed and it was rolled back,
    :class:`NoSuchTransaction`, :class:`NotOwner`."""
    lib = _load()
    rc = lib.txnfs_commit2(_path(mount), txn_id, 1) if lazy else lib.txnfs_commit(
        _path(mount), txn_id)
    if rc != 0:
        raise _error(rc, "commit", mount)


def sync(mount: PathLike) -> None:
    """Returns once every commit made on the mount before the call is durable, lazy
    ones included."""
    rc = _load().txnfs_sync(_path(mount))
    if rc != 0:
        raise _error(rc, "sync", mount)


def abort(mount: PathLike, txn_id: int) -> None:
    """Abort transaction ``txn_id``: every change it made is undone.

    Raises :class:`NoSuchTransaction`, :class:`NotOwner`."""
    rc = _load().txnfs_abort(_path(mount), txn_id)
    if rc != 0:
        raise _error(rc, "abort", mount)


def set_lock_timeout(mount: PathLike, txn_id: int, ms: int) -> None:
    """Bound each lock wait of the transaction to ``ms`` milliseconds (0: fail at once on
    a conflict); a wait that lasts longer fails the request with ETIMEDOUT."""
    if ms < 0:
        raise ValueError("ms must be >= 0")
    rc = _load().txnfs_set_lock_timeout(_path(mount), txn_id, ms)
    if rc != 0:
        raise _error(rc, "set_lock_timeout", mount)


@dataclass(frozen=True)
class TxnInfo:
    """The state of an open transaction (struct txnfs_info)."""
    id: int
    state: str          # "active", "abort_only", "committing", "committed", "aborted"
    owner_uid: int
    pid: int            # bound thread or process
    bind: str           # "thread" or "process"
    ops: int            # operations performed
    backup_bytes: int   # bytes backed up for undo
    age_ms: int
    error: int          # errno that made it abort-only, else 0


def info(mount: PathLike, txn_id: int) -> TxnInfo:
    """The state of transaction ``txn_id``. Raises :class:`NoSuchTransaction`."""
    raw = _Info()
    rc = _load().txnfs_info(_path(mount), txn_id, ctypes.byref(raw))
    if rc != 0:
        raise _error(rc, "info", mount)
    return TxnInfo(id=raw.id, state=_STATES.get(raw.state, str(raw.state)),
                   owner_uid=raw.owner_uid, pid=raw.pid,
                   bind="process" if raw.flags == BIND_PROCESS else "thread",
                   ops=raw.ops, backup_bytes=raw.backup_bytes, age_ms=raw.age_ms,
                   error=raw.error)


def status(mount: PathLike) -> dict[str, Any]:
    """The mount's status: ``{"transactions": [...], "counters": {...}}`` (open
    transactions with their locks; commits, aborts, deadlocks, timeouts, recoveries)."""
    buf = ctypes.create_string_buffer(8192)  # TXNFS_STATUS_JSON_MAX
    rc = _load().txnfs_status_json(_path(mount), buf, len(buf))
    if rc < 0:
        raise _error(rc, "status_json", mount)
    return json.loads(buf.value.decode())


def view_path(mount: PathLike, txn_id: int) -> str:
    """The root of transaction ``txn_id``'s view of the mount containing ``mount``:
    ``MOUNTPOINT/.txnfs/ID``. What a program does below it belongs to the transaction
    (whichever thread or process does it), and no one outside the transaction sees it
    before the commit, not even through the kernel's caches. Only the transaction's owner
    and root may enter it; once the transaction ends, it answers ESTALE."""
    buf = ctypes.create_string_buffer(4200)
    rc = _load().txnfs_view_path(_path(mount), txn_id, buf, len(buf))
    if rc != 0:
        raise _error(rc, "view_path", mount)
    return os.fsdecode(buf.value)


def enter_view(mount: PathLike, txn_id: int) -> None:
    """Make the mount itself show transaction ``txn_id``'s view, for this process (and
    the processes it starts) from now on, with no way back: a private mount namespace
    with the view bound over the mount point (for a user other than root, in a user
    namespace of its own ids; the process must be single-threaded then). Meant for a
    child process, e.g. in ``preexec_fn`` (``txnfs run`` does this)."""
    rc = _load().txnfs_enter_view(_path(mount), txn_id)
    if rc != 0:
        raise _error(rc, "enter_view", mount)


# --------------------------------------------------------------------------- context


class Transaction:
    """An open transaction, as :func:`transaction` yields it."""

    def __init__(self, mount: PathLike, txn_id: int, bind: str = "thread") -> None:
        self.mount = mount
        self.id = txn_id
        self.bind = bind
        self.committed = False
        self.aborted = False

    def info(self) -> TxnInfo:
        """The transaction's state (see :func:`info`)."""
        return info(self.mount, self.id)

    @property
    def root(self) -> str:
        """The root of the transaction's view (see :func:`view_path`)."""
        return view_path(self.mount, self.id)

    def path(self, *parts: PathLike) -> str:
        """A path of the mount as the transaction sees it: ``t.path("etc", "app.conf")``
        is ``MOUNTPOINT/.txnfs/ID/etc/app.conf``. Every thread and process may use it."""
        return os.path.join(self.root, *map(os.fsdecode, parts))

    def set_lock_timeout(self, ms: int) -> None:
        """See :func:`set_lock_timeout`."""
        set_lock_timeout(self.mount, self.id, ms)

    def commit(self, *, lazy: bool = False) -> None:
        """Commit now (the ``with`` block then does nothing more); see :func:`commit`."""
        commit(self.mount, self.id, lazy=lazy)
        self.committed = True

    def abort(self) -> None:
        """Abort now: undo everything (the ``with`` block then does nothing more)."""
        try:
            abort(self.mount, self.id)
        except (NoSuchTransaction, NotOwner):
            raise
        except TxnfsError:
            if self.bind != "thread":
                raise
            # The control call opens the mount from this thread, which is in the
            # transaction: once it is abort-only, the daemon may refuse that open
            # (e.g. when the transaction changed the mount's root directory). Another
            # thread of the same owner is not in it and may end it.
            errors: list[BaseException] = []

            def other_thread() -> None:
                try:
                    abort(self.mount, self.id)
                except BaseException as e:  # noqa: BLE001 - re-raised below
                    errors.append(e)

            t = threading.Thread(target=other_thread, name=f"txnfs-abort-{self.id}")
            t.start()
            t.join()
            if errors:
                raise errors[0] from None
        self.aborted = True

    def __repr__(self) -> str:
        state = "committed" if self.committed else "aborted" if self.aborted else "open"
        return f"<txnfs.Transaction {self.id} on {os.fsdecode(self.mount)} {state}>"


def _is_conflict(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (_errno.EDEADLK, _errno.ETIMEDOUT)


@contextlib.contextmanager
def transaction(mount: PathLike, *, bind: str = "thread", pid: int = 0,
                lock_timeout_ms: Optional[int] = None) -> Iterator[Transaction]:
    """Run the ``with`` block as one transaction on ``mount``.

    Normal exit commits; an exception aborts and propagates. A file operation in the
    block that lost a deadlock or a lock wait (an OSError with EDEADLK or ETIMEDOUT)
    aborts the transaction and is raised as :class:`TxnConflict` (chained to the
    original). A commit the daemon refuses because the transaction can only abort
    aborts it and raises :class:`TxnConflict` (or :class:`LimitExceeded`)."""
    t = Transaction(mount, begin(mount, bind=bind, pid=pid), bind)
    try:
        if lock_timeout_ms is not None:
            t.set_lock_timeout(lock_timeout_ms)
        yield t
    except BaseException as e:
        if not (t.committed or t.aborted):
            with contextlib.suppress(NoSuchTransaction):
                t.abort()
        if _is_conflict(e) and not isinstance(e, TxnConflict):
            assert isinstance(e, OSError)
            raise TxnConflict(e.errno, f"transaction {t.id} aborted: {e.strerror}",
                              e.filename) from e
        raise
    if t.committed or t.aborted:
        return
    try:
        t.commit()
    except TxnfsError as e:
        if not isinstance(e, (CommitFailed, NoSuchTransaction)):
            # abort-only (EDEADLK, EDQUOT ...): it is still open; roll it back
            with contextlib.suppress(NoSuchTransaction):
                t.abort()
        raise


def retry(mount: PathLike, fn: Callable[[Transaction], T], *, attempts: int = 5,
          **kwargs: Any) -> T:
    """Call ``fn(t)`` inside ``transaction(mount, **kwargs)``, again from the start when it
    raises :class:`TxnConflict`, up to ``attempts`` times; return what ``fn`` returns."""
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    for n in range(attempts):
        try:
            with transaction(mount, **kwargs) as t:
                return fn(t)
        except TxnConflict:
            if n == attempts - 1:
                raise
    raise AssertionError("unreachable")
