"""The search tools: ``glob`` (find files by name) and ``grep`` (find lines by regex).

Both walk a fenced root with `dsh_plugins_builtin._walk` (``.gitignore`` honoured, ``.git``
skipped, symlinked directories never followed), print paths relative to the workspace, come out
sorted, and stop at a cap with a note saying so.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pathspec

from dsh_host import DshError, ToolDefinition, ToolExecutionResult, ToolRunContext, define_tool
from dsh_plugins_builtin import _presenters as present
from dsh_plugins_builtin._tool_support import (
    BINARY_SNIFF_BYTES,
    ToolEnv,
    bool_arg,
    display_path,
    guarded,
    os_failure,
    str_arg,
)
from dsh_plugins_builtin._walk import compile_glob, expand_braces, walk_files

__all__ = ["make_search_tools"]

MAX_GLOB_RESULTS = 1000
MAX_GREP_MATCHES = 500
MAX_MATCH_LINE = 400
MAX_GREP_FILE_BYTES = 32 * 1024 * 1024
# Pattern features under which a line can match although the whole text does not.
_LINE_ONLY = ("\\A", "\\Z", "(?<", "(?=", "(?!", "(?-")


def _safe(args: Any) -> bool:
    return True


def _root(env: ToolEnv, spelled: str) -> Path:
    real = env.sandbox().check_read(spelled)
    if not real.exists():
        raise DshError(
            f'no such file or directory: "{spelled}" (relative to the workspace)', "FILE_NOT_FOUND"
        )
    return real


def _top(env: ToolEnv) -> Path:
    return Path(os.path.realpath(env.workspace))


def _prefix(real: Path, env: ToolEnv) -> str:
    shown = display_path(real, env.workspace)
    return "" if shown == "." else shown.rstrip("/") + "/"


def _stopper(ctx: ToolRunContext | None) -> Any:
    if ctx is None:
        return lambda: False
    signal = ctx.signal
    return lambda: signal.aborted


# -- glob ----------------------------------------------------------------------------------------


def _glob(env: ToolEnv, args: Mapping[str, Any], ctx: ToolRunContext | None) -> ToolExecutionResult:
    pattern = str_arg(args, "pattern").removeprefix("./")
    spelled = str_arg(args, "path", ".")
    regex, depth = compile_glob(pattern)
    root = _root(env, spelled)
    if not root.is_dir():
        raise DshError(f'"{spelled}" is a file; glob searches a directory', "NOT_A_DIRECTORY")
    prefix = _prefix(root, env)
    found: list[str] = []
    total = 0
    for rel, _entry in walk_files(
        root,
        top=_top(env),
        respect_ignore=not bool_arg(args, "include_ignored"),
        max_depth=depth,
        stop=_stopper(ctx),
    ):
        if regex.match(rel):
            total += 1
            if len(found) < MAX_GLOB_RESULTS:
                found.append(prefix + rel)
    where = display_path(root, env.workspace)
    meta = {"path": where, "count": len(found), "total": total, "truncated": total > len(found)}
    if not found:
        return ToolExecutionResult(content=f"No files match {pattern!r} in {where}", meta=meta)
    body = "\n".join(found)
    if total > len(found):
        body += (
            f"\n\n[showing the first {len(found)} of {total} matching files; "
            "narrow the pattern or the path]"
        )
    return ToolExecutionResult(content=body, meta=meta)


# -- grep ----------------------------------------------------------------------------------------


def _compile(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    flags = re.MULTILINE | (re.IGNORECASE if ignore_case else 0)
    try:
        return re.compile(pattern, flags)
    except (re.error, OverflowError, RecursionError) as exc:
        raise DshError(
            f"invalid regular expression {pattern!r}: {exc} (Python `re` syntax)", "BAD_REGEX"
        ) from None


def _file_filter(glob: str | None) -> pathspec.GitIgnoreSpec | None:
    if not glob:
        return None
    return pathspec.GitIgnoreSpec.from_lines(expand_braces(glob))


def _cut(line: str) -> str:
    if len(line) <= MAX_MATCH_LINE:
        return line
    return f"{line[:MAX_MATCH_LINE]} [... {len(line) - MAX_MATCH_LINE} more characters]"


class _Grep:
    def __init__(self, regex: re.Pattern[str], line_only: bool) -> None:
        self.regex = regex
        self.line_only = line_only
        self.matches: list[str] = []
        self.files = 0
        self.truncated = False
        self.too_large = 0

    def search(self, path: str, shown: str) -> None:
        """Add the matching lines of one file; skips binary and very large files."""
        try:  # never follow a symlink swapped in after the walk; never block on a FIFO
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return
            if st.st_size > MAX_GREP_FILE_BYTES:
                self.too_large += 1
                return
            with os.fdopen(fd, "rb", closefd=False) as handle:
                # Sized by the file, not the cap: a read(cap) would allocate the cap every time.
                data = handle.read(st.st_size + 1)
        except OSError:
            return
        finally:
            os.close(fd)
        if b"\0" in data[:BINARY_SNIFF_BYTES]:
            return
        text = data.decode("utf-8", errors="replace")
        search = self.regex.search
        if not self.line_only and search(text) is None:
            return
        lines = text.split("\n")
        if lines and not lines[-1]:
            lines.pop()
        hit = False
        for number, raw in enumerate(lines, 1):
            line = raw.removesuffix("\r")
            if search(line) is not None:
                if len(self.matches) == MAX_GREP_MATCHES:
                    self.truncated = True
                    return
                hit = True
                self.matches.append(f"{shown}:{number}:{_cut(line)}")
        self.files += hit


def _grep(env: ToolEnv, args: Mapping[str, Any], ctx: ToolRunContext | None) -> ToolExecutionResult:
    pattern = str_arg(args, "pattern")
    spelled = str_arg(args, "path", ".")
    regex = _compile(pattern, bool_arg(args, "ignore_case"))
    only = _file_filter(args.get("glob"))
    root = _root(env, spelled)
    grep = _Grep(regex, any(token in pattern for token in _LINE_ONLY))
    where = display_path(root, env.workspace)
    if root.is_file():
        grep.search(str(root), where)
    elif root.is_dir():
        prefix = _prefix(root, env)
        for rel, entry in walk_files(
            root,
            top=_top(env),
            respect_ignore=not bool_arg(args, "include_ignored"),
            stop=_stopper(ctx),
        ):
            if entry.is_symlink() or (only is not None and not only.match_file(rel)):
                continue
            grep.search(entry.path, prefix + rel)
            if grep.truncated:
                break
    else:
        raise os_failure(IsADirectoryError(), spelled, "search")
    meta = {
        "path": where,
        "count": len(grep.matches),
        "files": grep.files,
        "truncated": grep.truncated,
    }
    notes: list[str] = []
    if grep.truncated:
        notes.append(
            f"[stopped after {MAX_GREP_MATCHES} matches; narrow the pattern, the path or the glob]"
        )
    if grep.too_large:
        notes.append(
            f"[{grep.too_large} file(s) larger than {MAX_GREP_FILE_BYTES} bytes were not searched]"
        )
    body = "\n".join(grep.matches) if grep.matches else f"No matches for {pattern!r} in {where}"
    if notes:
        body += "\n\n" + "\n".join(notes)
    return ToolExecutionResult(content=body, meta=meta)


_SEARCH_PATH = "Directory (or, for grep, a file) to search, relative to the workspace root (default: the root)."
_IGNORED = "Also search files that .gitignore excludes (default false; .git/ is always skipped)."


def make_search_tools(env: ToolEnv) -> list[ToolDefinition]:
    """``glob`` and ``grep``, bound to ``env`` (the ``tools`` plugin)."""
    return [
        define_tool(
            name="glob",
            description=(
                "Find files by path pattern. `*` and `?` match within one path segment, `**` "
                "matches any number of directories, `[abc]` a character class, `{a,b}` "
                "alternatives: `*.py` finds Python files directly in `path`, `**/*.py` at any "
                "depth, `src/**/test_*.{py,pyi}` under src/. Returns matching file paths relative "
                f"to the workspace, sorted, at most {MAX_GLOB_RESULTS}. Files excluded by "
                ".gitignore are skipped unless include_ignored is true."
            ),
            parameters={
                "pattern": {
                    "type": "string",
                    "required": True,
                    "description": "Glob pattern relative to `path`, e.g. '**/*.py'.",
                },
                "path": {"type": "string", "description": _SEARCH_PATH},
                "include_ignored": {"type": "boolean", "description": _IGNORED},
            },
            execute=guarded(lambda args, ctx: _glob(env, args, ctx)),
            is_concurrency_safe=_safe,
            present_call=present.glob_call,
            present_result=present.glob_result,
            paths={"path": "read"},
            claude_name="Glob",
        ),
        define_tool(
            name="grep",
            description=(
                "Search file contents for a regular expression (Python `re` syntax), line by "
                "line. Prints `path:line:text` for each matching line, paths relative to the "
                f"workspace, sorted; at most {MAX_GREP_MATCHES} matches, long lines cut. Binary "
                "files and files excluded by .gitignore are skipped."
            ),
            parameters={
                "pattern": {
                    "type": "string",
                    "required": True,
                    "description": "Regular expression to look for in each line, e.g. 'def \\w+\\('.",
                },
                "path": {"type": "string", "description": _SEARCH_PATH},
                "glob": {
                    "type": "string",
                    "description": (
                        "Only search files matching this .gitignore-style glob, e.g. '*.py' (any "
                        "depth), 'src/**/*.ts' or '*.{js,ts}'."
                    ),
                },
                "ignore_case": {
                    "type": "boolean",
                    "description": "Match case-insensitively (default false).",
                },
                "include_ignored": {"type": "boolean", "description": _IGNORED},
            },
            execute=guarded(lambda args, ctx: _grep(env, args, ctx)),
            is_concurrency_safe=_safe,
            present_call=present.grep_call,
            present_result=present.grep_result,
            paths={"path": "read"},
            claude_name="Grep",
            claude_keys={"ignore_case": "-i"},
        ),
    ]
