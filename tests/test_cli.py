"""The `corral` command beyond `serve`: templates, and the progress display."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from corral.progress import TEMPLATE_STAGES, StageProgress
from corral.vm.templates import BUILD_REVISION, RECIPES, TemplateStore

CORRAL = [sys.executable, "-m", "corral"]


def test_templates_list_and_unknown_template(tmp_path: Path) -> None:
    env = {**os.environ, "CORRAL_TEMPLATE_DIR": str(tmp_path)}
    listed = subprocess.run([*CORRAL, "templates", "list"], capture_output=True, text=True, env=env, check=True)
    assert listed.stdout.startswith("default\tnot built\t")
    unknown = subprocess.run([*CORRAL, "templates", "build", "nope"], capture_output=True, text=True, env=env)
    assert unknown.returncode == 1
    assert "unknown template: nope" in unknown.stderr


def test_build_if_missing_leaves_a_built_template_alone_and_still_refuses_an_unknown_one(tmp_path: Path) -> None:
    """What tools/serve runs before the server: a built template is not built again
    (no mmdebstrap, no progress), and a name no recipe has is an error either way."""
    store = TemplateStore(tmp_path)
    recipe = RECIPES["default"]
    store.template_dir("default").mkdir(parents=True)
    (store.template_dir("default") / "manifest.json").write_text(json.dumps(
        {"uid_base": store.uid_base, "revision": BUILD_REVISION, "recipe_revision": recipe.revision}
    ))
    assert store.is_built("default")
    env = {**os.environ, "CORRAL_TEMPLATE_DIR": str(tmp_path), "PATH": "/nonexistent"}  # no mmdebstrap to run
    built = subprocess.run([*CORRAL, "templates", "build", "default", "--if-missing"], capture_output=True, text=True, env=env)
    assert built.returncode == 0, built.stderr
    assert built.stdout == f"template default is built at {store.rootfs('default')}\n" and built.stderr == ""
    unknown = subprocess.run([*CORRAL, "templates", "build", "nope", "--if-missing"], capture_output=True, text=True, env=env)
    assert unknown.returncode == 1 and "unknown template: nope" in unknown.stderr
    # Not built: it is built (here it cannot be: no mmdebstrap on PATH, which it says).
    (store.template_dir("default") / "manifest.json").unlink()
    missing = subprocess.run([*CORRAL, "templates", "build", "default", "--if-missing"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "mmdebstrap is not installed" in missing.stderr


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
