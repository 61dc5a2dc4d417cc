"""MariaDB's slow query log (file output) -> statements with their timings.

With `long_query_time=0` every statement is logged, after it completes, as
    # Time: 261121 17:18:31            (only when the second changed)
    # User@Host: user[user] @ localhost [127.0.0.1]
    # Thread_id: 5  Schema: wp  QC_hit: No
    # Query_time: 0.000104  Lock_time: 0.000000  Rows_sent: 1  Rows_examined: 0
    # Rows_affected: 0  Bytes_sent: 58
    use `wp`;                           (when the connection's database changed)
    SET timestamp=1795281511;           (also `SET insert_id=7,timestamp=...;` and the like)
    select 1;
The statement is written as the client sent it (leading and trailing blanks and `;` taken off by
the server), then `;` and a newline. The server writes a three-line banner when it (re)opens the
file. With `log_slow_verbosity=query_plan` (what the capture sets) a statement that ran a plan
also has
    # Full_scan: Yes  Full_join: No  Tmp_table: Yes  Tmp_table_on_disk: No
    # Filesort: Yes  Filesort_on_disk: No  Merge_passes: 0  Priority_queue: No
whose Yes flags become `plan`. The server prints those lines only when a flag is set, so
with `plans=True` (the capture turned query_plan on) an entry without them has no flag (`[]`);
otherwise it is unknown (None).

Telling a statement's text from an entry header
    The server writes no length: a statement's text may hold anything, newlines and lines that
    read like a header (`# Time:`, `# User@Host:`, `# Query_time: 1980.0 ...`, `SET timestamp=1;`)
    included, and a parser that starts an entry at every such line takes invented durations from
    a statement's text (issue 29: a "1980000.0 ms" class in `analyze`). So the text is read as
    SQL, the way the server's own lexer reads it, and an entry starts only where the text before
    it is a finished statement:

    - the line before ends with `;` and, reading the statement's text from its start, that `;`
      is outside any string literal ('...', "..."), quoted identifier (`...`) and comment
      (/* ... */, executable /*! ... */ included); the server's parser ends a statement there:
      what follows in the same text can only be comments (a statement with more after a `;` is
      a multi-statement, which the server splits and logs statement by statement, or a syntax
      error);
    - and the lines from there are a whole header: `# User@Host:`, its `# ` field lines with
      Thread_id, Query_time, Rows_sent and Rows_examined, `use` (optional), then
      `SET ...timestamp=N;` (MariaDB always writes it; a header without it, from a log written
      by hand, is taken only when SQL that is not a comment follows), and at least one line of
      text, the first of which is text whatever it looks like.
    The `;` the server adds after a text that ends in a `#` or `-- ` comment falls inside that
    comment: such a line also ends a statement, but only when a whole MariaDB header (with its
    SET line) follows and is the real one (`_Reader.real`). A header read in the text of a
    statement the server accepted is whole only as that statement's last SQL (its SET line is
    SQL, and after a `;` only comments may follow), so what follows it is comments of the same
    statement or the next real header; and a real entry's text holds SQL that is not a comment
    (the server refuses a text of comments alone, "Query was empty"). When headers follow one
    another, each as the first text line of the one before, real and false ones alternate, and
    the last is real when its text holds SQL before it ends.

    Lexing the text needs the session's sql_mode: NO_BACKSLASH_ESCAPES makes `\\` an ordinary
    character in strings, ANSI_QUOTES makes "..." an identifier. The parser follows
    `SET [SESSION] sql_mode = ...` statements per connection (thread id) in the log, from the
    server defaults given (`backslash_escapes`, `ansi_quotes`).

    Decision: the boundary rests on MariaDB's own grammar and needs nothing from the
    application. lockdown's markers (`lockdown-capture` in the prepend's statement,
    `lockdown-admin` in its own settings statements) only mark lockdown's statements: the
    application's texts carry no marker that would bound them, and a text can copy any marker.
    Nor does the header's shape suffice alone: a text can copy a whole header, `SET timestamp=`
    line and all. What this guarantees: a statement the server accepted -- whatever its string
    literals, quoted identifiers and comments hold, header lines, banners, `\\r` and all, and
    wherever its comment lines stand -- is one entry with its own header's numbers, provided its
    session's sql_mode is known (above) and its text is not in a multi-byte character set whose
    characters can hold the byte of `\\` or a quote (big5, cp932, gbk, sjis). What it does not: a
    statement the server refused as a syntax error can hold, as SQL outside literals and
    comments, a `;` followed by a whole header and text, and be read as two entries; a refused
    statement whose text never closes a string makes the entries after it part of its text
    until one does (when the file ends inside it, the statement is cut at the first header that
    followed a `;`, and reading resumes there). A file that is no MariaDB slow log (text outside
    any entry, a whole header that lacks a field) raises SlowLogError, and nothing else.

Lines end with `\\n` only (a `\\r` belongs to the statement text): a file opened with Python's
universal newlines is switched to `\\n` before it is read (`TextIOWrapper.reconfigure`).
"""
from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Iterable, Iterator

_BANNER = (re.compile(r"^\S+, Version: "), re.compile(r"^Tcp port: "), re.compile(r"^Time\s+Id\s+Command"))
_FIELD = re.compile(r"(\w+): (\S*)")
_TIME = re.compile(r"^# Time: \S")
_USER_HOST = "# User@Host: "
_USE = re.compile(r"^use (?:`(?:[^`]|``)*`|[^\s;`]+);$")
_SET_TIMESTAMP = re.compile(r"^SET (?:\w+=-?\d+,)*timestamp=(\d+);$")
_REQUIRED = ("Thread_id", "Query_time", "Rows_sent", "Rows_examined")
_BLANK = " \t\n\r\v\f"        # what the server strips around a statement's text
SERVER_VERSION_ID = 101199    # /*!NNNNN ... */ with a higher version is a plain comment


class SlowLogError(ValueError):
    """The file is not a MariaDB slow log in the shape lockdown configured."""


@dataclass(slots=True)
class SlowLogEntry:
    line: int                 # line number of the entry's first header line
    user_host: str
    thread_id: int
    schema: str
    query_time_us: int
    lock_time_us: int
    rows_sent: int
    rows_examined: int
    rows_affected: int | None
    timestamp: int | None     # statement start, whole seconds (Unix time)
    sql: str
    plan: list[str] | None = None   # the server's plan flags that were Yes (PLAN_FLAGS), lower case


# log_slow_verbosity=query_plan's flags, in the order the server prints them
PLAN_FLAGS = ("Full_scan", "Full_join", "Tmp_table", "Tmp_table_on_disk", "Filesort", "Filesort_on_disk")


def plan_of(fields: dict, plans: bool = False) -> list[str] | None:
    """The Yes flags of an entry's query-plan lines; without them, [] when the log has plan
    lines for every flagged statement (`plans`), else None (unknown)."""
    if not any(f in fields for f in PLAN_FLAGS):
        return [] if plans else None
    flags = [f.lower() for f in PLAN_FLAGS if fields.get(f) == "Yes"]
    if fields.get("Merge_passes", "0") not in ("0", ""):
        flags.append("merge_passes")
    return flags


def _us(value: str) -> int:
    return round(float(value) * 1_000_000)


# ------------------------------------------------------------------------------------------
# SQL lexing, one line at a time
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Mode:
    """What of a session's sql_mode changes how its text is lexed."""
    backslash_escapes: bool = True     # not NO_BACKSLASH_ESCAPES
    ansi_quotes: bool = False          # "..." is an identifier


# Lexer state between lines: (open construct or "", executable-comment depth). The open
# construct is "'", '"' (a string, or an identifier under ANSI_QUOTES), "`" or "/*".
TOP = ("", 0)
_CODE = re.compile(r"['\"`#]|/\*|--(?=[\s\x00-\x1f]|$)")
_CODE_IN_EXEC = re.compile(r"['\"`#]|/\*|\*/|--(?=[\s\x00-\x1f]|$)")
_EXEC = re.compile(r"/\*M?!(\d{0,6})")
_CLOSE = {("'", True): re.compile(r"[\\']"), ("'", False): re.compile(r"'"),
          ('"', True): re.compile(r'[\\"]'), ('"', False): re.compile(r'"'),
          ("`", True): re.compile(r"`"), ("`", False): re.compile(r"`"),
          ("/*", True): re.compile(r"\*/"), ("/*", False): re.compile(r"\*/")}


def lex_line(line: str, state: tuple[str, int], mode: Mode) -> tuple[tuple[str, int], str | None, bool]:
    """Read one line of statement text from `state`: (the state after it, where its last
    character is if it is `;` -- "top" in SQL, "comment" in a `#`/`-- ` comment, None
    otherwise --, whether it holds SQL other than comments, blanks and `;`)."""
    inside, depth = state
    pos, n, code = 0, len(line), False
    ends = None
    while pos < n:
        if inside:
            escapes = mode.backslash_escapes and inside == "'" or (
                inside == '"' and mode.backslash_escapes and not mode.ansi_quotes)
            m = _CLOSE[(inside, escapes)].search(line, pos)
            if m is None:
                return (inside, depth), None, code
            c = m.group()
            if c == "\\":
                pos = m.end() + 1                 # the escaped character (the newline, at the end)
                continue
            if c in "'\"`" and line.startswith(c, m.end()):
                pos = m.end() + 1                 # doubled quote: still inside
                continue
            inside, pos = "", m.end()
            continue
        m = (_CODE_IN_EXEC if depth else _CODE).search(line, pos)
        stop = m.start() if m else n
        if line[pos:stop].strip(_BLANK + ";"):       # a `;` alone is no statement
            code = True
        if m is None:
            break
        t = m.group()
        if t in ("'", '"', "`"):
            code = True
            inside, pos = t, m.end()
        elif t == "#" or t.startswith("--"):
            if line.endswith(";") and not depth:
                ends = "comment"
            return (inside, depth), ends, code
        elif t == "*/":
            depth, pos = depth - 1, m.end()
        else:                                     # "/*"
            ex = _EXEC.match(line, m.start())
            if ex and (not ex.group(1) or int(ex.group(1)) <= SERVER_VERSION_ID):
                code = True
                depth, pos = depth + 1, ex.end()
            else:
                inside, pos = "/*", m.end()
    if not inside and not depth and line.endswith(";"):
        ends = "top"
    return (inside, depth), ends, code


def _sql_mode_after(sql: str, mode: Mode, default: Mode) -> Mode:
    """A session's mode after its statement `sql`: `SET [SESSION|LOCAL] sql_mode = ...` or
    `SET @@[session.]sql_mode = ...` (alone or among other assignments) changes it."""
    m = re.match(r"\s*SET\b(.*)", sql, re.I | re.S)
    if not m:
        return mode
    for target, value in re.findall(r"((?:@@(?:session\.|local\.|global\.)?|(?:session|local|global)\s+)?"
                                    r"sql_mode)\s*:?=\s*('(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|.+)",
                                    m.group(1), re.I | re.S):
        if "global" in target.lower():
            continue
        v = value.strip().upper()
        if v.startswith(("'", '"')):
            modes = {w.strip() for w in v[1:-1].split(",")}
            ansi = bool(modes & {"ANSI_QUOTES", "ANSI", "DB2", "MAXDB", "MSSQL", "ORACLE", "POSTGRESQL"})
            mode = Mode(backslash_escapes="NO_BACKSLASH_ESCAPES" not in modes, ansi_quotes=ansi)
        elif v == "DEFAULT":
            mode = default
        elif "NO_BACKSLASH_ESCAPES" in v:         # CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES') / REPLACE(...)
            mode = Mode(backslash_escapes="REPLACE" in v, ansi_quotes=mode.ansi_quotes)
    return mode


# ------------------------------------------------------------------------------------------
# entries
# ------------------------------------------------------------------------------------------

@dataclass(slots=True)
class _Header:
    start: int                 # index of the User@Host line
    user_host: str
    fields: dict
    timestamp: int | None
    text: int                  # index of the first text line
    full: bool                 # has the SET line MariaDB always writes


def _banner_at(lines: list[str], i: int) -> bool:
    return i + 3 <= len(lines) and all(p.match(lines[i + k]) for k, p in enumerate(_BANNER))


def _header_at(lines: list[str], i: int, source: str, strict: bool, mode: Mode) -> _Header | None:
    """The header starting at line i, when the lines from i are one (see the module docstring);
    None when they are not. `strict`: a whole MariaDB header (SET line included) that lacks a
    field or has one that is no number raises SlowLogError, else it is no header either."""
    n = len(lines)
    j = i + 1 if i < n and _TIME.match(lines[i]) else i
    if j >= n or not lines[j].startswith(_USER_HOST):
        return None
    start = j
    j += 1
    fields: dict = {}
    while j < n and (lines[j].startswith("# ") or lines[j] == "#"):
        if lines[j].startswith(_USER_HOST) or _TIME.match(lines[j]):
            return None
        if not lines[j].startswith("# explain:"):
            fields.update(_FIELD.findall(lines[j]))
        j += 1
    if j < n and _USE.match(lines[j]):
        j += 1
    timestamp = None
    full = j < n and _SET_TIMESTAMP.match(lines[j]) is not None
    if full:
        timestamp = int(_SET_TIMESTAMP.match(lines[j]).group(1))
        j += 1
    if j >= n or not lines[j]:
        return None                 # no text (the server strips blanks off a statement and adds
                                    # `;`): not an entry (a file cut short, or text like one)
    if not full and not lex_line(lines[j], TOP, mode)[2]:
        return None                 # a header by hand must be followed by SQL, not a comment
    missing = [f for f in _REQUIRED if f not in fields]
    if missing or not _numbers_ok(fields):
        if strict and full:
            what = f"entry without {missing[0]}" if missing else f"a number field is not a number: {fields}"
            raise SlowLogError(f"{source} line {start + 1}: {what}")
        return None
    return _Header(start, lines[start][len(_USER_HOST):], fields, timestamp, j, full)


_INT = re.compile(r"[0-9]+")
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def _numbers_ok(fields: dict) -> bool:
    """The header's numbers are numbers as the server prints them (ASCII digits only)."""
    return (all(_INT.fullmatch(fields[f]) for f in ("Thread_id", "Rows_sent", "Rows_examined"))
            and all(_SECONDS.fullmatch(fields.get(f, "0")) for f in ("Query_time", "Lock_time"))
            and ("Rows_affected" not in fields or _INT.fullmatch(fields["Rows_affected"]) is not None))


def _entry(h: _Header, text: list[str], plans: bool) -> SlowLogEntry:
    sql = "\n".join(text).strip(_BLANK)
    if sql.endswith(";"):
        sql = sql[:-1]
    f = h.fields
    return SlowLogEntry(h.start + 1, h.user_host, int(f["Thread_id"]), f.get("Schema", ""),
                        _us(f["Query_time"]), _us(f.get("Lock_time", "0")),
                        int(f["Rows_sent"]), int(f["Rows_examined"]),
                        int(f["Rows_affected"]) if "Rows_affected" in f else None,
                        h.timestamp, sql, plan_of(f, plans))


def _lines(lines: Iterable[str]) -> list[str]:
    if isinstance(lines, io.TextIOWrapper):
        try:
            lines.reconfigure(newline="\n")       # the server ends lines with \n; \r is text
        except (ValueError, io.UnsupportedOperation):
            pass
    out = []
    for raw in lines:
        out.extend(raw.split("\n")[:-1] if raw.endswith("\n") else raw.split("\n"))
    return out


def parse(lines: Iterable[str], source: str = "slow log", plans: bool = False,
          backslash_escapes: bool = True, ansi_quotes: bool = False) -> Iterator[SlowLogEntry]:
    """The entries of a slow log (lines with or without their newline, or an open file). The
    server's sql_mode defaults: `backslash_escapes` (not NO_BACKSLASH_ESCAPES), `ansi_quotes`."""
    r = _Reader(_lines(lines), source, Mode(backslash_escapes, ansi_quotes))
    lines, n = r.lines, len(r.lines)
    i = 0
    while i < n:
        line = lines[i]
        if not line.strip(_BLANK):
            i += 1
            continue
        if _banner_at(lines, i):
            i += 3
            continue
        h = r.header(i, strict=True)
        if h is None:
            raise SlowLogError(f"{source} line {i + 1}: text outside any entry: {line[:80]!r}")
        while h is not None:
            mode = r.mode_of(h)
            end, nxt, banner = r.statement_end(h)
            entry = _entry(h, lines[h.text:end], plans)
            r.modes[entry.thread_id] = _sql_mode_after(entry.sql, mode, r.default)
            yield entry
            h = nxt
            i = end + 3 if banner else end
        # after a banner, or at the end of the file


class _Reader:
    """The log's lines and what is known of them: headers found, which of those met after a
    `;` in a comment are real (`real`), the sessions' sql_modes so far."""
    MAX_DEPTH = 200     # look-ahead through that many headers at most (then: not real)

    def __init__(self, lines: list[str], source: str, default: Mode):
        self.lines, self.source, self.default = lines, source, default
        self.modes: dict[int, Mode] = {}
        self._real: dict[int, bool] = {}
        self._depth = 0

    def mode_of(self, h: _Header) -> Mode:
        return self.modes.get(int(h.fields["Thread_id"]), self.default)

    def header(self, i: int, strict: bool = False) -> _Header | None:
        return _header_at(self.lines, i, self.source, strict, self.default)

    def statement_end(self, h: _Header) -> tuple[int, _Header | None, bool]:
        """Where the text of the entry `h` ends: (index of the line after it, the next entry's
        header if one starts there, whether a banner starts there)."""
        lines, n = self.lines, len(self.lines)
        mode = self.mode_of(h)
        state, ends, _ = lex_line(lines[h.text], TOP, mode)
        fallback = None             # the first header after a `;` while a string was open
        k = h.text + 1
        while k < n:
            if ends == "top":
                if _banner_at(lines, k):
                    return k, None, True
                nxt = _header_at(lines, k, self.source, True, mode)
                if nxt is not None:
                    return k, nxt, False
            elif ends == "comment":
                if _banner_at(lines, k):
                    return k, None, True
                nxt = self.header(k)
                if nxt is not None and nxt.full and self.real(nxt):
                    return k, nxt, False
            elif fallback is None and lines[k - 1].endswith(";") and state != TOP:
                nxt = self.header(k)
                if nxt is not None:
                    fallback = (k, nxt)
            state, ends, _ = lex_line(lines[k], state, mode)
            k += 1
        if state != TOP and fallback is not None:
            return fallback[0], fallback[1], False      # never closed: a refused statement, cut
        return n, None, False

    def real(self, h: _Header) -> bool:
        """Whether the whole header `h`, met after a line that ends in a comment with `;` (the
        server's `;` after a statement ending in a comment, or a comment of the statement going
        on), is a real one. In a log of statements the server accepted:
        - a header read in a statement's text is whole only as that statement's last SQL (its
          SET line is SQL, and after a `;` only comments follow), so what follows it is
          comments of the same statement or the next real header;
        - a real entry's text holds SQL that is not a comment (the server refuses a text of
          comments alone: "Query was empty").
        So from `h`, take the headers that follow one another, each as the first text line of
        the one before (a banner there ends the chain as a real one): real and false ones
        alternate; the last is real when its text holds SQL before it ends (`has_sql`). The
        first, `h`, is real when it has the last one's parity."""
        if h.start in self._real:
            return self._real[h.start]
        if self._depth >= self.MAX_DEPTH:
            return False
        self._depth += 1
        try:
            chain, last = [h], h
            while True:
                if _banner_at(self.lines, last.text):
                    last_real, odd = True, len(chain) % 2 == 0   # the banner is the chain's last
                    break
                nxt = self.header(last.text)
                if nxt is None or not nxt.full or len(chain) >= 64:
                    last_real, odd = self.has_sql(last), len(chain) % 2 == 1
                    break
                chain.append(nxt)
                last = nxt
            # the first is real iff it is the last, or an even number of steps before a real last
            first_real = odd if last_real else not odd
            for k, c in enumerate(chain):               # they alternate
                self._real.setdefault(c.start, first_real if k % 2 == 0 else not first_real)
            return self._real[h.start]
        finally:
            self._depth -= 1

    def has_sql(self, h: _Header) -> bool:
        """Whether the text of `h` holds SQL that is not a comment before it ends."""
        lines, n = self.lines, len(self.lines)
        mode = self.mode_of(h)
        state, ends, code = lex_line(lines[h.text], TOP, mode)
        k = h.text + 1
        while not code and k < n:
            if ends == "top" and (_banner_at(lines, k) or self.header(k) is not None):
                return False
            if ends == "comment":
                if _banner_at(lines, k):
                    return False
                nxt = self.header(k)
                if nxt is not None and nxt.full and self.real(nxt):
                    return False
            state, ends, code = lex_line(lines[k], state, mode)
            k += 1
        return code
