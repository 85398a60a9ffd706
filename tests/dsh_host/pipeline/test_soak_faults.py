"""Soak and fuzz (issue 10 item 10, the core's part): plugins raising every kind of exception and
hanging in every stage under load; the JSONL and CLI fuzzer; the TOML fuzzer. Small in CI; ``nox -s
soak`` runs the full sizes (``DSH_SOAK=full``)."""

from __future__ import annotations

import json
import random
import string
import sys

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_host import Ask, ConfigError, Host, ToolExecutionInput, hookimpl
from dsh_host._cli._main import main
from dsh_host._host._config import load_config
from tests.conftest import make_echo, soak_size

STAGES = ("pre", "approve", "guard", "wrap", "post", "observe")
FAULTS = (
    lambda: KeyboardInterrupt(),
    lambda: SystemExit(1),
    lambda: GeneratorExit(),
    lambda: trio.Cancelled._create(),
    lambda: MemoryError("fake"),
    lambda: RuntimeError("plain"),
    lambda: BaseExceptionGroup("group", [ValueError("a"), SystemExit(2)]),
    None,  # hang
)


class Chaos:
    """Misbehaves in stage ``plan[call_id]`` with fault ``plan[call_id]``; otherwise abstains."""

    name = "chaos"

    def __init__(self, plan: dict[str, tuple[str, int]]) -> None:
        self.plan = plan

    async def _maybe(self, call_id: str, stage: str) -> None:
        planned = self.plan.get(call_id)
        if planned is None or planned[0] != stage:
            return
        fault = FAULTS[planned[1]]
        if fault is None:
            await trio.sleep_forever()
        raise fault()

    @hookimpl
    async def dsh_tool_pre_execute(self, execution):
        await self._maybe(execution.call_id, "pre")
        planned = self.plan.get(execution.call_id)
        return Ask("chaos") if planned is not None and planned[0] == "approve" else None

    @hookimpl
    async def dsh_tool_approve(self, request):
        await self._maybe(request.call_id, "approve")

    @hookimpl
    async def dsh_tool_guard(self, execution):
        await self._maybe(execution.call_id, "guard")

    @hookimpl
    async def dsh_tool_execute(self, execution, call_next):
        await self._maybe(execution.call_id, "wrap")
        return await call_next()

    @hookimpl
    async def dsh_tool_post_execute(self, execution, result):
        await self._maybe(execution.call_id, "post")

    @hookimpl
    async def dsh_tool_result(self, execution, result):
        await self._maybe(execution.call_id, "observe")


@pytest.mark.soak
async def test_faulty_plugins_in_every_stage_never_touch_sibling_calls(autojump_clock):
    n = soak_size(300, 5_000)
    rng = random.Random(1234)
    plan = {
        f"c{i}": (rng.choice(STAGES), rng.randrange(len(FAULTS)))
        for i in range(n)
        if rng.random() < 0.3
    }
    host = Host(
        config={"host": {"hook_timeout": 1, "approval_timeout": 2, "observer_timeout": 1}},
        plugins=[Chaos(plan)],
        load_entrypoints=False,
    )
    host.registry.register(make_echo(is_concurrency_safe=lambda args: True))
    inputs = [
        ToolExecutionInput(call_id=f"c{i}", name="echo", arguments={"text": f"t{i}"})
        for i in range(n)
    ]
    results = await host.registry.execute_batch(inputs, max_parallel=50)
    assert len(results) == n
    for i, result in enumerate(results):
        planned = plan.get(f"c{i}")
        if planned is None or planned[0] == "observe":
            assert result.text == f"t{i}", (i, planned, result)
        else:
            assert result.code == "PLUGIN_FAILED", (i, planned, result)
            assert result.decided_by == "chaos"


# -- the JSONL and CLI fuzzer ----------------------------------------------------------------

HELPERS = """
from dsh_host import define_tool, hookimpl

echo = define_tool(
    name="echo", description="Echo.", execute=lambda args: args.get("text", ""),
    parameters={"text": {"type": "string"}},
    is_concurrency_safe=lambda args: True,
)


@hookimpl
def dsh_register_tools(register):
    register(echo)
"""

PLUGINS = ["--no-entrypoints", "--plugin", "fuzz_helpers"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(codec=None, exclude_categories=())),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)

lines = st.one_of(
    json_values.map(lambda v: json.dumps(v)),
    json_values.map(lambda v: json.dumps({"name": "echo", "arguments": v})),
    st.text(alphabet=string.printable + '\udcff\u202e\x1b[]{}":,', max_size=60),
    st.integers(1, 3000).map(lambda d: '{"name": "echo", "arguments": ' + "[" * d + "]" * d + "}"),
    st.sampled_from(
        [
            '{"name": "echo", "arguments": {"text": "a", "text": "b"}}',
            '{"name": "echo", "arguments": {"text": "\\udcff\\u001b[2J"}}',
            '{"name": "echo", "arguments": {"text": ' + "9" * 5000 + "}}",
            '{"name": "nope", "arguments": {}}',
            '{"name": "echo", "arguments": "{\\"text\\": NaN}"}',
        ]
    ),
)


@pytest.fixture
def fuzz_dir(tmp_path, monkeypatch):
    (tmp_path / "fuzz_helpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_CONFIG", raising=False)
    yield tmp_path
    sys.modules.pop("fuzz_helpers", None)


@pytest.mark.soak
@settings(
    max_examples=soak_size(30, 1_000),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(calls=st.lists(lines, min_size=1, max_size=6), dry_run=st.booleans())
def test_dsh_run_never_prints_a_traceback(fuzz_dir, capsys, calls, dry_run):
    path = fuzz_dir / "calls.jsonl"
    path.write_text("\n".join(c.replace("\n", " ") for c in calls) + "\n", "utf-8", "surrogatepass")
    argv = [*PLUGINS, "run", str(path), *(["--dry-run"] if dry_run else [])]
    status = main(argv)
    captured = capsys.readouterr()
    assert status in (0, 1, 2), captured.err
    assert "Traceback" not in captured.err
    assert "internal error" not in captured.err


@pytest.mark.soak
@settings(
    max_examples=soak_size(30, 1_000),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.text(max_size=12) | st.just("echo"), arguments=lines, as_json=st.booleans())
def test_dsh_call_never_prints_a_traceback(fuzz_dir, capsys, name, arguments, as_json):
    argv = [*PLUGINS, "call", name, arguments, *(["--json"] if as_json else [])]
    status = main(argv)
    captured = capsys.readouterr()
    assert status in (0, 1, 2), captured.err
    assert "Traceback" not in captured.err
    assert "internal error" not in captured.err
    if as_json and status in (0, 1):
        json.loads(captured.out)


def test_one_real_dsh_run_end_to_end(fuzz_dir):
    import subprocess

    (fuzz_dir / "calls.jsonl").write_text(
        '{"name": "echo", "arguments": {"text": "\\udcff"}}\n' + "[" * 100_000 + "\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "dsh_host", *PLUGINS, "run", "calls.jsonl"],
        capture_output=True, text=True, errors="replace", timeout=60, cwd=fuzz_dir,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(fuzz_dir)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "calls.jsonl:2:" in done.stderr
    assert "\\udcff" in done.stdout


# -- the TOML fuzzer -------------------------------------------------------------------------

toml_values = st.recursive(
    st.booleans().map(lambda b: "true" if b else "false")
    | st.integers(-(2**63), 2**63 - 1).map(str)
    | st.floats().map(lambda f: str(f).replace("nan", "nan").lower())
    | st.text(max_size=8).map(json.dumps),
    lambda children: st.lists(children, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
    max_leaves=8,
)

toml_documents = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda table, key, value: f"[{table}]\n{key} = {value}\n",
        st.sampled_from(["host", "plugins", "plugin.guards", "plugin.nope", "other", "plugin"]),
        st.sampled_from(
            ["workspace", "hook_timeout", "observer_timeout", "approval_timeout", "enable", "x"]
        ),
        toml_values | st.sampled_from(["nan", "inf", "-1", "0", '"30"', "1e400"]),
    ),
    st.integers(1, 5000).map(lambda d: "[host]\nx = " + "[" * d + "]" * d + "\n"),
)


@pytest.mark.soak
@settings(
    max_examples=soak_size(80, 3_000),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(document=toml_documents)
def test_any_toml_is_a_config_or_a_config_error(tmp_path, document):
    path = tmp_path / "dsh.toml"
    path.write_text(document, "utf-8", "surrogatepass")
    message = None
    try:
        config = load_config(path)
        Host(config, load_entrypoints=False)
    except ConfigError as exc:
        message = str(exc)
    assert message is None or "dsh.toml" in message
