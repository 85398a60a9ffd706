"""SQLite beside PostgreSQL: 10,000 concurrent audited calls per store and durability.

Run with ``python bench/bench_audit_stores.py [--calls N] [--url postgresql://...]`` (the URL
defaults to ``$DSH_TEST_POSTGRES_URL``; its tables are emptied first, so give a scratch
database). For each store (``sqlite``, ``postgres``) and durability (``sync``, ``async``), a
fresh host with only the audit plugin and an echo tool runs *N* calls at once in one trio run;
reported are calls per second (from the first call to the last row committed: the flush is
inside the timing) and how many rows the store holds afterwards (all *N* are expected).
The password of the URL is never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dsh_host.testing import make_host  # noqa: E402
from dsh_plugins_builtin._audit._postgres import safe_url  # noqa: E402
from dsh_plugins_builtin.audit import AuditPlugin  # noqa: E402
from tests.conftest import make_echo  # noqa: E402


def _rows_sqlite(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as connection:
        return int(connection.execute("SELECT count(*) FROM calls").fetchone()[0])


def _rows_postgres(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM calls").fetchone()
        return int(row[0]) if row else 0


def _empty_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("DROP TABLE IF EXISTS calls, health, dsh_audit_meta")


def run(store: str, durability: str, calls: int, url: str | None, scratch: Path) -> dict[str, Any]:
    table: dict[str, Any] = {"durability": durability}
    if store == "sqlite":
        path = scratch / f"{durability}.sqlite3"
        table["path"] = str(path)
    else:
        assert url is not None
        _empty_postgres(url)
        table["url"] = url
    plugin = AuditPlugin()
    host = make_host(plugin, tools=[make_echo()], config={"plugin": {"audit": table}})

    async def main() -> float:
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(calls):
                nursery.start_soon(host.call, "echo", {"text": str(i)})
        await trio.to_thread.run_sync(plugin.flush)
        return time.perf_counter() - start

    seconds = trio.run(main)
    plugin.close()
    rows = _rows_sqlite(path) if store == "sqlite" else _rows_postgres(url or "")
    return {"store": store, "durability": durability, "calls": calls,
            "calls_per_s": round(calls / seconds), "rows": rows,
            "lost": plugin._writer.lost_total if plugin._writer else None}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--url", default=os.environ.get("DSH_TEST_POSTGRES_URL"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    stores = ["sqlite", *(["postgres"] if args.url else [])]
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for store in stores:
            for durability in ("sync", "async"):
                results.append(run(store, durability, args.calls, args.url, Path(scratch)))
    if args.json:
        print(json.dumps(results))
        return 0
    if args.url:
        print(f"postgres: {safe_url(args.url)}")
    print(f"{'store':10} {'durability':10} {'calls':>7} {'calls/s':>9} {'rows kept':>10}")
    for r in results:
        print(f"{r['store']:10} {r['durability']:10} {r['calls']:>7} {r['calls_per_s']:>9} "
              f"{r['rows']:>10}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
