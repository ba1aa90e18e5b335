"""Errors that point at the user's source line."""

import linecache
import re


class TilecError(RuntimeError):
    """Bad input to tilec's flash_attn-compatible API (flash_attn_func and
    its packed, varlen and kv-cache forms, their backward): a RuntimeError,
    as flash_attn's C++ checks (TORCH_CHECK) raise, so code written against
    flash_attn that catches RuntimeError keeps working. The two subclasses
    are also ValueError / TypeError, so ``except ValueError`` works too."""


class TilecValueError(TilecError, ValueError):
    """A value outside its allowed range (the message names both)."""


class TilecTypeError(TilecError, TypeError):
    """An argument of the wrong type, dtype or device."""


class CompilationError(Exception):
    """A kernel failed to compile. ``filename``/``lineno``/``col`` locate the
    first error in the user's Python (or MLIR) source; ``str(e)`` quotes the
    line with a caret under the offending column."""

    def __init__(self, message, filename=None, lineno=None, col=None, notes=()):
        self.message = message
        self.filename = filename
        self.lineno = lineno
        self.col = col
        self.notes = list(notes)
        super().__init__(self._render())

    def _render(self):
        out = []
        if self.filename and self.lineno:
            out.append(f"{self.filename}:{self.lineno}:{self.col or 1}: error: {self.message}")
            out.extend(_quote(self.filename, self.lineno, self.col))
        else:
            out.append(self.message)
        for note in self.notes:
            out.append(note)
        return "\n".join(out)


def _quote(filename, lineno, col):
    line = linecache.getline(filename, lineno)
    if not line:
        return []
    line = line.rstrip("\n")
    caret = " " * max((col or 1) - 1, 0) + "^"
    return ["    " + line, "    " + caret]


# "<file>:<line>:<col>: error: <message>" as printed by MLIR's SourceMgr
# diagnostic handler for FileLineColLoc locations.
_DIAG = re.compile(r"^(?P<file>[^\n]*?):(?P<line>\d+):(?P<col>\d+): "
                   r"(?P<sev>error|warning|note|remark): (?P<msg>.*)$")


def from_diagnostics(text, fallback="compilation failed"):
    """Turns MLIR diagnostic text into a CompilationError at the first error's
    location, quoting the source line of it and of every note."""
    first = None
    notes = []
    for raw in text.splitlines():
        m = _DIAG.match(raw.strip())
        if not m:
            continue
        entry = (m["file"], int(m["line"]), int(m["col"]), m["sev"], m["msg"])
        if first is None and entry[3] == "error":
            first = entry
        elif first is not None:
            where = f"{entry[0]}:{entry[1]}:{entry[2]}: {entry[3]}: {entry[4]}"
            notes.append("\n".join([where] + _quote(entry[0], entry[1], entry[2])))
    if first is None:
        return CompilationError(text.strip() or fallback)
    return CompilationError(first[4], first[0], first[1], first[2], notes)
