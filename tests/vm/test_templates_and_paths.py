"""Templates (store, ownership shift) and the agent's path rules, without instances."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from corral.actors.runtime_errors import answer_for
from corral.vm import TemplateNotFound, TemplateStore, build_template, known_templates
from corral.vm.agent import paths
from corral.vm.agent.errors import AgentError
from corral.vm.templates import remove_abandoned_builds, shift_ownership


def test_unknown_template(tmp_path: Path) -> None:
    store = TemplateStore(tmp_path)
    assert "default" in known_templates() and store.exists("default")
    assert not store.exists("nope") and not store.is_built("default")
    with pytest.raises(TemplateNotFound) as excinfo:
        store.ensure_sync("nope")
    assert answer_for(excinfo.value) == (400, "INVALID_TEMPLATE")
    with pytest.raises(TemplateNotFound):
        build_template("nope", tmp_path / "nope")
    assert TemplateStore(tmp_path, build_missing=False).exists("default")
    with pytest.raises(TemplateNotFound):
        TemplateStore(tmp_path, build_missing=False).ensure_sync("default")


def test_a_build_removes_what_builds_that_died_left(tmp_path: Path) -> None:
    """A server stopped mid-build leaves `.<name>.build-<pid>` behind (its thread dies
    with it), and its mmdebstrap, dead of a broken pipe, the chroot's mounts: the next
    build of that template detaches them and removes the directory. Never a running
    build's (its process lives) nor one an orphaned mmdebstrap still works in (its
    command line names it), nor another template's."""
    dead, died_mounted, orphaned = (subprocess.Popen(["true"]) for _ in range(3))
    for process in (dead, died_mounted, orphaned):
        process.wait()
    left = tmp_path / f".desktop.build-{dead.pid}"
    (left / "rootfs" / "usr").mkdir(parents=True)
    (left / "rootfs" / "usr" / "big").write_bytes(b"x" * 4096)
    running = tmp_path / f".desktop.build-{os.getpid()}"
    running.mkdir()
    other = tmp_path / f".default.build-{dead.pid}"
    other.mkdir()
    mounted = tmp_path / f".desktop.build-{died_mounted.pid}"
    for point in ("proc", "dev/shm"):
        (mounted / "rootfs" / point).mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "none", str(mounted / "rootfs" / point)], check=True)
    (mounted / "rootfs" / "dev" / "shm" / "file").write_text("in a mount")
    finishing = tmp_path / f".desktop.build-{orphaned.pid}"
    (finishing / "rootfs").mkdir(parents=True)
    worker = subprocess.Popen(["sh", "-c", "sleep 30", str(finishing / "rootfs")])  # as mmdebstrap names its chroot
    try:
        assert remove_abandoned_builds(tmp_path / "desktop") == sorted([left, mounted])
        assert not left.exists() and not mounted.exists()
        assert not any(str(tmp_path) in line for line in Path("/proc/self/mounts").read_text().splitlines())
        assert running.is_dir() and other.is_dir() and finishing.is_dir()
    finally:
        worker.kill()
        worker.wait()
        for point in ("dev/shm", "proc"):
            subprocess.run(["umount", str(mounted / "rootfs" / point)], capture_output=True, check=False)
    assert remove_abandoned_builds(tmp_path / "desktop") == [finishing]


def test_built_default_template(template_store: TemplateStore) -> None:
    rootfs = template_store.rootfs("default")
    manifest = template_store.manifest("default")
    assert manifest is not None and manifest["uid_base"] == template_store.uid_base
    for tool in ("python3", "pip", "curl", "wget", "git", "vim", "jq", "htop", "tree", "zip", "unzip"):
        assert (rootfs / "usr" / "bin" / tool).exists(), tool
    assert (rootfs / "workspace").is_dir()
    assert (rootfs / "etc" / "passwd").stat().st_uid == template_store.uid_base


def test_shift_ownership_keeps_setuid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root (tools/test runs as root)")
    (tmp_path / "dir").mkdir()
    tool = tmp_path / "dir" / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 0, 5)
    tool.chmod(0o4755)
    (tmp_path / "link").symlink_to("dir/tool")
    shift_ownership(tmp_path, 100_000)
    st = tool.stat()
    assert (st.st_uid, st.st_gid) == (100_000, 100_005)
    assert stat.S_IMODE(st.st_mode) == 0o4755
    assert os.lstat(tmp_path / "link").st_uid == 100_000
    assert tmp_path.stat().st_uid == 100_000


@pytest.mark.parametrize(
    "path, expected",
    [
        ("/workspace", True),
        ("/workspace/a/b", True),
        ("/tmp", True),
        ("/tmpfoo", False),
        ("/workspacex/a", False),
        ("/etc/passwd", False),
        ("/", False),
        ("/root/.bashrc", True),
        ("/home/user", True),
        ("/opt", True),
        ("/srv/x", True),
    ],
)
def test_allowed_by_whole_components(path: str, expected: bool) -> None:
    assert paths.is_allowed(path) is expected


def test_expand_and_resolve() -> None:
    assert paths.expand("~") == "/root"
    assert paths.expand("~/x") == "/root/x"
    for bad, code in (("", "MISSING_PATH"), (None, "MISSING_PATH"), ("relative", "INVALID_PATH"), ("~user", "INVALID_PATH")):
        with pytest.raises(AgentError) as excinfo:
            paths.expand(bad)
        assert excinfo.value.code == code
    assert paths.resolve("/tmp/../tmp/./new-file") == "/tmp/new-file"
    with pytest.raises(AgentError) as excinfo:
        paths.resolve("/tmp/../etc/passwd")
    assert excinfo.value.code == "FORBIDDEN_PATH" and excinfo.value.status == 403
