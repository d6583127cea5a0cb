"""docs/client.md's examples run, in order, against a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.client.support import base_url, in_thread
from tests.support import Api, Tenant

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_page_has_examples() -> None:
    assert len(BLOCK.findall(DOC.read_text())) >= 8


async def test_the_examples_run(runtime_api: Api, owner: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_API_URL", base_url(runtime_api))
    monkeypatch.setenv("CORRAL_API_KEY", owner.key)
    blocks = BLOCK.findall(DOC.read_text())
    namespace: dict[str, object] = {"__name__": "docs_client"}

    def run() -> None:
        for number, source in enumerate(blocks, 1):
            code = compile(source, f"{DOC.name} example {number}", "exec")
            exec(code, namespace)

    await in_thread(run)
