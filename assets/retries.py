"""Step retries: one rule for which failures may pass if the step runs again.

One retry layer per kind of failure. A model, graph or vector store call is retried by its
client (tenacity in `resources/models/retry.py` and in the Gremlin store, the Milvus client's
own; the embedded stores wait on their locks), and a table commit that lost a race by the
table store, so their final errors are not retried again by the step. A bug, bad data or bad
configuration fails the same way each time, and a step interrupted by a signal (Ctrl-C,
`kill`) must not run again. What is left may pass: a connection or timeout no
client retried, an I/O error of the file system or the object store. Only those get
`STEP_RETRY`, which the jobs carry (`pipelines/jobs.py`, `op_retry_policy`); every asset
function and the tables IO manager's `handle_output` and `load_input` are decorated with
`retry_transient_only`, which turns any other error into a `Failure` that allows no retry (so
Dagster shows it as a framework error, with the original error and its traceback as the
cause).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from dagster import (
    Backoff,
    DagsterExecutionInterruptedError,
    Failure,
    RetryPolicy,
    RetryRequested,
)
from deltalake.exceptions import CommitFailedError

# 2, 4 and 8 s: a table commit race or a store restart, not an outage (the instance's run
# retries and the sensor take over from there).
STEP_RETRY = RetryPolicy(max_retries=3, delay=2, backoff=Backoff.EXPONENTIAL)

# What an OSError says when the fault is in the medium and may clear by itself.
TRANSIENT_ERRNOS = frozenset(
    {
        errno.EIO,
        errno.EAGAIN,
        errno.EBUSY,
        errno.EINTR,
        errno.ESTALE,
        errno.ETIMEDOUT,
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.ENETDOWN,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)

F = TypeVar("F", bound=Callable[..., Any])


def is_transient(exc: BaseException) -> bool:
    """Whether running the step again may succeed where this error failed it."""
    from resources.fs import storage_errno
    from resources.graph.base import GraphStoreError
    from resources.models.base import ModelError
    from resources.vector.base import VectorStoreError

    # Its client retried what was worth retrying (or, embedded, waited: SQLite's busy timeout,
    # the vector files' lock) and a table commit that lost a race was retried by the table
    # store (CONFLICT_RETRIES).
    if isinstance(exc, (ModelError, GraphStoreError, VectorStoreError, CommitFailedError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    # polars and delta-rs name the OS error in their message rather than setting errno.
    code = storage_errno(exc)
    if code is not None:
        return code in TRANSIENT_ERRNOS
    # An OSError without a number is how the object store's errors reach us (directly, or
    # wrapped in a StorageError); its subclasses (PermissionError, FileNotFoundError...) say
    # what is wrong even without one.
    from resources.fs import StorageError

    return type(exc) in (OSError, StorageError)


@contextlib.contextmanager
def _judged() -> Iterator[None]:
    """Raises what the block raised if it is transient, or what the asset itself said (a
    Failure, RetryRequested); anything else as a Failure that allows no retry."""
    try:
        yield
    except (Failure, RetryRequested):
        raise
    except (DagsterExecutionInterruptedError, KeyboardInterrupt) as exc:
        # Ctrl-C or kill, not a flaky medium: Dagster would retry the step by the job's policy.
        raise Failure(description="interrupted by a signal", allow_retries=False) from exc
    except Exception as exc:
        if is_transient(exc):
            raise
        raise Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc


def retry_transient_only(fn: F) -> F:
    """Decorates an asset's function: an error that is not transient fails the step without a
    step retry (the error stays the failure's cause); a transient one is raised as it is."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Any:
            with _judged():
                return (yield from fn(*args, **kwargs))

        return generator  # type: ignore[return-value]

    @functools.wraps(fn)
    def function(*args: Any, **kwargs: Any) -> Any:
        with _judged():
            return fn(*args, **kwargs)

    return function  # type: ignore[return-value]
