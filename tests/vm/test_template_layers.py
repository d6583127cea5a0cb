"""Layered templates in the template store: a build's files kept as a layer over a base."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from corral.vm import TemplateBuildFailed, TemplateNotFound, TemplateStore


def _fake_recipe_template(root: Path, name: str, uid_base: int) -> None:
    from corral.vm.templates import BUILD_REVISION, RECIPES

    (root / name / "rootfs").mkdir(parents=True)
    manifest = {"name": name, "uid_base": uid_base, "revision": BUILD_REVISION, "recipe_revision": RECIPES[name].revision}
    (root / name / "manifest.json").write_text(json.dumps(manifest))


async def test_layers_stack_over_their_base_and_keep_older_ones(tmp_path: Path) -> None:
    store = TemplateStore(tmp_path / "templates", build_missing=False)
    _fake_recipe_template(store.root, "default", store.uid_base)
    _fake_recipe_template(store.root, "desktop", store.uid_base)
    files = tmp_path / "upper"
    (files / "opt").mkdir(parents=True)
    (files / "opt" / "marker").write_text("v1")

    assert not store.exists("tpl-1") and not store.is_layered("tpl-1")
    size = store.add_layer_sync("tpl-1", "default", "build-a", files)
    assert size == 2 and store.exists("tpl-1") and store.is_layered("tpl-1") and store.is_built("tpl-1")
    first = await store.lower("tpl-1")
    assert first == f"{store.root / 'tpl-1' / 'layers' / 'build-a'}:{store.root / 'default' / 'rootfs'}"

    (files / "opt" / "marker").write_text("v2!")
    store.add_layer_sync("tpl-1", "default", "build-b", files)
    assert (await store.lower("tpl-1")).startswith(str(store.root / "tpl-1" / "layers" / "build-b") + ":")
    assert (store.root / "tpl-1" / "layers" / "build-a" / "opt" / "marker").read_text() == "v1"  # instances keep theirs

    # The API's name of the desktop recipe works as a base and as a template.
    store.add_layer_sync("tpl-2", "svc-desktop", "build-c", files)
    assert (await store.lower("tpl-2")).endswith(str(store.root / "desktop" / "rootfs"))
    assert store.exists("svc-desktop") and not store.is_layered("svc-desktop")

    store.remove_sync("tpl-1")
    assert not (store.root / "tpl-1").exists() and not store.exists("tpl-1")
    store.remove_sync("default")  # a recipe template is never removed this way
    assert store.is_built("default")
    with pytest.raises(TemplateNotFound):
        await store.lower("tpl-1")


async def test_a_layer_packed_on_one_node_is_kept_whole_on_another_and_a_foreign_one_refused(tmp_path: Path) -> None:
    here = TemplateStore(tmp_path / "here", build_missing=False)
    there = TemplateStore(tmp_path / "there", build_missing=False)
    for store in (here, there):
        _fake_recipe_template(store.root, "default", store.uid_base)
    files = tmp_path / "upper"
    (files / "opt").mkdir(parents=True)
    (files / "opt" / "marker").write_text("v1")
    os.chown(files / "opt" / "marker", here.uid_base + 1000, here.uid_base + 1000)
    os.mknod(files / "gone", 0o600 | stat.S_IFCHR, os.makedev(0, 0))  # an overlay whiteout
    here.add_layer_sync("tpl", "default", "build-a", files)
    archive = tmp_path / "tpl.tar"
    await here.pack_layer("tpl", archive)

    assert not there.has_layer("tpl", "build-a")
    await there.unpack_layer("tpl", archive)
    await there.unpack_layer("tpl", archive)  # again (two sandboxes at once): the same
    assert there.has_layer("tpl", "build-a") and not there.has_layer("tpl", "build-b")
    kept = there.root / "tpl" / "layers" / "build-a"
    assert (kept / "opt" / "marker").read_text() == "v1"
    assert (kept / "opt" / "marker").stat().st_uid == here.uid_base + 1000
    assert stat.S_ISCHR((kept / "gone").lstat().st_mode)
    assert (await there.lower("tpl")).startswith(f"{kept}:")
    assert not [path for path in there.root.iterdir() if path.name.endswith(".partial")]

    # A newer layer made here meanwhile stays the current one when an older one arrives.
    there.add_layer_sync("tpl", "default", "build-b", files)
    manifest = json.loads((there.root / "tpl" / "manifest.json").read_text())
    (there.root / "tpl" / "manifest.json").write_text(json.dumps({**manifest, "built_at": "2999-01-01T00:00:00Z"}))
    await there.unpack_layer("tpl", archive)
    assert there.has_layer("tpl", "build-b") and (there.root / "tpl" / "layers" / "build-a").is_dir()

    with pytest.raises(TemplateBuildFailed, match="not a layer of template other"):
        await there.unpack_layer("other", archive)  # an archive under another template's name
    foreign = TemplateStore(tmp_path / "foreign", uid_base=here.uid_base + 65536, build_missing=False)
    with pytest.raises(TemplateBuildFailed, match="owned from uid"):
        await foreign.unpack_layer("tpl", archive)
    assert not (foreign.root / "tpl").exists() and not (there.root / "other").exists()
    with pytest.raises(TemplateNotFound):
        await there.pack_layer("missing", tmp_path / "missing.tar")
