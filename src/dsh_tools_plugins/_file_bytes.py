"""The bytes under the file tools: reading a bounded amount, telling text from binary,
splitting lines and replacing a file's content; shared by :mod:`.files` and the search
tools, with no tool of their own."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dsh_tools.errors import ToolError

if TYPE_CHECKING:
    from .workspace import Opened

__all__ = [
    "BINARY_SNIFF_BYTES",
    "before_image",
    "is_binary",
    "read_fd",
    "read_text",
    "split_lines",
    "write_all",
]

BINARY_SNIFF_BYTES = 8192
"""A NUL byte in this many leading bytes makes a file binary."""


def read_fd(fd: int, limit: int) -> bytes:
    """Read from ``fd`` until EOF or ``limit`` bytes, whichever comes first."""
    chunks: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def is_binary(data: bytes) -> bool:
    """True when the first :data:`BINARY_SNIFF_BYTES` bytes hold a NUL byte."""
    return data.find(b"\x00", 0, BINARY_SNIFF_BYTES) >= 0  # no copy of the first bytes


def split_lines(text: str) -> list[str]:
    """Lines without their terminators (``\\n`` or ``\\r\\n``); no phantom last line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_text(fd: int, display: str, size: int, max_bytes: int, verb: str) -> str:
    """The file's text, or a :class:`ToolError` saying why it cannot be ``verb``-ed as text:
    over ``max_bytes``, binary, or (except to read) not UTF-8."""
    if size > max_bytes:
        raise ToolError(
            f'"{display}" is too large to {verb}: {size} bytes, over the limit of {max_bytes} bytes'
        )
    data = read_fd(fd, max_bytes + 1)
    if len(data) > max_bytes:
        raise ToolError(f'"{display}" is too large to {verb}: over the limit of {max_bytes} bytes')
    if is_binary(data):
        raise ToolError(
            f'"{display}" is a binary file (it has NUL bytes in its first 8 KiB); '
            f"cannot {verb} it as text"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if verb != "read":
            raise ToolError(
                f'"{display}" is not valid UTF-8 text (byte {error.start}); cannot {verb} it'
            ) from None
        return data.decode("utf-8", errors="replace")


def before_image(opened: Opened, max_bytes: int) -> str | None:
    """The file's text as a diff shows it before a change, or ``None`` when it has none
    to show (just created, too large, binary, not UTF-8)."""
    if opened.created or opened.stat.st_size > max_bytes:
        return None
    try:
        return read_text(opened.fd, opened.display, opened.stat.st_size, max_bytes, "diff")
    except ToolError:
        return None


def write_all(fd: int, data: bytes) -> None:
    """Replace the whole content of the file open at ``fd`` with ``data``."""
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
