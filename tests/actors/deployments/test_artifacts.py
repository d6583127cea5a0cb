"""Artifacts: deterministic packing that never follows a tenant's links, and unpacking."""

from __future__ import annotations

import hashlib
import os
import tarfile
from pathlib import Path

import pytest

from corral.actors.deployments import artifacts


def make_tree(root: Path, stamp: int) -> None:
    (root / "site" / "b").mkdir(parents=True)
    (root / "site" / "index.html").write_text("<h1>hi</h1>")
    (root / "site" / "b" / "run.sh").write_text("#!/bin/sh\n")
    (root / "site" / "b" / "run.sh").chmod(0o700)
    (root / "site" / "a.txt").write_bytes(os.urandom(0) + b"a")
    for path in (root / "site").rglob("*"):
        os.utime(path, (stamp, stamp))


def test_identical_content_packs_to_the_same_digest(tmp_path: Path) -> None:
    make_tree(tmp_path / "one", 1_000)
    make_tree(tmp_path / "two", 2_000_000)
    first = artifacts.pack(tmp_path / "one", "/site", tmp_path / "work")
    second = artifacts.pack(tmp_path / "two", "site", tmp_path / "work")
    assert first is not None and second is not None
    assert first.sha256 == second.sha256 == hashlib.sha256(first.tar_path.read_bytes()).hexdigest()
    assert first.source_sha256 == second.source_sha256
    assert [f["path"] for f in first.manifest["files"]] == ["a.txt", "b/run.sh", "index.html"]
    assert first.manifest["total_bytes"] == 1 + 10 + 11 and first.file_count == 3
    with tarfile.open(first.tar_path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["b/run.sh"].mode == 0o755 and members["a.txt"].mode == 0o644
    assert {m.mtime for m in members.values()} == {0} and {m.uid for m in members.values()} == {0}
    (tmp_path / "two" / "site" / "a.txt").write_bytes(b"b")
    changed = artifacts.pack(tmp_path / "two", "site", tmp_path / "work")
    assert changed is not None and changed.sha256 != first.sha256


def test_links_and_special_files_are_never_followed(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    root = tmp_path / "root"
    (root / "site").mkdir(parents=True)
    (root / "site" / "ok.txt").write_text("ok")
    (root / "site" / "leak.txt").symlink_to(secret)
    (root / "site" / "dir").symlink_to(tmp_path)
    os.mkfifo(root / "site" / "pipe")
    (root / "outside").symlink_to(tmp_path)
    packed = artifacts.pack(root, "/site", tmp_path / "work")
    assert packed is not None
    assert [f["path"] for f in packed.manifest["files"]] == ["ok.txt"]
    with pytest.raises(artifacts.OutputPathMissing):
        artifacts.pack(root, "/outside", tmp_path / "work")  # a link as the output path itself
    with pytest.raises(artifacts.OutputPathMissing):
        artifacts.pack(root, "/site/../..", tmp_path / "work")
    (root / "empty").mkdir()
    assert artifacts.pack(root, "/empty", tmp_path / "work") is None


def test_unpack_once(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", 5)
    packed = artifacts.pack(tmp_path / "src", "site", tmp_path / "work")
    assert packed is not None
    destination = tmp_path / "sites" / packed.sha256
    artifacts.unpack(packed.tar_path, destination)
    assert (destination / "index.html").read_text() == "<h1>hi</h1>"
    artifacts.unpack(packed.tar_path, destination)  # already there: nothing to do
    assert sorted(p.name for p in (tmp_path / "sites").iterdir()) == [packed.sha256]


def test_too_many_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_tree(tmp_path / "src", 5)
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_FILES", 2)
    with pytest.raises(artifacts.ArtifactTooLarge):
        artifacts.pack(tmp_path / "src", "site", tmp_path / "work")
    monkeypatch.setattr(artifacts, "MAX_ARTIFACT_FILES", 3)
    assert artifacts.pack(tmp_path / "src", "site", tmp_path / "work") is not None


def test_pack_copies_the_tree_it_packs_and_adopt_keeps_the_first(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", 5)
    staging = tmp_path / "staging"
    packed = artifacts.pack(tmp_path / "src", "site", tmp_path / "work", staging)
    assert packed is not None
    copied = sorted(str(p.relative_to(staging)) for p in staging.rglob("*") if p.is_file())
    assert copied == ["a.txt", "b/run.sh", "index.html"]
    assert (staging / "b" / "run.sh").stat().st_mode & 0o777 == 0o755 & ~current_umask()
    destination = tmp_path / "sites" / packed.sha256
    artifacts.adopt_tree(staging, destination)
    assert (destination / "index.html").read_text() == "<h1>hi</h1>" and not staging.exists()
    again = tmp_path / "again"
    assert artifacts.pack(tmp_path / "src", "site", tmp_path / "work", again) is not None
    (destination / "marker").write_text("first")
    artifacts.adopt_tree(again, destination)  # the same content was there first: kept
    assert (destination / "marker").exists() and not again.exists()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
