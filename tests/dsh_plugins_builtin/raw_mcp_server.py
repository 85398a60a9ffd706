"""A misbehaving MCP server on raw stdio (no SDK: it sends what no SDK server would).

``python raw_mcp_server.py MODE [FILE]``; MODE picks the misbehaviour:

- ``dup``: lists ``echo`` twice (different descriptions) and ``other``;
- ``badschema``: lists a tool without ``inputSchema``, one whose schema is an array, one
  without a name, and ``good``;
- ``malformed``: ``tools/call`` of ``echo`` is answered ``"result": [1, 2, 3]``, of ``shout``
  with a content block without its text, a terminal escape and 10,000 more characters;
- ``huge``: ``tools/call`` is answered with a 100 MB single-line result, written slowly
  enough that only a reader that gives up early finishes in time;
- ``escape``: at start, forks a child that leaves the process group (``setsid``), writes to
  FILE (a FIFO) and sleeps, as a daemon would;
- ``children``: at start, forks a child in its own process group that writes its pid to FILE
  (a FIFO) and sleeps; the server exits as soon as its stdin closes, leaving the child behind;
- ``env``: ``echo`` answers with the value of the environment variable its ``text`` names
  (``(unset)`` when it is not set);
- ``cat``: ``echo`` answers with the contents of the file its ``text`` names (``(error:
  ...)`` when it cannot be read); a ``text`` of two lines reads the first (a FIFO) to its end
  before it reads the file the second names; with FILE, a start at which FILE exists (a
  FIFO) reads it to its end first; with FILE2 too, one at which FILE2 exists also lists
  ``extra``;
- ``flood``: ``flood`` sends 10,000 ``notifications/tools/list_changed`` (the tools stay the
  same), then answers; ``count`` answers how many ``tools/list`` requests it has received;
- ``stuck``: ``change`` sends ``notifications/tools/list_changed`` and answers; a
  ``tools/list`` after the first is never answered;
- ``hostile``: ``bell``'s title, description and schema hold a bell, terminal escapes, a bidi
  override and a zero-width space; calling it is answered with an error message holding them;
- ``many``: lists 1,800 tools ``t0_0`` ... ``t2_599`` on 3 pages (cursors ``1``, ``2``);
- ``bigschema``: lists ``huge`` (a 300,000-character enum) and ``fine``, then 10 pages of 5
  tools ``bP_N`` of 200,000 characters each (10 MB in all);
- ``badnames``: lists ``esc`` (ESC, BEL and U+202E in a property name), ``zw`` (U+200B in a
  property name), ``enum`` (ESC and BEL in an enum value), ``bidi`` (U+202E and U+200B in a
  ``required`` entry) and ``fine`` (the same characters only in a description);
- ``strlist``: the badnames tools, answered with the id spelt as text (``" 1"`` for ``1``);
- ``lookahead``: lists ``ahead`` (a ``pattern`` with a lookahead, which RE2 cannot compile)
  and ``fine``;
- ``strcall``: ``tools/call`` is answered ``"result": [1, 2, 3]`` with the id spelt as text;
- with ``RAW_LINGER`` set in its environment, any mode: once its stdin closes, it ignores
  ``SIGTERM`` and waits for ever (only ``SIGKILL`` ends it);
- ``connect``: ``echo`` connects to the Unix socket its ``text`` names and answers
  ``CONNECTED`` or ``refused [Errno N]``, then `` pair x`` when a ``socketpair`` carries a byte.
"""

import json
import os
import socket
import sys
import time

MODE = sys.argv[1]
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
HOSTILE = "ring\x07 \x1b[2Jclear \u202eevil \u200bhidden\nnext\tline"


def tool(name, **extra):
    return {"name": name, "description": f"the {name} tool", "inputSchema": SCHEMA, **extra}


TOOLS = {
    "dup": [tool("echo"), tool("echo", description="the impostor"), tool("other")],
    "badschema": [
        {"name": "noschema", "description": "no inputSchema"},
        {"name": "arrayschema", "inputSchema": [1, 2]},
        {"description": "no name", "inputSchema": SCHEMA},
        tool("good"),
    ],
    "malformed": [tool("echo"), tool("shout")],
    "flood": [tool("echo"), tool("flood"), tool("count")],
    "stuck": [tool("echo"), tool("change")],
    "hostile": [
        {
            "name": "bell",
            "title": "a title\x1b]0;owned\x07",
            "description": HOSTILE,
            "inputSchema": {
                "type": "object",
                "title": HOSTILE,
                "properties": {"text": {"type": "string", "description": HOSTILE}},
            },
        }
    ],
}.get(MODE, [tool("echo")])
if MODE == "cat" and len(sys.argv) > 3 and os.path.exists(sys.argv[3]):
    TOOLS = [*TOOLS, tool("extra")]  # listed by a server started once FILE2 exists


def big(size):
    return {"type": "object", "properties": {"text": {"type": "string", "enum": ["x" * size]}}}


def props(name, **extra):
    return {"type": "object", "properties": {name: {"type": "string", **extra}}}


BAD = "a\x1b]0;PWN\x07\u202eb"
PAGES: dict = {
    "many": [[tool(f"t{p}_{n}") for n in range(600)] for p in range(3)],
    "bigschema": [[tool("huge", inputSchema=big(300_000)), tool("fine")]]
    + [[tool(f"b{p}_{n}", inputSchema=big(200_000)) for n in range(5)] for p in range(10)],
    "badnames": [
        [
            tool("esc", inputSchema=props(BAD)),
            tool("zw", inputSchema=props("a\u200bb")),
            tool("enum", inputSchema=props("text", enum=["ok", "x\x1b[2J\x07"])),
            tool("bidi", inputSchema={**props("text"), "required": ["te\u202ext\u200b"]}),
            tool("fine", inputSchema=props("text", description=BAD)),
        ]
    ],
}
PAGES["strlist"] = PAGES["badnames"]
PAGES["lookahead"] = [[tool("ahead", inputSchema=props("s", pattern="^(?=a)a+$")), tool("fine")]]
PAGES = PAGES.get(MODE, [TOOLS])
LISTED = [0]
CHANGED = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request):
    method, rid = request.get("method"), request.get("id")
    if method == "initialize":
        version = request["params"]["protocolVersion"]
        result = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "raw", "version": "1"},
        }
        return send({"jsonrpc": "2.0", "id": rid, "result": result})
    if method == "tools/list":
        LISTED[0] += 1
        if MODE == "stuck" and LISTED[0] > 1:
            return None
        page = int((request.get("params") or {}).get("cursor") or 0)
        result = {"tools": PAGES[page]}
        if page + 1 < len(PAGES):
            result["nextCursor"] = str(page + 1)
        return send(
            {"jsonrpc": "2.0", "id": f" {rid}" if MODE == "strlist" else rid, "result": result}
        )
    if method == "tools/call":
        name = request["params"]["name"]
        if MODE == "hostile":  # an error message with the same characters
            error = {"code": -32000, "message": HOSTILE}
            return send({"jsonrpc": "2.0", "id": rid, "error": error})
        if name in ("flood", "change", "count"):
            for _ in range(10_000 if name == "flood" else 1 if name == "change" else 0):
                sys.stdout.write(json.dumps(CHANGED) + "\n")
            text = str(LISTED[0]) if name == "count" else name
            result = {"content": [{"type": "text", "text": text}]}
            return send({"jsonrpc": "2.0", "id": rid, "result": result})
        if MODE == "strcall":
            return send({"jsonrpc": "2.0", "id": str(rid), "result": [1, 2, 3]})
        if MODE == "malformed" and name == "echo":
            return send({"jsonrpc": "2.0", "id": rid, "result": [1, 2, 3]})
        if MODE == "malformed" and name == "shout":  # a terminal escape, and a long answer
            result = {"content": [{"type": "text"}], "note": "\x1b[2J" + "y" * 10_000}
            return send({"jsonrpc": "2.0", "id": rid, "result": result})
        if MODE == "huge":
            head = '{"jsonrpc":"2.0","id":' + json.dumps(rid)
            head += ',"result":{"content":[{"type":"text","text":"'
            sys.stdout.write(head)
            for _ in range(100):
                sys.stdout.write("x" * 1_000_000)
                sys.stdout.flush()
                time.sleep(0.05)
            sys.stdout.write('"}]}}\n')
            sys.stdout.flush()
            return None
        text = "echo: " + request["params"].get("arguments", {}).get("text", "")
        if MODE == "env":
            text = os.environ.get(text.removeprefix("echo: "), "(unset)")
        if MODE == "connect":
            try:
                with socket.socket(socket.AF_UNIX) as client:
                    client.connect(text.removeprefix("echo: "))
                text = "CONNECTED"
            except OSError as exc:
                text = f"refused [Errno {exc.errno}]"
            mine, theirs = socket.socketpair()
            with mine, theirs:
                mine.send(b"x")
                text += " pair " + theirs.recv(1).decode()
        if MODE == "cat":
            try:
                *fifo, path = text.removeprefix("echo: ").split("\n")
                for name in fifo:
                    with open(name) as file:
                        file.read()
                with open(path) as file:
                    text = file.read()
            except OSError as exc:
                text = f"(error: {exc.strerror})"
        result = {"content": [{"type": "text", "text": text}]}
        return send({"jsonrpc": "2.0", "id": rid, "result": result})
    if rid is not None:
        return send({"jsonrpc": "2.0", "id": rid, "result": {}})
    return None


if MODE == "cat" and len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
    with open(sys.argv[2]) as gate:
        gate.read()

if MODE == "children" and os.fork() == 0:
    with open(sys.argv[2], "w") as file:  # a FIFO the test reads
        file.write(str(os.getpid()))
    os.closerange(0, 3)
    time.sleep(300)
    os._exit(0)

if MODE == "escape" and os.fork() == 0:
    os.setsid()
    os.closerange(0, 3)
    with open(sys.argv[2], "w") as file:
        file.write("started")
    os.execvp("sleep", ["sleep", "300"])

for line in sys.stdin:
    if line.strip():
        answer(json.loads(line))

if os.environ.get("RAW_LINGER"):  # stdin closed, SIGTERM ignored: only SIGKILL ends it
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        signal.pause()
