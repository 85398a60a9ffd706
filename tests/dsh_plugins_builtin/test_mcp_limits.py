"""What one server may list is bounded (`_guard.MAX_TOOLS`, `MAX_LIST_BYTES`, `MAX_TOOL_BYTES`),
and a tool whose input schema holds an unprintable character where it cannot be escaped (a
property name, an enum value, a ``required`` entry) is not mounted; each reported."""

from __future__ import annotations

import json

from dsh_plugins_builtin._mcp._guard import MAX_LIST_BYTES, MAX_TOOL_BYTES, MAX_TOOLS

from .test_mcp_isolation import mounted, raw  # noqa: F401 (a fixture)


def _mounted(host, server):
    prefix = f"mcp__{server}__"
    return [t.name.removeprefix(prefix) for t in host.registry.tools() if t.name.startswith(prefix)]


def test_a_listing_stops_at_max_tools_and_says_so(mounted):  # noqa: F811
    host, plugin = mounted({"m": raw("many")})  # 1,800 tools on 3 pages
    names = _mounted(host, "m")
    assert len(names) == MAX_TOOLS == 1000
    assert names[-1] == "t1_399"  # the first 1,000, in order
    problems = plugin._mount.links["m"].problems()
    assert problems == [
        "the listing stopped at 1000 tools (the most one server may list): 200 more tools on "
        "that page, and any later pages, not mounted"
    ]


def test_a_huge_tool_is_not_mounted_and_a_listing_stops_at_max_list_bytes(mounted):  # noqa: F811
    host, plugin = mounted({"b": raw("bigschema")})
    names = _mounted(host, "b")
    assert "huge" not in names
    assert "fine" in names
    problems = plugin._mount.links["b"].problems()
    assert problems[0] == f"tool 'huge' not mounted: its definition is over {MAX_TOOL_BYTES} bytes"
    assert f"stopped at {MAX_LIST_BYTES} bytes of tools" in problems[-1]
    big = [n for n in names if n.startswith("b")]
    assert 30 <= len(big) < 50  # about 8 MiB of the 10 MB listed
    size = sum(len(json.dumps(host.registry.get(f"mcp__b__{n}").parameters)) for n in big)
    assert size <= MAX_LIST_BYTES


def test_unprintable_characters_in_schema_names_and_values_refuse_the_tool(mounted):  # noqa: F811
    host, plugin = mounted({"x": raw("badnames")})
    assert _mounted(host, "x") == ["fine"]  # the same characters in a description: escaped
    fine = json.dumps(host.registry.get("mcp__x__fine").parameters, ensure_ascii=False)
    assert not any(c in fine for c in ("\x1b", "\x07", "\u202e", "\u200b"))
    problems = plugin._mount.links["x"].problems()
    assert problems == [
        "tool 'esc' not mounted: its input schema has an unprintable character (control, "
        r'format, private-use or unassigned) in the key "a\x1b]0;PWN\x07\u202eb"',
        "tool 'zw' not mounted: its input schema has an unprintable character (control, "
        r'format, private-use or unassigned) in the key "a\u200bb"',
        "tool 'enum' not mounted: its input schema has an unprintable character (control, "
        r'format, private-use or unassigned) in the string "x\x1b[2J\x07"',
        "tool 'bidi' not mounted: its input schema has an unprintable character (control, "
        r'format, private-use or unassigned) in the string "te\u202ext\u200b"',
    ]
    for problem in problems:
        assert problem.isascii()
        assert problem.isprintable()


def test_a_tool_whose_pattern_re2_cannot_compile_is_not_mounted(mounted):  # noqa: F811
    host, plugin = mounted({"l": raw("lookahead")})
    assert _mounted(host, "l") == ["fine"]
    (problem,) = plugin._mount.links["l"].problems()
    assert problem.startswith("tool 'ahead' of MCP server 'l' not mounted: unsupported JSON")
    assert "'^(?=a)a+$' cannot be checked in bounded time" in problem
