"""The node's runtime holder (`corral.actors.runtime`) at a node's start, without instances."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from corral.actors.runtime import RuntimeHolder
from corral.config import Settings


async def test_a_nodes_start_removes_template_builds_a_stopped_node_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node stopped while it built a template left its build directory; the next
    start removes it before anything else, whether or not a build is needed then."""
    templates = tmp_path / "templates"
    dead = subprocess.Popen(["true"])
    dead.wait()
    abandoned = [templates / f".{name}.build-{dead.pid}" for name in ("default", "desktop")]
    for work in abandoned:
        (work / "rootfs" / "etc").mkdir(parents=True)
    built: list[str] = []

    async def prepare_template(name: str = "default") -> None:  # as if built: no mmdebstrap here
        built.append(name)
        assert not any(work.exists() for work in abandoned), "removed before any build"

    holder = RuntimeHolder(Settings(data_dir=tmp_path, template_dir=templates), make_network=lambda: None)  # type: ignore[arg-type, return-value]
    monkeypatch.setattr(holder, "prepare_template", prepare_template)
    await holder.prepare_templates()
    assert built == ["default", "desktop"]
    assert sorted(path.name for path in templates.iterdir()) == []
