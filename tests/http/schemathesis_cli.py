"""`python -m schemathesis.cli`, with one CPython 3.11 bug worked around.

After a RecursionError inside `ast.parse` (which hypothesis meets now and then while
describing a filter's lambda for a strategy's repr), CPython 3.11 up to 3.11.8 fails
every later `ast.parse` in the thread with "SystemError: AST constructor recursion
depth mismatch" (python/cpython gh-106905), which schemathesis reports as an error
of the run. A lambda's description is only ever shown in messages: when it cannot be
made, its name stands in.
"""

from __future__ import annotations

import runpy
from typing import Any

from hypothesis.internal import lambda_sources

_describe = lambda_sources.lambda_description


def _lambda_description(f: Any) -> str:
    try:
        return str(_describe(f))
    except (SystemError, RecursionError):
        return "lambda: <source not shown>"


lambda_sources.lambda_description = _lambda_description  # type: ignore[assignment]

if __name__ == "__main__":
    runpy.run_module("schemathesis.cli", run_name="__main__", alter_sys=True)
