"""dsh-hello's own tests, written with dsh's kit (``dsh_host.testing``)."""

from dsh_hello import tools
from dsh_hello.policy import HelloPolicy

from dsh_host.testing import approve_with, make_host, simulate

CONFIG = {"plugin": {"hello-policy": {"deny_names": ["mallory"], "ask_names": ["eve"]}}}


async def test_hello_greets():
    result = await make_host(tools).call("hello", {"name": "Ada", "shout": True})
    assert result.text == "HELLO, ADA!"


async def test_the_policy_denies_and_asks_as_configured():
    host = make_host(tools, HelloPolicy(), config=CONFIG)
    denied = await simulate(host, "hello", {"name": "Mallory"})
    assert (denied.allowed, denied.decided_by) == (False, "hello-policy")
    asked = await simulate(host, "hello", {"name": "eve"})
    assert (asked.allowed, asked.asked) == (False, True)
    approved = make_host(tools, HelloPolicy(), approve_with("allowed-once"), config=CONFIG)
    assert (await simulate(approved, "hello", {"name": "eve"})).allowed
