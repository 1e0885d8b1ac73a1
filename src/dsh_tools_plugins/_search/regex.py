"""Linear-time regular expressions for patterns a model supplies: RE2, via google-re2.

Python's ``re`` backtracks: ``(.*.*)*z`` on one 16-character line ran for 30 s holding the
GIL, so neither a timeout nor a cancellation could stop it, and a glob compiled to a
regex did the same on a 60-character name. RE2 matches in time linear in the text (times
the size of the pattern), bounds the memory a pattern may take, and releases the GIL
while it searches. The size that counts is the compiled program's, not the pattern's
text: ``x{2,30}`` holds 30 copies of ``x``, so nested counts multiply
(``((a|a){2,30}){2,30}$`` is 20 characters and 1,800 steps, and takes 0.13 s on one line
of 5,000 ``a``, where a plain pattern takes 0.1 ms): where RE2 cannot keep its
automaton, a search looks at every step for each byte, about 14 ns a step on a slow
2-core machine. A large pattern (a Unicode class is one too: ``\\pL`` is 1,200 steps)
is fine where the automaton holds, which is almost everywhere, so none is refused for
its size below RE2's memory bound; a large one searches in smaller chunks instead, so
that a cancelled search still stops soon. Two uses here:

* grep patterns (:func:`compile_line_pattern`, :func:`matching_lines`): RE2 syntax, a
  match never spans lines, searched over a whole file buffer in chunks that end at line
  ends, so a cancelled call stops between chunks;
* path patterns (:func:`compile_path_regex`): the regex a glob translates to.

google-re2 is imported on first use: ``import dsh_tools`` stays light.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

from dsh_tools.errors import ToolArgsError

__all__ = [
    "CHUNK_BYTES",
    "MAX_PATTERN_MEMORY",
    "LineRegex",
    "Token",
    "compile_line_pattern",
    "compile_path_regex",
    "escape_tokens",
    "literal_finder",
    "matching_lines",
    "required_literal",
    "tokens",
]

MAX_PATTERN_MEMORY = 4 * 1024 * 1024
"""Memory one compiled pattern may use (RE2's ``max_mem``), its search automaton
included; a larger pattern is refused as too large."""

CHUNK_BYTES = 256 * 1024
"""A file buffer is searched in chunks of about this size, ending at a line end; the
call's signal is checked between chunks. A pattern larger than
:data:`_SMALL_PROGRAM_SIZE` steps searches in chunks as much smaller as it is larger
(9 KiB at 1,800 steps), so RE2's slowest path covers one in about 0.25 s."""

_SMALL_PROGRAM_SIZE = 64
"""The size up to which a pattern searches in whole :data:`CHUNK_BYTES` chunks."""

_UNSUPPORTED_HINTS = (
    ("invalid perl operator: (?=", "lookahead is not supported"),
    ("invalid perl operator: (?!", "lookahead is not supported"),
    ("invalid perl operator: (?<=", "lookbehind is not supported"),
    ("invalid perl operator: (?<!", "lookbehind is not supported"),
    ("invalid perl operator: (?P=", "backreferences are not supported"),
    ("invalid escape sequence: \\Z", "use \\z for the end of the text"),
)


def _options(*, case_insensitive: bool = False, never_nl: bool = False) -> Any:
    import re2  # type: ignore[import-untyped]

    options = re2.Options()
    options.max_mem = MAX_PATTERN_MEMORY
    options.log_errors = False
    options.case_sensitive = not case_insensitive
    options.never_nl = never_nl
    return options


def _explain(message: str) -> str:
    """RE2's error message, with a hint for the Python ``re`` features RE2 lacks."""
    message = message.replace(": (?m)", ": ", 1)  # the line-mode prefix is ours
    for start, hint in _UNSUPPORTED_HINTS:
        if message.startswith(start):
            return f"{message} ({hint} in RE2 syntax)"
    if message.startswith("invalid escape sequence: \\") and message[-1:].isdigit():
        return f"{message} (backreferences are not supported in RE2 syntax)"
    return message


class Token(NamedTuple):
    """One token of an RE2 pattern (see :func:`tokens`); ``code`` is a literal's character."""

    kind: str
    text: str
    code: int = -1

    @property
    def folds_case(self) -> bool:
        """Whether this flag setting or group opening turns case-insensitive matching on."""
        if self.kind not in ("flags", "open") or not self.text.startswith("(?"):
            return False
        return "<" not in self.text and "i" in self.text[2:].split("-")[0]


_CONTROL_ESCAPES = {"t": 9, "n": 10, "r": 13, "f": 12, "v": 11, "a": 7}
_COUNTED = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}\??")
_GROUP = re.compile(r"\((?:\?(?::|P?<[^>]*>|[imsU-]*[:)]))?")


def tokens(pattern: str) -> list[Token]:
    """The tokens of ``pattern``, which must already compile under RE2. Kinds:

    ``literal`` (one character: plain, escaped, ``\\x..``, ``\\t``..., each one inside
    ``\\Q...\\E``), ``perl`` (``\\d \\w \\s`` and negations), ``unicode`` (``\\pL``,
    ``\\p{Greek}``), ``assertion`` (``^ $ \\b \\B \\A \\z``), ``dot``, ``class`` (a whole
    ``[...]``), ``open`` (any group opening), ``flags`` (``(?i)``), ``close``, ``alt``,
    ``quantifier`` (with its lazy ``?``) and ``other`` (octal escapes, ``\\C``).
    """
    found: list[Token] = []
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            token, index = escape_tokens(pattern, index)
            found.extend(token)
            continue
        if char == "[":
            end = _class_end(pattern, index)
            found.append(Token("class", pattern[index:end]))
            index = end
            continue
        if char == "(":
            group = _GROUP.match(pattern, index)
            assert group is not None
            text = group.group()
            found.append(Token("flags" if text.endswith(")") else "open", text))
            index = group.end()
            continue
        counted = _COUNTED.match(pattern, index) if char == "{" else None
        if counted is not None:
            found.append(Token("quantifier", counted.group()))
            index = counted.end()
            continue
        if char in "*+?":
            lazy = pattern[index + 1 : index + 2] == "?"
            found.append(Token("quantifier", pattern[index : index + 1 + lazy]))
            index += 1 + lazy
            continue
        kind = {")": "close", "|": "alt", ".": "dot", "^": "assertion", "$": "assertion"}
        found.append(Token(kind.get(char, "literal"), char, ord(char)))
        index += 1
    return found


def escape_tokens(pattern: str, index: int) -> tuple[list[Token], int]:
    """The token(s) of the escape at ``index`` (several for ``\\Q...\\E``) and the index
    after it."""
    char = pattern[index + 1 : index + 2]
    after = index + 2
    if char in ("d", "w", "s", "D", "W", "S"):
        return [Token("perl", "\\" + char)], after
    if char in ("b", "B", "A", "z"):
        return [Token("assertion", "\\" + char)], after
    if char in ("p", "P"):
        end = pattern.index("}", after) + 1 if pattern[after : after + 1] == "{" else after + 1
        return [Token("unicode", pattern[index:end])], end
    if char == "x":
        if pattern[after : after + 1] == "{":
            end = pattern.index("}", after) + 1
            digits = pattern[after + 1 : end - 1]
        else:
            end, digits = after + 2, pattern[after : after + 2]
        return [Token("literal", pattern[index:end], int(digits, 16))], end
    if char in _CONTROL_ESCAPES:
        return [Token("literal", "\\" + char, _CONTROL_ESCAPES[char])], after
    if char == "Q":
        end = pattern.find("\\E", after)
        end = len(pattern) if end < 0 else end
        quoted = [Token("literal", c, ord(c)) for c in pattern[after:end]]
        return quoted, min(end + 2, len(pattern))
    if char.isascii() and not char.isalnum():
        return [Token("literal", "\\" + char, ord(char))], after
    return [Token("other", "\\" + char)], after


def _class_end(pattern: str, index: int) -> int:
    """The index after the character class that starts at ``index``."""
    index += 1
    if pattern[index : index + 1] == "^":
        index += 1
    if pattern[index : index + 1] == "]":
        index += 1  # a leading ] is a member
    while pattern[index] != "]":
        if pattern.startswith("[:", index):
            index = pattern.index(":]", index) + 2
        else:
            index += 2 if pattern[index] == "\\" else 1
    return index + 1


def required_literal(pattern: str, *, case_insensitive: bool) -> bytes | None:
    """A run of characters (3 or more) every match of ``pattern`` contains, or ``None``.

    Read from the top level only: no top-level ``|``; each literal not made optional by
    its quantifier extends the current run, anything else ends it; group contents are
    not looked into. Case-insensitive matching anywhere rules it out. grep finds this
    run with ``bytes.find`` and asks RE2 only about the lines holding it: RE2 itself has
    no such shortcut for, say, ``^class \\w+Handler\\(``.
    """
    if case_insensitive:
        return None
    found = tokens(pattern)
    runs: list[str] = []
    run: list[str] = []
    depth = 0
    for index, token in enumerate(found):
        if token.kind == "flags" and token.folds_case:
            return None
        if token.kind == "alt" and depth == 0:
            return None
        depth += (token.kind == "open") - (token.kind == "close")
        if token.kind == "quantifier":
            continue  # read with the token it applies to
        after = found[index + 1] if index + 1 < len(found) else None
        following = after.text if after is not None and after.kind == "quantifier" else ""
        optional = following[:1] in ("*", "?") or following.startswith("{0")
        required = depth == 0 and token.kind == "literal" and token.code != 0x0A and not optional
        if required:
            run.append(chr(token.code))
        if not required or following[:1] in ("+", "{"):  # a repeated literal ends a run
            runs.append("".join(run))
            run = []
    runs.append("".join(run))
    longest = max(runs, key=len)
    return longest.encode("utf-8") if len(longest) >= 3 else None


_COMMON_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789 \t\r_.,:;=()[]{}'\"-+*/#")
"""Bytes most lines of source code and prose hold (lower case, digits, spaces, the usual
punctuation); any other byte (upper case, rarer punctuation, non-ASCII) is taken as rare."""

_RARE_PIECE_BYTES = 32
"""The most of a literal RE2 looks for from its rare byte: enough to pass over few false
hits, small enough that RE2's automaton stays tiny however long the literal."""


def _first_match(regex: Any) -> Callable[[bytes, int, int], int]:
    """Where ``regex``'s first match in ``data[start:end]`` begins, -1 for none.

    google-re2's public ``search`` costs about 10 us per call in Python glue (a generator,
    an enum lookup, a match object) against 1 us for RE2 itself, and grep calls it once
    per file and per matching line: so this calls the wrapped ``RE2.Match`` directly, or
    falls back to ``search`` should a google-re2 release rename it.
    """
    import re2

    try:
        match, anchor = regex._regexp.Match, re2._Anchor.UNANCHORED
    except AttributeError:

        def first(data: bytes, start: int, end: int) -> int:
            found = regex.search(data, start, end)
            return -1 if found is None else int(found.start())

        return first
    return lambda data, start, end: int(match(anchor, data, start, end)[0][0])


def literal_finder(literal: bytes) -> Callable[[bytes, int, int], int]:
    """Where, in ``data[start:end]``, a piece of ``literal`` (3 bytes or more) first
    occurs (-1 for none): so any occurrence of ``literal`` lies on a line it finds.

    ``bytes.find`` reads about 2 GB/s whatever the text. RE2 finds a literal by
    ``memchr`` of its first byte, several times faster when that byte is rare in the text
    and slower when it is common. So a literal holding a rare byte (not in
    :data:`_COMMON_BYTES`) at least 3 bytes from its end is looked for from that byte on
    (at most :data:`_RARE_PIECE_BYTES` of it) by RE2, as bytes (Latin-1, a plain
    literal); any other literal by ``bytes.find``.
    """
    import re2

    rare = next(
        (index for index, byte in enumerate(literal[:-2]) if byte not in _COMMON_BYTES), None
    )
    if rare is None:
        return lambda data, start, end: data.find(literal, start, end)
    options = _options()
    options.literal = True
    options.never_capture = True
    options.encoding = re2.Options.Encoding.LATIN1
    return _first_match(re2.compile(literal[rare : rare + _RARE_PIECE_BYTES], options))


class LineRegex:
    """A compiled grep pattern; :attr:`first` finds where its first match in a range of
    a buffer begins (-1 for none). ``^``, ``$`` and ``\\b`` see the whole buffer.

    :attr:`required` is the pattern's :func:`required_literal`, if any, and
    :attr:`find_required` its :func:`literal_finder` (setting the one sets the other).
    """

    __slots__ = (
        "_required",
        "case_insensitive",
        "find_required",
        "first",
        "program_size",
        "source",
    )

    def __init__(
        self,
        source: str,
        case_insensitive: bool,
        regex: Any,
        required: bytes | None = None,
        program_size: int = 0,
    ) -> None:
        self.source = source
        self.case_insensitive = case_insensitive
        self.first = _first_match(regex)
        self.required = required
        self.program_size = program_size
        """How many steps the pattern compiled to (sizes its search chunks)."""

    def chunk_bytes(self) -> int:
        """How much of a buffer to search between two looks at the call's signal."""
        larger = max(self.program_size, _SMALL_PROGRAM_SIZE)
        return max(1, CHUNK_BYTES * _SMALL_PROGRAM_SIZE // larger)

    @property
    def required(self) -> bytes | None:
        return self._required

    @required.setter
    def required(self, literal: bytes | None) -> None:
        self._required = literal
        self.find_required = None if literal is None else literal_finder(literal)

    def may_match(self, data: bytes) -> bool:
        """False when no line of ``data`` can match (one quick look at the whole buffer)."""
        if self.find_required is not None:
            return self.find_required(data, 0, len(data)) >= 0
        return self.first(data, 0, len(data)) >= 0


def compile_line_pattern(pattern: str, *, case_insensitive: bool) -> LineRegex:
    """Compile a grep ``pattern`` (RE2 syntax) for :func:`matching_lines`.

    ``^`` and ``$`` match at line boundaries, and nothing in the pattern matches a
    newline (``\\n``, ``\\s`` or ``[^a]`` included), so every match lies within one line.
    Raises :class:`~dsh_tools.errors.ToolArgsError` naming the problem for a pattern RE2
    refuses (backreferences, lookaround, a bad class, too large), for ``\\C`` and for
    text that is not valid Unicode.
    """
    import re2

    def refuse(reason: str) -> ToolArgsError:
        return ToolArgsError(
            [f'"pattern" is not a valid regular expression (RE2 syntax): {reason}']
        )

    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise refuse("it is not valid Unicode text") from None
    options = _options(case_insensitive=case_insensitive, never_nl=True)
    options.never_capture = True  # grep needs where a match is, not its groups: faster
    try:
        regex = re2.compile(b"(?m)" + encoded, options)
    except re2.error as error:
        raise refuse(_explain(_error_text(error))) from None
    if Token("other", "\\C") in tokens(pattern):
        raise refuse("\\C (any single byte) is not supported")
    required = required_literal(pattern, case_insensitive=case_insensitive)
    return LineRegex(pattern, case_insensitive, regex, required, int(regex.programsize))


def compile_path_regex(regex: str, pattern: str, argument: str) -> Any:
    """Compile the RE2 ``regex`` that the glob ``pattern`` translates to.

    Match paths with ``fullmatch``. Raises :class:`~dsh_tools.errors.ToolArgsError`
    naming ``argument`` and the glob when RE2 refuses the translation (a malformed
    character class, for example). ``regex`` is ASCII: the translation escapes the rest.
    """
    import re2

    try:
        return re2.compile(regex, _options())
    except re2.error as error:
        raise ToolArgsError(
            [f'"{argument}": "{pattern}" is not a valid glob pattern: {_error_text(error)}']
        ) from None


def _error_text(error: Exception) -> str:
    detail = error.args[0] if error.args else str(error)
    if isinstance(detail, bytes):
        return detail.decode("utf-8", errors="replace")
    return str(detail)


def matching_lines(
    regex: LineRegex, data: bytes, keep: int, stop: Callable[[], bool]
) -> tuple[list[tuple[int, bytes]], int]:
    """The first ``keep`` lines of ``data`` that ``regex`` matches, as ``(number, line)``,
    and how many lines match in all.

    Lines end at ``\\n`` (a ``\\r`` before it is dropped from the line shown); an empty
    buffer has no lines, and a final ``\\n`` does not start one. ``stop`` is polled
    between chunks (:meth:`LineRegex.chunk_bytes`); once it returns true, the search ends
    there.
    Lines past ``keep`` are only counted, which costs a third as much. With a required
    literal, RE2 looks only at the lines that hold it.
    """
    locate = _line_locator(regex, data)
    text_end = len(data) - (data[-1:] == b"\n")
    kept: list[tuple[int, bytes]] = []
    count, number, counted, start = 0, 1, 0, 0
    chunk = regex.chunk_bytes()
    while start <= text_end and data:
        end = text_end
        if end - start > chunk:
            end = data.find(b"\n", start + chunk, text_end)
            end = text_end if end < 0 else end
        position = start
        while position <= end and count < keep:
            at = locate(position, end)
            if at < 0:
                break
            line_start = data.rfind(b"\n", 0, at) + 1
            line_end = data.find(b"\n", at, end)
            line_end = end if line_end < 0 else line_end
            number += data.count(b"\n", counted, line_start)
            counted = line_start
            line = data[line_start:line_end]
            kept.append((number, line[:-1] if line[-1:] == b"\r" else line))
            count += 1
            position = line_end + 1
        count += _count_rest(locate, data, position, end)  # past keep: count only
        start = end + 1
        if start <= text_end and stop():
            break
    return kept, count


def _line_locator(regex: LineRegex, data: bytes) -> Callable[[int, int], int]:
    """A function giving a position in the first line of ``data[position:end]`` that
    ``regex`` matches, or -1; with a required literal, RE2 looks only at the lines that
    hold it."""
    first, find_required = regex.first, regex.find_required
    if find_required is None:
        return lambda position, end: first(data, position, end)

    def locate(position: int, end: int) -> int:
        while True:
            hit = find_required(data, position, end)
            if hit < 0:
                return -1
            line_start = data.rfind(b"\n", 0, hit) + 1
            line_end = data.find(b"\n", hit, end)
            line_end = end if line_end < 0 else line_end
            if first(data, line_start, line_end) >= 0:
                return hit
            position = line_end + 1

    return locate


def _count_rest(locate: Callable[[int, int], int], data: bytes, position: int, end: int) -> int:
    """How many lines of ``data[position:end]`` match, found by ``locate``."""
    count = 0
    while position <= end:
        at = locate(position, end)
        if at < 0:
            break
        count += 1
        position = data.find(b"\n", at, end) + 1 or end + 1
    return count
