"""The ``grep`` tool's definition; its body (`._grep`, with RE2 and ripgrep's driver) is
imported at its first call, so a start that searches nothing does not load it (issue 27)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsh_host import ToolDefinition, ToolExecutionResult, ToolRunContext, define_tool
from dsh_plugins_builtin._tools import _presenters as present
from dsh_plugins_builtin._tools._search_support import IGNORED, SEARCH_PATH, concurrency_safe
from dsh_plugins_builtin._tools._support import ToolEnv, guarded_async

__all__ = ["MAX_GREP_MATCHES", "make_grep_tool"]

MAX_GREP_MATCHES = 500


async def _grep(
    env: ToolEnv, binary: str | None, args: Mapping[str, Any], ctx: ToolRunContext | None
) -> ToolExecutionResult:
    from dsh_plugins_builtin._tools._grep import grep

    return await grep(env, binary, args, ctx)


def make_grep_tool(env: ToolEnv, binary: str | None) -> ToolDefinition:
    """``grep``, bound to ``env`` (the ``tools`` plugin), running ``binary`` (``None``: RE2)."""
    return define_tool(
        name="grep",
        description=(
            "Search file contents for a regular expression, line by line (ripgrep's Rust "
            "regex syntax: like Python `re` but without lookaround or backreferences; "
            "`\\z` for end of text). Prints `path:line:text` for each matching line, paths "
            f"relative to the workspace, sorted; at most {MAX_GREP_MATCHES} matches, long "
            "lines cut. Binary files and files excluded by .gitignore are skipped."
        ),
        parameters={
            "pattern": {
                "type": "string",
                "required": True,
                "description": "Regular expression to look for in each line, e.g. 'def \\w+\\('.",
            },
            "path": {"type": "string", "description": SEARCH_PATH},
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
            "include_ignored": {"type": "boolean", "description": IGNORED},
        },
        execute=guarded_async(lambda args, ctx: _grep(env, binary, args, ctx)),
        is_concurrency_safe=concurrency_safe,
        present_call=present.grep_call,
        present_result=present.grep_result,
        paths={"path": "read"},
        claude_name="Grep",
        claude_keys={"ignore_case": "-i"},
    )
