"""`Host.present_call` / `present_result`: plugin presenters, then the tool's, then generic."""

from __future__ import annotations

from dsh_host import (
    DiffResultView,
    FileDiff,
    GenericCallView,
    GenericResultView,
    TerminalCallView,
    ToolCallKind,
    ToolExecutionResult,
    define_tool,
    hookimpl,
    view_to_json,
)


def make_tool(**presenters):
    return define_tool(
        name="open",
        description="",
        parameters={"path": {"type": "string", "required": True}},
        execute=lambda args: f"opened {args['path']}",
        **presenters,
    )


async def test_fallback_order(make_host):
    own = make_tool(
        present_call=lambda args: GenericCallView(
            title=f"Open {args['path']}", kind=ToolCallKind.READ
        ),
        present_result=lambda args, result: GenericResultView(
            title=f"Opened {args['path']}", content=result.content
        ),
    )

    class Plugin:
        name = "plugin"

        @hookimpl
        def dsh_present_call(self, tool, args):
            return TerminalCallView(title="plugin card") if args.get("path") == "/plugin" else None

    host = make_host(Plugin(), tools=[own])
    assert host.present_call("open", {"path": "/plugin"}) == TerminalCallView(title="plugin card")
    assert host.present_call("open", {"path": "/a"}) == GenericCallView(
        title="Open /a", kind=ToolCallKind.READ
    )
    result = await host.call("open", {"path": "/a"})
    assert host.present_result("open", {"path": "/a"}, result).title == "Opened /a"
    # invalid arguments: the tool's presenter is not called; the generic card stands in
    assert host.present_call("open", {}) == GenericCallView(title="open", raw_input={})
    assert host.present_call("missing", {"x": 1}) == GenericCallView(
        title="missing", raw_input={"x": 1}
    )


async def test_raising_or_wrong_presenters_fall_back(make_host):
    def boom(args):
        raise RuntimeError("presenter bug")

    class Broken:
        name = "broken"

        @hookimpl
        def dsh_present_call(self, tool, args):
            raise RuntimeError("plugin presenter bug")

        @hookimpl
        def dsh_present_result(self, tool, args, result):
            return "not a view"

    host = make_host(Broken(), tools=[make_tool(present_call=boom)])
    assert host.present_call("open", {"path": "/a"}) == GenericCallView(
        title="open", raw_input={"path": "/a"}
    )
    result = await host.call("open", {"path": "/a"})
    assert host.present_result("open", {"path": "/a"}, result) == GenericResultView(
        title="open", content=result.content
    )
    # non-JSON arguments still get a card
    assert host.present_call("open", {"path": {1, 2}}).title == "open"


def test_views_serialise_to_json_with_the_card_first():
    view = DiffResultView(title="edit a.py", diffs=[FileDiff("a.py", None, "x\n")])
    assert view_to_json(view) == {
        "card": "diff",
        "title": "edit a.py",
        "diffs": [{"path": "a.py", "old_text": None, "new_text": "x\n"}],
    }


def test_a_generic_result_card_keeps_the_title_of_the_call_card(make_host):
    tool = define_tool(
        name="open", description="", parameters={"path": {"type": "string"}},
        execute=lambda args: "ok",
        present_call=lambda args: GenericCallView(title=f"Open {args['path']}"),
    )  # fmt: skip
    host = make_host(tools=[tool])
    result = ToolExecutionResult(content="raw output")
    view = host.present_result("open", {"path": "/a"}, result)
    assert (view.card, view.title) == ("generic", "Open /a")
    assert view.content == result.content
    assert host.present_result("open", {"path": 3}, result).title == "open"  # invalid: generic


def _logged(function):
    """A decorator as plugins write them: ``functools.wraps`` around ``*args, **kwargs``."""
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        return function(*args, **kwargs)

    return wrapper


async def test_a_wrapped_presenter_gets_its_arguments(make_host):
    """pluggy reads a wrapped implementation's arguments through ``__wrapped__`` (its
    ``argnames``); the host passes exactly those, so a decorated presenter is called with them
    instead of with none (which made it raise and silently fall back to the generic card)."""

    class Plugin:
        name = "plugin"

        @hookimpl
        @_logged
        def dsh_present_call(self, tool, args):
            return TerminalCallView(title=f"{tool.name} {args['path']}")

        @hookimpl
        @_logged
        def dsh_present_result(self, args, result):
            return GenericResultView(title=f"done {args['path']}", content=result.content)

    host = make_host(Plugin(), tools=[make_tool()])
    assert host.present_call("open", {"path": "/a"}) == TerminalCallView(title="open /a")
    result = await host.call("open", {"path": "/a"})
    assert host.present_result("open", {"path": "/a"}, result).title == "done /a"
