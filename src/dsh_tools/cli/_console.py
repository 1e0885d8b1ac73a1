"""What the ``dsh-tools`` command needs from a terminal to behave like a Unix tool.

* Text that is not valid Unicode (a lone surrogate from a file name, from ``"\\ud800"``
  in JSON, or from a command-line argument that is not UTF-8) is written with U+FFFD,
  the project's one rule for such text, instead of ending the program with
  ``UnicodeEncodeError``.
* The library's log records (logger ``dsh_tools``) become ``dsh-tools: warning: ...``
  lines, each message on one line and made safe to show
  (:func:`~dsh_tools._safetext.safe_text`); their tracebacks are shown only with
  ``--debug``.
* When the reader of standard output goes away (``dsh-tools list | head -1``) the
  program stops quietly, as one stopped by ``SIGPIPE`` would.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import Final, TextIO

from .._json import unicode_text
from .._safetext import safe_text

__all__ = [
    "EXIT_OUTPUT_CLOSED",
    "json_text",
    "library_log",
    "output_closed",
    "show_unicode_safely",
]

EXIT_OUTPUT_CLOSED: Final = 141
"""128 + SIGPIPE: the status a shell reports for a program stopped by a closed pipe."""

_ERRORS: Final = "dsh-tools-unicode"


def _unicode_or_escaped(error: UnicodeError) -> tuple[str | bytes, int]:
    """Codec error handler: lone surrogates as U+FFFD, any other unencodable character as
    a backslash escape (for a terminal whose encoding lacks it).

    The replacement is returned encoded: the UTF-8 encoder takes only ASCII text back.
    """
    if not isinstance(error, UnicodeEncodeError):
        raise error
    shown = unicode_text(error.object[error.start : error.end])
    try:
        return shown.encode(error.encoding), error.end
    except UnicodeEncodeError:
        return codecs.backslashreplace_errors(error)


def show_unicode_safely(*streams: TextIO) -> None:
    """Make the real standard streams write lone surrogates as U+FFFD."""
    codecs.register_error(_ERRORS, _unicode_or_escaped)
    for stream in streams:
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors=_ERRORS)


def output_closed() -> int:
    """After ``BrokenPipeError`` on standard output: send what is still buffered nowhere,
    so that exiting prints no second error, and return :data:`EXIT_OUTPUT_CLOSED`."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_OUTPUT_CLOSED


class _OneLine(logging.Formatter):
    def __init__(self, debug: bool) -> None:
        super().__init__()
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        # Messages quote tool names, reasons and answers a model or a client chose.
        line = f"dsh-tools: {record.levelname.lower()}: {safe_text(record.getMessage())}"
        if self.debug and record.exc_info:
            trace = self.formatException(record.exc_info).rstrip("\n")
            line += "\n" + safe_text(trace, multiline=True)
        return line


@contextlib.contextmanager
def library_log(err: TextIO, debug: bool) -> Iterator[None]:
    """While the command runs, show the ``dsh_tools`` logger's records on ``err``: warnings
    and worse as one line each, and with ``debug`` DEBUG records and tracebacks too."""
    logger = logging.getLogger("dsh_tools")
    level = logging.DEBUG if debug else logging.WARNING
    handler = logging.StreamHandler(err)
    handler.setLevel(level)
    handler.setFormatter(_OneLine(debug))
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def json_text(data: object, indent: int | None = 2) -> str:
    """``data`` as JSON text and a newline (indented, or on one line with ``indent=None``),
    non-ASCII characters as they are; when a string in it holds a character that would
    act on a terminal (which JSON does not escape: DEL, C1 controls, bidi controls), every
    non-ASCII character is written as a ``\\u`` escape instead. Either way the JSON holds
    the same data."""
    text = json.dumps(data, indent=indent, ensure_ascii=False) + "\n"
    if safe_text(text, multiline=True) == text:
        return text
    return json.dumps(data, indent=indent) + "\n"
