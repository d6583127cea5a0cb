"""The `corral` command beyond `serve`: templates, and the progress display."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from corral.progress import TEMPLATE_STAGES, StageProgress

CORRAL = [sys.executable, "-m", "corral"]


def test_templates_list_and_unknown_template(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_TEMPLATE_DIR": str(tmp_path)}
    listed = subprocess.run([*CORRAL, "templates", "list"], capture_output=True, text=True, env=env, check=True)
    assert listed.stdout.startswith("default\tnot built\t")
    unknown = subprocess.run([*CORRAL, "templates", "build", "nope"], capture_output=True, text=True, env=env)
    assert unknown.returncode == 1
    assert "unknown template: nope" in unknown.stderr


def test_progress_advances_with_the_builds_own_phases() -> None:
    out = io.StringIO()
    progress = StageProgress("template default", TEMPLATE_STAGES, out)
    for line in [
        "I: automatically chosen mode: root",
        "I: running apt-get update...",
        "Get:1 http://deb.debian.org bookworm InRelease",
        "I: downloading packages with apt...",
        "I: extracting archives...",
        "I: installing essential packages...",
        "I: installing remaining packages inside the chroot...",
        "I: cleaning package lists and apt cache...",
        "I: success in 31.2 seconds",
        "template 'default' ready in 39.0 s at /x",
    ]:
        progress(line)
    progress.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "template default: [2/9] reading package lists"
    assert lines[-1] == "template default: [9/9] done"
    assert [line.split("]")[0].split("[")[1] for line in lines] == [f"{n}/9" for n in range(2, 10)]


def test_progress_writes_nothing_once_finished() -> None:
    """A publish's steps come from another thread: one that arrives after the command
    finished its display (and is about to print its result or error) is dropped."""
    out = io.StringIO()
    progress = StageProgress("template default", TEMPLATE_STAGES, out)
    progress("I: running apt-get update...")
    progress.finish()
    progress("I: downloading packages with apt...")
    progress.finish()
    assert out.getvalue() == "template default: [2/9] reading package lists\n"
