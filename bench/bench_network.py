"""What ``network = [names]`` adds to one allowed HTTP request (not a timed test).

Run with ``python bench/bench_network.py [--calls 20]``. A local HTTP server on 127.0.0.1 (under
the test name ``api.test``, pinned with ``network_hosts``); ``curl`` inside bubblewrap, once per
configuration per round, rounds interleaved: ``network = true`` (direct to 127.0.0.1, the host's
network) and ``network = ["api.test"]`` (the relay in the command's network namespace, the
host's proxy, then the server). Reported: the median of each and the difference, which is the
relay's start (a Python process) plus the proxy hop; then the same with ten requests in one
command, for the cost of each further request. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import tempfile
import threading
import time
from pathlib import Path

import trio

from dsh_plugins_builtin._sandbox._config import SandboxConfig, build_policy
from dsh_plugins_builtin._sandbox._confine import run_confined


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


async def _time(command: str, ws: Path, config: SandboxConfig) -> float:
    policy = build_policy(config, ws)
    start = time.perf_counter()
    done = await run_confined(command, cwd=ws, policy=policy, backend="bwrap", timeout=30)
    elapsed = time.perf_counter() - start
    if done.exit_code != 0 or "ok" not in done.output:
        raise SystemExit(f"the request failed: {done.output!r}")
    return elapsed


async def _main(calls: int) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    direct = SandboxConfig(network=True)
    proxied = SandboxConfig(
        network=("api.test",), network_ports=(port,), network_hosts={"api.test": "127.0.0.1"}
    )
    times: dict[str, list[float]] = {"direct": [], "proxied": [], "direct10": [], "proxied10": []}
    ten = " ".join(["http://{host}:" + str(port) + "/"] * 10)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for _ in range(calls):
            times["direct"].append(
                await _time(f"curl -sS --noproxy '*' http://127.0.0.1:{port}/", ws, direct)
            )
            times["proxied"].append(await _time(f"curl -sS http://api.test:{port}/", ws, proxied))
            many = f"curl -sS --noproxy '*' {ten.format(host='127.0.0.1')}"
            times["direct10"].append(await _time(many, ws, direct))
            many = f"curl -sS {ten.format(host='api.test')}"
            times["proxied10"].append(await _time(many, ws, proxied))
    server.shutdown()
    med = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(f"direct  (network = true):        {med['direct']:.1f} ms median of {calls}")
    print(f"proxied (network = ['api.test']): {med['proxied']:.1f} ms median of {calls}")
    print(f"the proxy adds {med['proxied'] - med['direct']:.1f} ms per command with one request")
    extra = (med["proxied10"] - med["direct10"] - (med["proxied"] - med["direct"])) / 9
    print(
        f"ten requests in one command: {med['direct10']:.1f} ms direct, "
        f"{med['proxied10']:.1f} ms proxied: {extra:.2f} ms per further request"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20)
    trio.run(_main, parser.parse_args().calls)


if __name__ == "__main__":
    main()
