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
    """get_into: the value does not fit the buffer (whose contents are then
    unspecified)."""

    needed: int
    """The value's size in bytes."""

class RegisteredBuffer:
    """A buffer registered with a Client (Client.register_buffer): get_into
    into it, or into a slice of it, gets the value by the READ itself, with
    no copy. While registered it holds the buffer (a bytearray cannot be
    resized: BufferError). The registration ends with unregister(), when
    this object is collected, or when its Client is closed. A context
    manager: leaving the with block unregisters it."""

    def unregister(self) -> None:
        """Deregisters the memory and releases the buffer. Idempotent; does
        nothing after the Client was closed."""
    @property
    def registered(self) -> bool:
        """True until unregister() or the Client's close()."""
    @property
    def buffer(self) -> WriteableBuffer:
        """The object that was registered."""
    @property
    def nbytes(self) -> int:
        """The registered memory's size in bytes; 0 once unregistered."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

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
        *,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        data_plane_tls: bool = False,
    ) -> None:
        """Connects: exactly one of server and coordinators, exactly one of
        token and token_file. tls_ca (and tls_cert with tls_key): PEM files
        for TLS on a cluster's control plane; data_plane_tls: on the data
        plane too (tcp), servers verified against tls_ca. ValueError for bad arguments,
        OSError for an unreadable token_file, rkv.Error for a failed connect
        (rkv.InvalidArgument for an unreadable or malformed TLS file)."""
    def get(self, key: Bytes) -> bytes:
        """The value of key; rkv.NotFound (a KeyError) when absent."""
    def get_versioned(self, key: Bytes) -> Tuple[bytes, int]:
        """(value, version) of key; rkv.NotFound when absent."""
    def put(self, key: Bytes, value: Bytes, *, if_version: Optional[int] = None, if_absent: bool = False,
            ttl: Optional[float] = None) -> int:
        """Stores value under key; returns the key's new version. With
        if_version (a compare-and-set) or if_absent, only if the key is so;
        otherwise rkv.FailedPrecondition and nothing is written. With ttl
        (seconds), the key expires that long from now."""
    def ttl(self, key: Bytes) -> Optional[float]:
        """Seconds until key expires, None when it does not; rkv.NotFound
        when absent."""
    def delete(self, key: Bytes, *, if_version: Optional[int] = None) -> None:
        """Removes key; rkv.NotFound when it was absent. With if_version, only
        if the key is at that version: rkv.PreconditionFailed otherwise."""
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
        server, get_into_in_place and get_into_copied (get_into values read
        into a registered buffer, and values copied once) (Client::Counters),
        the server's limits and transport; in cluster mode each server's
        counters too."""
    def get_into(self, key: Bytes, buffer: WriteableBuffer) -> int:
        """Writes the value into the writable contiguous buffer from its
        start; returns its size. In place (no copy) when buffer lies in a
        registered buffer, else copied once. Bytes past the value may be
        overwritten (the block's padding, up to 63 bytes), never bytes
        outside buffer. rkv.BufferTooSmall (with .needed) when it does not
        fit; on any error the contents of buffer are unspecified."""
    def register_buffer(self, buffer: WriteableBuffer) -> RegisteredBuffer:
        """Registers the writable contiguous buffer for get_into, holding it
        until unregistered. rkv.InvalidArgument when empty,
        rkv.AlreadyExists when it overlaps a registered buffer."""
    def close(self) -> None:
        """Unregisters the buffers still registered, then disconnects;
        later calls raise rkv.FailedPrecondition."""
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
