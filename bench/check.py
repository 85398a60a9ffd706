"""Every benchmark's figures against issue 27's targets, as one table (``nox -s bench -- --check``).

``python bench/check.py --check [--only NAME ...] [--quick] [-v]`` runs each ``bench/bench_*.py``
with ``--check`` in turn, in its own process, and prints the markdown rows they print
(``| figure | min | median | target |``, ratios measured within one run of that script) as one
table. A script that does not accept ``--check`` yet is skipped with a line saying so, as is one
that fails; the others still run. ``--quick`` is passed on to the scripts whose ``--help``
offers it. Without ``--check`` this runs ``bench_pipeline.py`` with the same arguments (what
``nox -s bench`` always ran: ``--quick``, ``--json``).

Benchmarks are not tests: the exit status is 0 whatever the figures; it is 1 only when no
script produced a row.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
HEADER = "| figure | min | median | target |"
SEPARATOR = "|---|---|---|---|"
_TARGET = re.compile(r"^(?:[<>]=?\s*[\d.]+.*|-|)$")


def scripts(only: list[str]) -> list[pathlib.Path]:
    """``bench_*.py`` in name order (``--only cold`` keeps ``bench_cold.py``)."""
    found = sorted(HERE.glob("bench_*.py"))
    if only:
        wanted = {name.removeprefix("bench_").removesuffix(".py") for name in only}
        found = [p for p in found if p.stem.removeprefix("bench_") in wanted]
    return found


def rows_of(output: str) -> list[str]:
    """The table rows in a script's output: four cells, the last a target (or ``-``)."""
    rows = []
    for line in output.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")) or line in (HEADER, SEPARATOR):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 4 and _TARGET.match(cells[3]) and cells[0] != "figure":
            rows.append(line)
    return rows


def _offers(script: pathlib.Path, option: str) -> bool:
    done = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and option in done.stdout


def run_one(script: pathlib.Path, quick: bool, verbose: bool) -> tuple[list[str], str]:
    """The rows *script* prints with ``--check``, and one line saying how it went."""
    argv = [sys.executable, str(script), "--check"]
    if quick and _offers(script, "--quick"):
        argv.append("--quick")
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=HERE.parent)
    took = time.monotonic() - started
    if verbose:
        sys.stderr.write(done.stdout + done.stderr)
    if done.returncode != 0:
        if "unrecognized arguments: --check" in done.stderr:
            return [], f"{script.name}: skipped, it does not accept --check yet"
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"{script.name}: skipped, it failed (exit {done.returncode}): {last}"
    rows = rows_of(done.stdout)
    if not rows:
        return [], f"{script.name}: ran ({took:.0f} s) but printed no table rows"
    return rows, f"{script.name}: {len(rows)} row(s) in {took:.0f} s"


def check(only: list[str], quick: bool, verbose: bool) -> int:
    table: list[str] = []
    for script in scripts(only):
        sys.stderr.write(f"running {script.name} --check ...\n")
        sys.stderr.flush()
        rows, status = run_one(script, quick, verbose)
        print(status, flush=True)
        table.extend(rows)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nissue 27's table (each ratio measured in one run of its script; load {load}):\n")
    print(HEADER)
    print(SEPARATOR)
    for row in table:
        print(row)
    return 0 if table else 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--check" not in argv and not {"-h", "--help"} & set(argv):  # what nox -s bench ran
        pipeline = [sys.executable, str(HERE / "bench_pipeline.py"), *argv]
        return subprocess.run(pipeline, check=False).returncode
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="every script's rows as one table")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only bench_NAME.py (repeatable)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="pass --quick where offered")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each script's output")
    options = parser.parse_args(argv)
    return check(options.only, options.quick, options.verbose)


if __name__ == "__main__":
    sys.exit(main())
