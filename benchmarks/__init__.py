"""Benchmarks: jupyter-exec against the raw jupyter_client floor, measured in one run.

Run from the repository root::

    python -m benchmarks            # full run (a few minutes on 2 cores)
    python -m benchmarks --quick    # CI smoke run (under a minute)
    python -m benchmarks --json results.json --only warm,timeout

Modules: :mod:`benchmarks.core` (rows, registry, statistics, table),
:mod:`benchmarks.floor` (the raw jupyter_client clients), :mod:`benchmarks.cases`
(local-kernel cases) and :mod:`benchmarks.docker_cases` (reserved for Docker rows).
"""
