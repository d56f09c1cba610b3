"""Files read within the limits hostile input cannot break: regular files only (a FIFO would hang the read),
at most MAX_BYTES, UTF-8 (kubectl reads nothing else)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from specinfer_operator.cli.yaml_documents import MAX_BYTES, ManifestError


def decode(data: bytes) -> str:
    """UTF-8 text (a byte-order mark allowed, as kubectl allows it), or one line saying which byte is not."""
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise ManifestError(f"not UTF-8 text (byte {error.start} is 0x{data[error.start]:02x})") from error


def read_limited(stream: BinaryIO) -> str:
    """At most MAX_BYTES of UTF-8."""
    data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ManifestError(f"larger than {MAX_BYTES >> 20} MiB")
    return decode(data)


def open_regular(path: str | Path) -> BinaryIO:
    """A file opened for reading without blocking first: a FIFO or a device would hold the open (or the read)
    until some writer came. ManifestError for anything but a regular file; OSError as open raises it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestError("not a regular file (a FIFO, socket or device): give a file, a directory, or -")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_text(path: str | Path) -> str:
    """A regular file's text; ManifestError in one line (without the path) when it cannot be read."""
    try:
        with open_regular(path) as stream:
            return read_limited(stream)
    except OSError as error:
        raise ManifestError(f"cannot read: {error.strerror or error}") from error
