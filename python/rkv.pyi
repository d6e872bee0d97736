"""Client of an rkv server or cluster, over librkv (type stubs).

Keys and values are bytes (str is taken as UTF-8; any bytes-like object is
accepted); values come back as bytes. Every call releases the GIL while
librkv works, and a Client may be shared by threads.
"""

import os
from types import TracebackType
from typing import Iterable, Mapping, Optional, Sequence, Tuple, Type, Union

from _typeshed import ReadableBuffer, WriteableBuffer
from typing_extensions import Self

# A key or value: bytes-like, or str (UTF-8).
Bytes = Union[ReadableBuffer, str]

class Error(Exception):
    """Base of every error rkv reports."""

    code: Optional[str]
    """The status code's name, e.g. "NOT_FOUND"."""
    reason: Optional[str]
    """The typed reason, e.g. "NONE" or "OUTCOME_UNKNOWN"."""

class Cancelled(Error): ...
class Unknown(Error): ...
class InvalidArgument(Error, ValueError): ...
class DeadlineExceeded(Error): ...
class NotFound(Error, KeyError): ...
class AlreadyExists(Error): ...
class PermissionDenied(Error): ...
class ResourceExhausted(Error): ...
class FailedPrecondition(Error): ...

PreconditionFailed = FailedPrecondition

class Aborted(Error): ...
class OutOfRange(Error): ...
class Unimplemented(Error): ...
class Internal(Error): ...
class Unavailable(Error): ...
class DataLoss(Error): ...
class Unauthenticated(Error): ...

class BufferTooSmall(OutOfRange):
    """get_into: the value does not fit the buffer; nothing was written."""

    needed: int
    """The value's size in bytes."""

class Client:
    """A connection to one rkv server or to a cluster (thread-safe)."""

    def __init__(
        self,
        server: Optional[str] = None,
        coordinators: Optional[Union[str, Sequence[str]]] = None,
        token: Optional[Union[str, bytes]] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        transport: str = "auto",
        timeout: float = 5.0,
        connections: int = 1,
    ) -> None:
        """Connects: exactly one of server and coordinators, exactly one of
        token and token_file. ValueError for bad arguments, OSError for an
        unreadable token_file, rkv.Error for a failed connect."""
    def get(self, key: Bytes) -> bytes:
        """The value of key; rkv.NotFound (a KeyError) when absent."""
    def get_versioned(self, key: Bytes) -> Tuple[bytes, int]:
        """(value, version) of key; rkv.NotFound when absent."""
    def put(self, key: Bytes, value: Bytes, *, if_version: Optional[int] = None, if_absent: bool = False) -> int:
        """Stores value under key; returns the key's new version. With
        if_version (a compare-and-set) or if_absent, only if the key is so;
        otherwise rkv.FailedPrecondition and nothing is written."""
    def delete(self, key: Bytes) -> None:
        """Removes key; rkv.NotFound when it was absent."""
    def multi_get(self, keys: Iterable[Bytes]) -> list[Optional[bytes]]:
        """One value per key, None for an absent key; other errors raise."""
    def multi_put(self, items: Union[Mapping[Bytes, Bytes], Iterable[Tuple[Bytes, Bytes]]]) -> list[int]:
        """Stores many pairs; returns their versions in order. The first
        failing item's error raises (others may have been applied)."""
    def multi_delete(self, keys: Iterable[Bytes]) -> list[bool]:
        """Removes many keys: True when removed, False when absent."""
    def members(self) -> list[dict[str, Union[str, int, bool]]]:
        """Cluster mode: the cached map's servers. rkv.FailedPrecondition
        for a client of one server."""
    def stats(self) -> dict[str, object]:
        """Location-cache stats, the client's retries and attempts per
        server (Client::Counters), the server's limits and transport; in
        cluster mode each server's counters too."""
    def get_into(self, key: Bytes, buffer: WriteableBuffer) -> int:
        """Writes the value into the writable buffer; returns its size.
        rkv.BufferTooSmall (with .needed) when it does not fit. Copies the
        value once today."""
    def close(self) -> None:
        """Disconnects; later calls raise rkv.FailedPrecondition."""
    @property
    def closed(self) -> bool:
        """True once close() was called."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
