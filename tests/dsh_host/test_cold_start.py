"""Cold start (issue 27): what a fresh process imports, checked structurally (never timed).

Each check runs a fresh interpreter and reads its ``sys.modules``: a module listed here is
imported only by the code that needs it (a function body, or a public name's first use).
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys

import pytest

OPTIONAL = (
    "trio",  # the pipeline and the host start it; a tool definition does not need it
    "cattrs",  # structuring: on the first config table or typed arguments
    "importlib.metadata",  # entry points: read by the host
    "tomllib",  # the config file
    "jsonschema",  # raw JSON Schema tools only
    "tree_sitter",  # the shell parser of bash(...) rules
    "platformdirs",
    "sqlite3",  # the audit writer
    "psycopg",
    "mcp",
    "anyio",
    "asyncio",
    "pydantic_ai",
    "agents",
    "opentelemetry",
    "tomlkit",
    "pathspec",
    "re2",
    "pyseccomp",
    "difflib",  # did-you-mean hints only
    "pathlib",
)


def modules_after(code: str, env: dict[str, str] | None = None, stdin: str = "") -> set[str]:
    """The modules a fresh interpreter holds after running *code*."""
    probe = f"{code}\nimport json, sys\nsys.stderr.write('\\n' + json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        input=stdin,
    )
    last = done.stderr.rstrip().rpartition("\n")[2]
    assert last.startswith("["), done.stderr
    return set(json.loads(last))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules]


def test_import_dsh_host_imports_no_optional_module():
    modules = modules_after("import dsh_host")
    assert loaded(modules, OPTIONAL) == []
    assert not [m for m in modules if m.startswith(("dsh_host._host", "dsh_host._pipeline"))]
    assert "dsh_host._model._views" not in modules  # the cards: with a presenter's first one


def test_the_cards_load_with_their_first_use():
    code = (
        "import sys, dsh_host\n"
        "assert 'dsh_host._model._views' not in sys.modules\n"
        "from dsh_host import FileLocation, ToolCallKind, view_to_json\n"
        "assert dsh_host.GenericCallView.__module__ == 'dsh_host._model._views'\n"
        "assert view_to_json(dsh_host.GenericCallView(title='t', kind=ToolCallKind.READ, "
        "locations=(FileLocation('a'),)))['card'] == 'generic'\n"
    )
    assert "dsh_host._model._views" in modules_after(code)


def test_a_tool_defined_and_validated_needs_neither_trio_nor_the_host():
    code = (
        "import dsh_host\n"
        "t = dsh_host.define_tool(name='echo', description='d', "
        "parameters={'text': {'type': 'string', 'required': True}}, execute=lambda a: a)\n"
        "assert t.validate(dsh_host.FrozenDict({'text': 'x'})) == []\n"
        "assert dsh_host.AbortSignal().aborted is False\n"
    )
    modules = modules_after(code)
    assert loaded(modules, ("trio", "cattrs", "importlib.metadata", "tomllib")) == []


def test_the_host_names_still_import_everything_they_need():
    modules = modules_after("from dsh_host import Host, open_host")
    assert {"trio", "dsh_host._host._host", "dsh_host._pipeline._pipeline"} <= modules


NOT_ON_THE_COMMAND_LINE = (
    "importlib.metadata",  # the entry points come from the cache once it is warm
    "tomllib",  # no config file in the workspace
    "jsonschema",
    "pathspec",  # .gitignore matching: grep and glob only
    "psycopg",
    "mcp",  # the MCP SDK: a mounted server or `dsh mcp serve` only
    "anyio",
    "asyncio",  # the mcp plugin's mount loop: only with a server to mount
    "pydantic_ai",
    "agents",
    "tomlkit",
    "opentelemetry.trace",  # no tracer provider can have been configured
    "difflib",  # did-you-mean hints: only for a name that is not found
)
PAYLOAD = (
    '{"session_id": "s", "transcript_path": "/dev/null", "cwd": ".", '
    '"hook_event_name": "PreToolUse", "tool_name": "Bash", '
    '"tool_input": {"command": "git status"}, "tool_use_id": "t1"}'
)


def dsh_modules(workspace: pathlib.Path, argv: list[str], stdin: str = "") -> set[str]:
    """The modules a ``dsh`` process holds after *argv* ran in *workspace* (exit 0 checked)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "OTEL_"))}
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    env["XDG_CACHE_HOME"] = str(workspace.parent / "cache")
    code = (
        "import os, sys\n"
        f"os.chdir({str(workspace)!r})\n"
        "from dsh_host._cli._main import main\n"
        f"assert main({argv!r}) == 0\n"
    )
    return modules_after(code, env=env, stdin=stdin)


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    place = tmp_path / "workspace"
    place.mkdir()
    (place / "a.txt").write_text("hello\n")
    return place


def test_dsh_call_imports_no_optional_module_once_the_entry_points_are_cached(workspace):
    argv = ["call", "read_file", '{"path": "a.txt"}']
    dsh_modules(workspace, argv)  # the first run writes the entry-point cache
    assert loaded(dsh_modules(workspace, argv), NOT_ON_THE_COMMAND_LINE) == []


SANDBOX_BACKENDS = (  # the sandbox's backends: with the first command (or `dsh sandbox check`)
    "dsh_plugins_builtin._sandbox._backends",
    "dsh_plugins_builtin._sandbox._confine",
    "dsh_plugins_builtin._sandbox._landlock",
    "dsh_plugins_builtin._sandbox._forkclient",
    "dsh_plugins_builtin._sandbox._run",
    "dsh_plugins_builtin._sandbox._check",
)
NOT_FOR_A_READ = (
    "dsh_plugins_builtin._rules._suggest",  # the rules to suggest: a prompt or a denied call's hint
    "cattrs",  # no config table to structure: each plugin's config is its defaults
    "dsh_plugins_builtin._rules._shell",  # the bash parser: the first bash call (or hook)
    "tree_sitter",
    "uuid",  # the audit's host id is 6 bytes of os.urandom
    "dsh_host._cli._run",  # `dsh run` and `dsh new` only
    "dsh_host._cli._scaffold",
    "dsh_plugins_builtin._audit._command",  # `dsh audit` and its queries
    "dsh_plugins_builtin._audit._query",
    "dsh_plugins_builtin._hooks._plan",  # hook commands: only once a settings file has hooks
    "dsh_plugins_builtin._hooks._process",
    "dsh_plugins_builtin._hooks._supervise",
    "dsh_plugins_builtin._hooks._verdict",
    "dsh_plugins_builtin._hooks._payload",
    *SANDBOX_BACKENDS,
)


def test_dsh_call_read_file_imports_only_what_a_read_needs(workspace):
    argv = ["call", "read_file", '{"path": "a.txt"}']
    dsh_modules(workspace, argv)
    assert loaded(dsh_modules(workspace, argv), NOT_FOR_A_READ) == []


def test_dsh_hook_claude_with_its_config_pinned_builds_no_parser(workspace):
    # The docs advise pinning the hook's policy (`dsh hook claude --config PATH`): that command
    # line too is what Claude Code runs for every tool call.
    pinned = workspace.parent / "claude.toml"
    pinned.write_text('[plugin.permissions]\nallow = ["Read"]\n')
    for argv in (
        ["hook", "claude", "--config", str(pinned)],
        ["hook", "claude", f"--config={pinned}"],
    ):
        assert "argparse" not in dsh_modules(workspace, argv, PAYLOAD)


def test_dsh_hook_claude_imports_no_optional_module(workspace):
    argv = ["hook", "claude"]
    dsh_modules(workspace, argv, PAYLOAD)
    modules = dsh_modules(workspace, argv, PAYLOAD)
    assert loaded(modules, NOT_ON_THE_COMMAND_LINE) == []
    assert loaded(modules, ("cattrs", "uuid")) == []
    assert "sqlite3" not in modules  # no row to write (a PreToolUse dsh does not deny)
    assert loaded(modules, SANDBOX_BACKENDS) == []  # nothing runs: nothing to confine
    assert "dsh_plugins_builtin._sandbox._plugin" in modules  # the sandbox did start
    not_needed = (
        "argparse",  # `dsh hook claude` as Claude Code runs it needs no parser
        "platformdirs",  # the XDG directories are spelled out (`_common._dirs`)
        "dsh_host._host._messages",  # provider messages: `run_tool_calls`, JSON-text arguments
        "dsh_plugins_builtin._audit._postgres",  # an audit `url` only
        "dsh_plugins_builtin._sandbox._bwrap",  # bwrap's argument vector: a command only
        "dsh_plugins_builtin._sandbox._mountpoints",  # made by commands, settled by file tools
        "dsh_host._cli._completion",  # shell completion: with a parser only
        "dsh_host._host._present",  # cards: `Host.present_call` and `present_result` only
        "dsh_host._model._views",  # the cards themselves: a presenter's first one
        "dsh_host._pipeline._batch",  # a batch's scheduler: `ToolRegistry.execute_batch` only
        # what programs run and write, read from a command line: once one is matched against
        # rules (no config: no rule)
        "dsh_plugins_builtin._rules._hidden",
        "dsh_plugins_builtin._rules._programs",
    )
    assert loaded(modules, not_needed) == []
    # Claude Code runs the tool (no execute wrapper nor post-execute link sees a hook's call)
    # and asks the user (`ClaudeCode` answers every approval request first)
    left_out = ("timeout", "output_budget", "approval")
    assert loaded(modules, tuple(f"dsh_plugins_builtin.{name}" for name in left_out)) == []
    audit_command = ("dsh_plugins_builtin._audit._command", "dsh_plugins_builtin._audit._query")
    assert loaded(modules, audit_command) == []  # `dsh audit` only
    cards = ("dsh_host._cli._commands", "dsh_host._cli._render", "dsh_host._cli._toml")
    assert loaded(modules, cards) == []  # the commands that print cards and tables


SEARCH_BODIES = (  # grep's and glob's bodies (RE2, ripgrep's driver): with the first search
    "re2",
    "dsh_plugins_builtin._tools._ripgrep",  # the tools are built with `_rg_path.find_rg` only
    "dsh_plugins_builtin._tools._grep",
    "dsh_plugins_builtin._tools._grep_local",
    "dsh_plugins_builtin._tools._grep_rg",
    "dsh_plugins_builtin._tools._walk",
)


def test_a_read_and_a_hook_load_no_search_body(workspace):
    read = ["call", "read_file", '{"path": "a.txt"}']
    assert loaded(dsh_modules(workspace, read), SEARCH_BODIES) == []
    modules = dsh_modules(workspace, ["hook", "claude"], PAYLOAD)
    assert loaded(modules, SEARCH_BODIES) == []
    assert "dsh_plugins_builtin._tools._grep_tool" in modules  # grep is still registered


def _read_and_hook_then(workspace, probe):
    """Run a ``dsh call read_file`` and a ``dsh hook claude`` in fresh processes, each followed
    by *probe* (code that asserts what the command left unloaded or uncompiled)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "OTEL_"))}
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    for argv, stdin in (
        (["call", "read_file", '{"path": "a.txt"}'], ""),
        (["hook", "claude"], PAYLOAD),
    ):
        code = f"import os\nos.chdir({str(workspace)!r})\nfrom dsh_host._cli._main import main\nassert main({argv!r}) == 0\n"
        modules_after(code + probe, env=env, stdin=stdin)


def test_a_read_and_a_hook_no_rule_allows_compile_not_the_strict_word_reader(workspace):
    """Its scanner's wide character class costs a cold start ~3 ms: compiled for the first
    command line an allow rule is checked against."""
    probe = "from dsh_plugins_builtin._rules import _words\nassert _words._patterns.cache_info().misses == 0\n"
    _read_and_hook_then(workspace, probe)
    from dsh_plugins_builtin._rules._words import strict_words

    assert strict_words("git status && ls -la") == (("git", "status"), ("ls", "-la"))


def test_a_read_and_a_hook_judging_no_url_compile_no_url_pattern(workspace):
    """The plain-URL, numeric-label and dotted-quad patterns of domain rules cost a cold start
    about half a millisecond: compiled for the first URL judged."""
    probe = "from dsh_plugins_builtin._rules import _view\nassert _view._url_patterns.cache_info().misses == 0\n"
    _read_and_hook_then(workspace, probe)
    from dsh_plugins_builtin._rules._view import url_host

    assert url_host("https://API.example.com:443/x") == "api.example.com"
    assert url_host("http://127.1/") is None
    assert url_host("http://10.0.0.255/") == "10.0.0.255"


def dsh_without_probe(workspace: pathlib.Path, argv: list[str], stdin: str = "") -> set[str]:
    """`dsh_modules`, with the sandbox's probe of the machine refused (the process ends)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "OTEL_"))}
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    code = (
        "import os\n"
        f"os.chdir({str(workspace)!r})\n"
        "from dsh_plugins_builtin._sandbox import _backends\n"
        "def refuse(*args):  # a host drops a plugin that raises: end the process instead\n"
        "    os.write(2, b'the sandbox probed the machine')\n"
        "    os._exit(3)\n"
        "_backends._probe_all = refuse\n"
        "from dsh_host._cli._main import main\n"
        f"assert main({argv!r}) == 0\n"
    )
    return modules_after(code, env=env, stdin=stdin)


def test_a_call_that_runs_no_command_does_not_probe_the_sandbox(workspace):
    """The probe runs ``true`` under bwrap and Landlock: only a command needs it."""
    modules = dsh_without_probe(workspace, ["call", "read_file", '{"path": "a.txt"}'])
    assert "dsh_plugins_builtin._sandbox._plugin" in modules  # the sandbox did start
    assert "pyseccomp" not in modules  # the probe's seccomp program was not built either
    modules = dsh_without_probe(workspace, ["hook", "claude"], PAYLOAD)
    assert "pyseccomp" not in modules


def test_registering_a_plugin_looks_each_attribute_up_once(monkeypatch):
    """The host checks a plugin's hooks, then pluggy registers it: one static lookup each."""
    from dsh_host import Host, hookimpl

    class Plugin:
        name = "counted"

        @hookimpl
        def dsh_host_started(self, host: object) -> None:
            pass

    asked = _lookups(monkeypatch, Plugin)
    host = Host(plugins=[Plugin()], load_entrypoints=False)
    assert host.pm.get_plugin("counted") is not None
    assert asked["dsh_host_started"] == 1
    assert set(asked.values()) == {1}


def test_registering_a_plugin_asks_pluggy_only_where_a_marker_may_be(monkeypatch):
    """`object`'s own names (``__eq__``, ``__reduce__``...), a plugin's unmarked functions and
    its plain attributes are most of its ``dir``: no marker can be read there, so pluggy's static
    lookup (`inspect.getattr_static`, several microseconds a name) is not asked about them.
    A marked function, a staticmethod, a classmethod or a slot still is."""
    from dsh_host import Host, hookimpl

    class Plugin:
        __slots__ = ("__dict__", "slotted")
        name = "counted"

        def __eq__(self, other: object) -> bool:  # its own, unmarked: not asked
            return self is other

        __hash__ = object.__hash__

        def helper(self) -> None:
            pass

        @staticmethod
        def static() -> None:
            pass

        @property
        def prop(self) -> int:
            raise AssertionError("a property is never evaluated")

        @hookimpl
        def dsh_host_started(self, host: object) -> None:
            pass

    asked = _lookups(monkeypatch, Plugin)
    plugin = Plugin()
    plugin.__dict__["__repr__"] = lambda: "on the instance"  # unmarked: not asked
    host = Host(plugins=[plugin], load_entrypoints=False)
    assert host.pm.get_plugin("counted") is plugin
    assert set(asked) == {"dsh_host_started", "static", "slotted"}


def test_an_older_pluggys_dynamic_lookup_is_asked_about_all_but_objects_own_names(monkeypatch):
    """pluggy before 1.7 finds hooks with ``getattr`` (a property, ``__getattr__``), which the
    shortcut cannot foresee: with such a pluggy only ``object``'s own names are skipped."""
    from dsh_host import Host, hookimpl
    from dsh_host._registry import _hooks

    def never(*args: object) -> bool:
        raise AssertionError("the static shortcut asked under a dynamic lookup")

    monkeypatch.setattr(_hooks, "_STATIC_LOOKUP", False)
    monkeypatch.setattr(_hooks, "_unmarked", never)

    class Plugin:
        name = "dynamic"

        def helper(self) -> None:
            pass

        @hookimpl
        def dsh_host_started(self, host: object) -> None:
            pass

    asked = _lookups(monkeypatch, Plugin)
    plugin = Plugin()
    host = Host(plugins=[plugin], load_entrypoints=False)
    assert host.pm.get_plugin("dynamic") is plugin
    assert {"dsh_host_started", "helper", "name"} <= set(asked)
    assert "__eq__" not in asked


def test_what_is_not_asked_is_never_a_hook_implementation():
    """The shortcut answers as pluggy's own lookup would: wherever it says "unmarked",
    pluggy finds nothing either, for every name of plugins of every shape."""
    import types

    import pluggy

    from dsh_host import hookimpl
    from dsh_host._registry._hooks import _unmarked

    @hookimpl
    def marked(*args: object) -> None:
        pass

    class Base:
        @hookimpl(specname="dsh_host_started")
        def started(self) -> None:
            pass

        @hookimpl
        @staticmethod
        def static() -> None:
            pass

        @hookimpl
        @classmethod
        def klass(cls) -> None:
            pass

    class Child(Base):
        def started(self) -> None:  # overrides a marked one: pluggy finds this, unmarked
            pass

    class Slotted:
        __slots__ = ("empty", "hook")

    class Other:
        @hookimpl
        def bound(self) -> None:
            pass

    slotted = Slotted()
    slotted.hook = marked  # type: ignore[attr-defined]
    own = Child()
    own.__dict__.update(in_dict=marked, method=Other().bound, plain=print, text="x")
    module = types.ModuleType("plugin_module")
    module.hook = marked  # type: ignore[attr-defined]
    pm = pluggy.PluginManager("dsh")
    found = set()
    for plugin in (Base(), Child(), own, slotted, Slotted(), module, Base, object()):
        for name in dir(plugin):
            pluggy_says = pluggy.PluginManager.parse_hookimpl_opts(pm, plugin, name)
            if _unmarked(plugin, name, "dsh_impl"):
                assert pluggy_says is None, (plugin, name)
            elif pluggy_says is not None:
                found.add(name)
    assert found == {"started", "static", "klass", "in_dict", "method", "hook"}


def test_what_only_object_defines_is_never_a_hook_implementation():
    """The shortcut answers as pluggy's own lookup would, for every name `object` defines."""
    import types

    import pluggy

    from dsh_host import hookimpl
    from dsh_host._registry._hooks import _objects_own

    class Plain:
        pass

    class Slotted:
        __slots__ = ("__weakref__",)

    class Meta(type):
        pass

    class Classy(metaclass=Meta):
        @hookimpl(specname="dsh_host_started")
        def __init_subclass__(cls) -> None:  # marked, and its own: not skipped
            pass

    pm = pluggy.PluginManager("dsh")
    module = types.ModuleType("plugin_module")
    for plugin in (Plain(), Slotted(), Classy(), Classy, module, object()):
        for name in vars(object):
            if _objects_own(plugin, name):
                assert pluggy.PluginManager.parse_hookimpl_opts(pm, plugin, name) is None
    assert not _objects_own(Classy(), "__init_subclass__")
    assert not _objects_own(Classy, "__eq__")
    assert not _objects_own(module, "__eq__")
    assert _objects_own(Plain(), "__eq__")
    assert _objects_own(object(), "__reduce__")


def test_the_file_fence_loads_without_searching_for_libc():
    """``ctypes.util.find_library`` runs ldconfig (a process) at every start."""
    code = (
        "import ctypes.util\n"
        "def refuse(name):\n"
        "    raise AssertionError(f'find_library({name!r})')\n"
        "ctypes.util.find_library = refuse\n"
        "from dsh_plugins_builtin._sandbox import _beneath\n"
        "assert _beneath.HAVE_OPENAT2 in (True, False)\n"
    )
    modules_after(code)


def _lookups(monkeypatch, kind: type) -> collections.Counter[str]:
    """How often pluggy's static lookup (`parse_hookimpl_opts`) is asked about each name of a
    plugin of class *kind*, from now on."""
    import pluggy

    asked: collections.Counter[str] = collections.Counter()
    real = pluggy.PluginManager.parse_hookimpl_opts

    def counting(self: pluggy.PluginManager, plugin: object, name: str) -> object:
        if isinstance(plugin, kind):
            asked[name] += 1
        return real(self, plugin, name)

    monkeypatch.setattr(pluggy.PluginManager, "parse_hookimpl_opts", counting)
    return asked


def hook_after(prelude: str, workspace: pathlib.Path) -> None:
    """Run the console script's ``dsh hook claude`` on `PAYLOAD` in *workspace* after the code
    *prelude* (which refuses what the start must not do), in a fresh interpreter with its state
    beside *workspace*; it must answer ``ask`` and print nothing on stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSH_", "OTEL_"))}
    env["XDG_STATE_HOME"] = str(workspace.parent / "state")
    env["XDG_CACHE_HOME"] = str(workspace.parent / "cache")
    code = prelude + (
        "import sys\n"
        "sys.argv = ['dsh', 'hook', 'claude']\n"
        "from dsh_host._cli._entry import command\n"
        "command()\n"
    )
    done = subprocess.run(  # -P: the workspace is not on the import path (no warning)
        [sys.executable, "-P", "-c", code], input=PAYLOAD, capture_output=True, text=True,
        cwd=workspace, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert '"permissionDecision": "ask"' in done.stdout


REFUSE_LDCONFIG = (
    "import ctypes.util, os\n"
    "def refuse(name):\n"
    "    os.write(2, f'ldconfig asked for {name}'.encode())\n"
    "    os._exit(3)\n"
    "ctypes.util._findSoname_ldconfig = refuse\n"
)


def test_the_console_script_starts_trio_without_running_ldconfig(workspace):
    """trio asks ``find_library("pthread")`` (``ldconfig -p``, a process) when imported."""
    from dsh_host._cli import _pthread

    if not _pthread.pthread_in_libc(os.confstr("CS_GNU_LIBC_VERSION")):
        pytest.skip("glibc 2.34 or later only (elsewhere ldconfig is asked as usual)")
    hook_after(REFUSE_LDCONFIG, workspace)
    # trio still names its threads: pthread_setname_np is found in libc.so.6
    code = REFUSE_LDCONFIG + (
        "import ctypes.util\n"
        "real = ctypes.util.find_library\n"
        "from dsh_host._cli import _pthread\n"
        "with _pthread.answered() as answered:\n"
        "    assert answered\n"
        "    import trio\n"
        "assert trio._core._thread_cache.set_os_thread_name is not None\n"
        "assert ctypes.util.find_library is real  # put back: only trio's import is answered\n"
    )
    modules_after(code)


@pytest.mark.parametrize(
    ("version", "in_libc"),
    [
        ("glibc 2.34", True),
        ("glibc 2.36", True),
        ("glibc 3.0", True),
        ("glibc 2.33", False),
        ("glibc 2.17", False),
        ("glibc two", False),
        ("musl 1.2", False),
        ("", False),
        (None, False),
    ],
)
def test_only_a_glibc_that_holds_pthread_is_answered_without_ldconfig(version, in_libc):
    from dsh_host._cli._pthread import pthread_in_libc

    assert pthread_in_libc(version) is in_libc


def test_a_read_and_a_hook_compile_no_pattern_of_a_command_environment(workspace):
    """The patterns that keep secrets out of a command's environment cost a start ~0.5 ms:
    compiled with the first command (a read and a hook run none)."""
    probe = (
        "from dsh_plugins_builtin._sandbox import _env\n"
        "assert _env._secret_patterns.cache_info().misses == 0\n"
    )
    _read_and_hook_then(workspace, probe)
    from dsh_plugins_builtin._sandbox._env import looks_secret

    assert looks_secret("ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    assert not looks_secret("/usr/local/bin:/usr/bin")
