"""The files API below a sandbox, every route with its errors, against a real instance."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.support import Api, Tenant


class Files:
    def __init__(self, api: Api, tenant: Tenant, sandbox_id: str) -> None:
        self.api, self.key, self.base = api, tenant.key, f"/api/v1/sandboxes/{sandbox_id}/files"

    async def call(self, method: str, suffix: str = "", **kwargs: Any) -> Any:
        return await self.api.request(method, f"{self.base}{suffix}", key=self.key, **kwargs)

    async def exec(self, command: str) -> dict[str, Any]:
        sandbox = self.base.rsplit("/files", 1)[0]
        response = await self.api.request("POST", f"{sandbox}/exec", key=self.key, json={"command": command})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


@pytest.fixture
async def files(runtime_api: Api) -> Files:
    tenant = await runtime_api.create_tenant()
    created = await runtime_api.request("POST", "/api/v1/sandboxes", key=tenant.key, json={})
    assert created.status_code == 201
    return Files(runtime_api, tenant, created.json()["data"]["id"])


async def test_upload_to_default_dir_explicit_path_and_limits(files: Files) -> None:
    up = await files.call("POST", "/upload", files={"file": ("hello.txt", b"hi there")})
    assert up.status_code == 201, up.text
    assert up.json() == {"success": True, "file": {"path": "/workspace/hello.txt", "filename": "hello.txt", "size_bytes": 8}}
    into_dir = await files.call("POST", "/upload", files={"file": ("data.bin", b"\x00\x01")}, data={"path": "/tmp/in/"})
    assert into_dir.json()["file"]["path"] == "/tmp/in/data.bin"
    exact = await files.call("POST", "/upload", files={"file": ("x", b"abc")}, data={"path": "/root/renamed.txt"})
    assert exact.json()["file"] == {"path": "/root/renamed.txt", "filename": "renamed.txt", "size_bytes": 3}
    assert (await files.exec("cat /workspace/hello.txt /root/renamed.txt"))["stdout"] == "hi thereabc"
    missing = await files.call("POST", "/upload", data={"path": "/workspace/"})
    assert missing.status_code == 400 and code(missing) == "MISSING_FILE"
    too_big = await files.call("POST", "/upload", files={"file": ("big", b"x" * (10 * 1024 * 1024 + 1))})
    assert too_big.status_code == 413 and code(too_big) == "FILE_TOO_LARGE"
    forbidden = await files.call("POST", "/upload", files={"file": ("p", b"x")}, data={"path": "/etc/evil"})
    assert forbidden.status_code == 403 and code(forbidden) == "FORBIDDEN_PATH"


async def test_write_utf8_and_base64(files: Files) -> None:
    text = await files.call("POST", "/write", json={"path": "/workspace/a/b.txt", "content": "héllo"})
    assert text.status_code == 201 and text.json() == {"success": True, "file": {"path": "/workspace/a/b.txt", "size_bytes": 6}}
    binary = await files.call("POST", "/write", json={"path": "/workspace/c.bin", "content": base64.b64encode(b"\xff\x00").decode(), "encoding": "base64"})
    assert binary.status_code == 201 and binary.json()["file"]["size_bytes"] == 2
    assert (await files.exec("od -An -tx1 /workspace/c.bin"))["stdout"].split() == ["ff", "00"]
    bad64 = await files.call("POST", "/write", json={"path": "/workspace/d", "content": "!!!", "encoding": "base64"})
    assert bad64.status_code == 400 and code(bad64) == "INVALID_BODY"
    no_path = await files.call("POST", "/write", json={"content": "x"})
    assert no_path.status_code == 400 and code(no_path) == "MISSING_PATH"
    relative = await files.call("POST", "/write", json={"path": "workspace/x", "content": "x"})
    assert relative.status_code == 400 and code(relative) == "INVALID_PATH"
    outside = await files.call("POST", "/write", json={"path": "/etc/passwd", "content": "x"})
    assert outside.status_code == 403 and code(outside) == "FORBIDDEN_PATH"


async def test_list_stat_mkdir(files: Files) -> None:
    await files.call("POST", "/write", json={"path": "/workspace/one.txt", "content": "1"})
    made = await files.call("POST", "/mkdir", json={"path": "/workspace/x/y/z", "recursive": True})
    assert made.status_code == 201 and made.json() == {"success": True, "path": "/workspace/x/y/z"}
    no_parent = await files.call("POST", "/mkdir", json={"path": "/workspace/p/q"})
    assert no_parent.status_code in (404, 409, 400)
    listing = await files.call("GET")
    assert listing.status_code == 200
    body = listing.json()
    assert body["path"] == "/workspace"
    entries = {f["name"]: f for f in body["files"]}
    assert entries["one.txt"]["type"] == "file" and entries["one.txt"]["size_bytes"] == 1
    assert entries["x"]["type"] == "directory" and entries["x"]["permissions"].startswith("d")
    assert set(entries["one.txt"]) >= {"name", "type", "size_bytes", "permissions", "modified_at"}
    stat = await files.call("GET", "/stat", params={"path": "/workspace/one.txt"})
    assert stat.status_code == 200
    assert set(stat.json()) >= {"path", "type", "size_bytes", "permissions", "owner", "group", "modified_at", "created_at"}
    assert stat.json()["owner"] == "root"
    gone = await files.call("GET", "/stat", params={"path": "/workspace/nope"})
    assert gone.status_code == 404 and code(gone) == "FILE_NOT_FOUND"
    no_path = await files.call("GET", "/stat")
    assert no_path.status_code == 400 and code(no_path) == "MISSING_PATH"


async def test_download_and_export(files: Files) -> None:
    await files.call("POST", "/write", json={"path": "/workspace/page.html", "content": "<h1>hi</h1>"})
    download = await files.call("GET", "/download", params={"path": "/workspace/page.html"})
    assert download.status_code == 200 and download.content == b"<h1>hi</h1>"
    assert download.headers["content-type"].startswith("text/html")
    assert 'filename="page.html"' in download.headers["content-disposition"]
    assert download.headers["content-disposition"].startswith("attachment")
    absent = await files.call("GET", "/download", params={"path": "/workspace/nope"})
    assert absent.status_code == 404 and code(absent) == "FILE_NOT_FOUND"
    no_path = await files.call("GET", "/download")
    assert no_path.status_code == 400 and code(no_path) == "MISSING_PATH"
    export = await files.call("POST", "/export", json={"path": "/workspace/page.html"})
    assert export.status_code == 200
    body = export.json()
    assert base64.b64decode(body["content_base64"]) == b"<h1>hi</h1>"
    assert body["file"]["filename"] == "page.html" and body["file"]["size_bytes"] == 11
    assert body["file"]["content_type"] == "text/html" and body["success"] is True
    await files.call("POST", "/write", json={"path": "/workspace/empty", "content": ""})
    empty = await files.call("POST", "/export", json={"path": "/workspace/empty"})
    assert empty.status_code == 404 and code(empty) == "FILE_NOT_FOUND"
    missing = await files.call("POST", "/export", json={})
    assert missing.status_code == 400 and code(missing) == "MISSING_PATH"


async def test_rename_copy_chmod_delete(files: Files) -> None:
    await files.call("POST", "/write", json={"path": "/workspace/a.txt", "content": "A"})
    await files.call("POST", "/write", json={"path": "/workspace/b.txt", "content": "B"})
    taken = await files.call("POST", "/rename", json={"source": "/workspace/a.txt", "destination": "/workspace/b.txt"})
    assert taken.status_code == 409 and code(taken) == "DESTINATION_EXISTS"
    absent = await files.call("POST", "/rename", json={"source": "/workspace/zz", "destination": "/workspace/yy"})
    assert absent.status_code == 404 and code(absent) == "FILE_NOT_FOUND"
    moved = await files.call("POST", "/rename", json={"source": "/workspace/a.txt", "destination": "/tmp/a.txt"})
    assert moved.status_code == 200 and moved.json() == {"success": True, "source": "/workspace/a.txt", "destination": "/tmp/a.txt"}
    escape = await files.call("POST", "/rename", json={"source": "/tmp/a.txt", "destination": "/etc/a.txt"})
    assert escape.status_code == 403 and code(escape) == "FORBIDDEN_PATH"
    copied = await files.call("POST", "/copy", json={"source": "/tmp/a.txt", "destination": "/workspace/copy.txt"})
    assert copied.status_code == 201 and copied.json()["destination"] == "/workspace/copy.txt"
    await files.call("POST", "/mkdir", json={"path": "/workspace/dir"})
    directory = await files.call("POST", "/copy", json={"source": "/workspace/dir", "destination": "/workspace/dir2"})
    assert directory.status_code >= 400
    no_dest = await files.call("POST", "/copy", json={"source": "/tmp/a.txt"})
    assert no_dest.status_code == 400
    chmod = await files.call("POST", "/chmod", json={"path": "/workspace/copy.txt", "mode": "750"})
    assert chmod.status_code == 200 and chmod.json()["mode"] in ("750", "0750")
    assert (await files.exec("stat -c %a /workspace/copy.txt"))["stdout"] == "750\n"
    no_mode = await files.call("POST", "/chmod", json={"path": "/workspace/copy.txt"})
    assert no_mode.status_code == 400 and code(no_mode) == "MISSING_MODE"
    bad_mode = await files.call("POST", "/chmod", json={"path": "/workspace/copy.txt", "mode": "rwx"})
    assert bad_mode.status_code == 400
    deleted = await files.call("DELETE", json={"path": "/workspace/copy.txt"})
    assert deleted.status_code == 200 and deleted.json() == {"success": True, "path": "/workspace/copy.txt"}
    assert (await files.exec("test -e /workspace/copy.txt; echo $?"))["stdout"] == "1\n"
    no_path = await files.call("DELETE", json={})
    assert no_path.status_code == 400 and code(no_path) == "MISSING_PATH"
    forbidden = await files.call("DELETE", json={"path": "/usr/bin/python3"})
    assert forbidden.status_code == 403 and code(forbidden) == "FORBIDDEN_PATH"


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "/workspace/../etc/passwd", "/workspacefoo/x", "/proc/1/environ", "~/../../etc/shadow", "/"],
)
async def test_paths_outside_the_allowed_prefixes_are_forbidden(files: Files, path: str) -> None:
    response = await files.call("GET", "/download", params={"path": path})
    assert response.status_code == 403, (path, response.text)
    assert code(response) == "FORBIDDEN_PATH"


async def test_planted_symlinks_cannot_escape(files: Files) -> None:
    await files.exec(
        "ln -s /etc/passwd /workspace/passwd; ln -s /etc /workspace/etc; ln -s /workspace/real.txt /workspace/ok;"
        " ln -s /proc/1/root /workspace/init-root"
    )
    await files.call("POST", "/write", json={"path": "/workspace/real.txt", "content": "fine"})
    for path in ("/workspace/passwd", "/workspace/etc/passwd", "/workspace/init-root/etc/hostname"):
        response = await files.call("GET", "/download", params={"path": path})
        assert response.status_code == 403 and code(response) == "FORBIDDEN_PATH", path
    write_through = await files.call("POST", "/write", json={"path": "/workspace/etc/evil", "content": "x"})
    assert write_through.status_code == 403
    inside = await files.call("GET", "/download", params={"path": "/workspace/ok"})
    assert inside.status_code == 200 and inside.content == b"fine"


async def test_a_planted_fifo_is_no_file_and_holds_nothing_up(files: Files) -> None:
    """Reading, writing or copying a FIFO nobody writes to would block for good: each
    answers 400 INVALID_PATH at once, and the sandbox answers the next call."""
    await files.exec("mkfifo /workspace/pipe")
    with trio.fail_after(20):
        calls = [
            ("GET", "/download", {"params": {"path": "/workspace/pipe"}}),
            ("POST", "/write", {"json": {"path": "/workspace/pipe", "content": "x"}}),
            ("POST", "/copy", {"json": {"source": "/workspace/pipe", "destination": "/workspace/pipe2"}}),
        ]
        for method, suffix, kwargs in calls:
            response = await files.call(method, suffix, **kwargs)
            assert response.status_code == 400 and code(response) == "INVALID_PATH", (suffix, response.text)
            assert "not a regular file: /workspace/pipe" in response.json()["error"]["message"]
        assert (await files.exec("echo alive"))["stdout"] == "alive\n"


def resident_bytes() -> int:
    """This process's resident memory (the server under test runs in it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_download_streams_however_large_the_file(files: Files) -> None:
    """A 512 MiB file (sparse: it costs the sandbox no disk) comes whole, with its
    Content-Length, while the server's memory stays where it was: it is never held
    whole on the way (before, it was, twice, and a sparse file of any size filled
    the node's memory)."""
    size = 512 << 20
    await files.exec(f"truncate -s {size} /workspace/sparse.bin")
    before = resident_bytes()
    received, peak = 0, before
    async with files.api.client.stream(
        "GET", f"{files.base}/download", params={"path": "/workspace/sparse.bin"}, headers={"Authorization": f"Bearer {files.key}"}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-length"] == str(size)
        async for chunk in response.aiter_raw():
            if received == 0:
                assert chunk.strip(b"\0") == b""
            received += len(chunk)
            if received % (64 << 20) < len(chunk):
                peak = max(peak, resident_bytes())
    assert received == size
    assert peak - before < 256 << 20, f"the server's memory grew by {(peak - before) >> 20} MiB"


async def test_a_file_that_grows_as_it_is_downloaded_comes_at_its_size_when_opened(files: Files) -> None:
    await files.exec("nohup sh -c 'while :; do echo y; done > /workspace/growing' >/dev/null 2>&1 & sleep 0.5")
    with trio.fail_after(60):
        response = await files.call("GET", "/download", params={"path": "/workspace/growing"})
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content) > 0
    assert set(response.content) <= set(b"y\n")
    await files.exec("pkill -f 'while :'")


async def test_export_answers_files_up_to_ten_megabytes(files: Files) -> None:
    """Export carries the file in base64 inside JSON: at most 10 MB (the upload limit);
    past it, 413 FILE_TOO_LARGE, which names download instead."""
    limit = 10 * 1024 * 1024
    await files.exec(f"head -c {limit} /dev/urandom > /workspace/at-limit && head -c {limit + 1} /dev/zero > /workspace/past-limit")
    at_limit = await files.call("POST", "/export", json={"path": "/workspace/at-limit"})
    assert at_limit.status_code == 200 and at_limit.json()["file"]["size_bytes"] == limit
    assert len(base64.b64decode(at_limit.json()["content_base64"])) == limit
    past = await files.call("POST", "/export", json={"path": "/workspace/past-limit"})
    assert past.status_code == 413 and code(past) == "FILE_TOO_LARGE", past.text
    assert past.json()["error"]["message"] == (
        "/workspace/past-limit is 10485761 bytes, more than the 10485760 allowed here by export (download streams a file of any size)"
    )


@pytest.mark.parametrize(
    ("name", "fallback", "exact"),
    [
        ("файл.txt", "____.txt", "%D1%84%D0%B0%D0%B9%D0%BB.txt"),
        ("a\nb.txt", "a_b.txt", "a%0Ab.txt"),
        ('say "hi".txt', "say _hi_.txt", "say%20%22hi%22.txt"),
        ("100%25.txt", "100%25.txt", "100%2525.txt"),
    ],
)
async def test_any_file_name_downloads_and_exports(files: Files, name: str, fallback: str, exact: str) -> None:
    """A name with letters outside ASCII, a newline or quotes (a tenant's files are
    named anyhow) comes back under its own name: `filename*` exact, `filename` an ASCII
    stand-in (before, any of these was a 502 or a 500)."""
    path = f"/workspace/{name}"
    assert (await files.call("POST", "/write", json={"path": path, "content": "hello"})).status_code == 201
    download = await files.call("GET", "/download", params={"path": path})
    assert download.status_code == 200 and download.content == b"hello", download.text
    assert download.headers["content-disposition"] == f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{exact}"
    export = await files.call("POST", "/export", json={"path": path})
    assert export.status_code == 200 and export.json()["file"]["path"] == path and export.json()["file"]["filename"] == name
