"""``python -m benchmarks``: run the registered cases and print one table."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

import benchmarks.cases
import benchmarks.checkpoint_cases
import benchmarks.cluster_cases
import benchmarks.docker_cases
import benchmarks.e2b_cases
import benchmarks.e2b_lifecycle_cases
import benchmarks.fork_cases
import benchmarks.hostkill_cases
import benchmarks.language_cases
import benchmarks.nbclient_cases
import benchmarks.network_cases
import benchmarks.replay_cases
import benchmarks.rss_cases
import benchmarks.sleep_cases
import benchmarks.sleepmany_cases
import benchmarks.startup_cases
import benchmarks.state_cases
from benchmarks.core import CASES, Case, Config, Row, case, machine_info, progress, render_table
from benchmarks.scale_cases import SCALE_CASES

for _name, _func in SCALE_CASES:
    case(_name)(_func)

# Imported for their @case registrations, in table order.
_ = (
    benchmarks.startup_cases,
    benchmarks.cases,
    benchmarks.nbclient_cases,
    benchmarks.docker_cases,
    benchmarks.replay_cases,
    benchmarks.rss_cases,
    benchmarks.fork_cases,
    benchmarks.e2b_cases,
    benchmarks.e2b_lifecycle_cases,
    benchmarks.network_cases,
    benchmarks.checkpoint_cases,
    benchmarks.language_cases,
    benchmarks.state_cases,
    benchmarks.sleep_cases,
    benchmarks.hostkill_cases,
    benchmarks.sleepmany_cases,
    benchmarks.cluster_cases,
)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure jupyter-exec against the raw jupyter_client floor "
        "(KernelManager + execute_interactive) in one run and print a table.",
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (CI)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also save the results as JSON")
    parser.add_argument(
        "--only", metavar="CASES", help="comma-separated case names to run (see --list)"
    )
    parser.add_argument(
        "--group",
        default="all",
        choices=["local", "docker", "all"],
        help="which group of cases to run (default: all; Docker rows say 'skipped' "
        "without an engine)",
    )
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    return parser.parse_args(argv)


def _select(args: argparse.Namespace) -> list[Case]:
    chosen = [c for c in CASES.values() if args.group in ("all", c.group)]
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in CASES]
        if unknown:
            raise SystemExit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}")
        chosen = [CASES[n] for n in names]
    return chosen


def _run(selected: list[Case], cfg: Config) -> tuple[list[Row], dict[str, float], list[str]]:
    rows: list[Row] = []
    seconds: dict[str, float] = {}
    failures: list[str] = []
    for item in selected:
        progress(f"case {item.name}: {item.summary}")
        start = time.perf_counter()
        try:
            rows.extend(item.func(cfg))
        except Exception as exc:
            traceback.print_exc()
            failures.append(item.name)
            rows.append(Row(item.name, None, None, "s", f"FAILED: {type(exc).__name__}: {exc}"))
        seconds[item.name] = time.perf_counter() - start
        progress(f"case {item.name}: done in {seconds[item.name]:.1f} s")
    return rows, seconds, failures


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.list:
        for item in CASES.values():
            print(f"{item.name:16} [{item.group}] {item.summary}")
        return 0
    logging.basicConfig(level=logging.ERROR)
    selected = _select(args)
    if not selected:
        progress(f"no cases in group {args.group!r} yet (see benchmarks/docker_cases.py)")
        return 0
    cfg = Config.make(quick=args.quick)
    info = machine_info()
    load_before = os.getloadavg()
    started = time.perf_counter()
    rows, seconds, failures = _run(selected, cfg)
    total = time.perf_counter() - started
    info["loadavg_1min_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    header = (
        f"jupyter-exec {info['jupyter_exec']} vs raw jupyter_client {info['jupyter_client']} "
        f"(ipykernel {info['ipykernel']}, pyzmq {info['pyzmq']}, Python {info['python']}, "
        f"{info['cpus']} CPUs){' - QUICK run' if cfg.quick else ''}; total {total:.0f} s; "
        f"1-min load average before/after: {info['loadavg_1min_before_after']} "
        "(other load on the machine adds noise to both columns alike)"
    )
    print(header)
    print()
    print(render_table(rows))
    if args.json:
        payload = {
            "machine": info,
            "config": vars(cfg),
            "case_seconds": seconds,
            "total_seconds": total,
            "rows": [r.to_dict() for r in rows],
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        progress(f"results saved to {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
