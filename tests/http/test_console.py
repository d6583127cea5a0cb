"""The web console's files as the API serves them (the browser tests drive the pages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.static_files import MAX_FILE, StaticFiles
from tests.support import Api, assert_error


async def test_the_console_page_is_served_at_the_root(api: Api) -> None:
    response = await api.client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script type="module" src="/console/app.js">' in response.text
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["x-request-id"].startswith("req_")
    assert response.headers["cache-control"] == "no-cache"
    etag = response.headers["etag"]
    again = await api.client.get("/", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("app.js", "text/javascript; charset=utf-8"),
        ("views/sandboxes.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("vendor/xterm/xterm.mjs", "text/javascript; charset=utf-8"),
        ("vendor/xterm/xterm.css", "text/css; charset=utf-8"),
        ("vendor/xterm-addon-fit/addon-fit.mjs", "text/javascript; charset=utf-8"),
        ("vendor/novnc/core/rfb.js", "text/javascript; charset=utf-8"),
        ("vendor/novnc/vendor/pako/lib/zlib/inflate.js", "text/javascript; charset=utf-8"),
        ("vendor/xterm/LICENSE", "text/plain; charset=utf-8"),
        ("vendor/novnc/LICENSE.txt", "text/plain; charset=utf-8"),
    ],
)
async def test_modules_styles_and_licences_are_served(api: Api, path: str, content_type: str) -> None:
    response = await api.client.get(f"/console/{path}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == content_type
    assert response.headers["x-content-type-options"] == "nosniff"
    vendored = path.startswith("vendor/")
    assert response.headers["cache-control"] == ("public, max-age=86400" if vendored else "no-cache")


async def test_every_module_the_console_imports_is_served(api: Api) -> None:
    """Each relative `import ... from "./x.js"` of the console's own modules resolves."""
    import posixpath
    import re

    seen: set[str] = set()
    todo = ["app.js"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        response = await api.client.get(f"/console/{path}")
        assert response.status_code == 200, path
        if path.startswith("vendor/"):
            continue
        for target in re.findall(r'(?:from |import\()"(\.{1,2}/[^"]+)"', response.text):
            todo.append(posixpath.normpath(posixpath.join(posixpath.dirname(path), target)))
    assert {"api.js", "terminal.js", "desktop.js", "vendor/novnc/core/rfb.js", "vendor/xterm/xterm.mjs"} <= seen


@pytest.mark.parametrize("path", ["nope.js", "vendor/", "../routes/console.py", "..%2Froutes%2Fconsole.py", "vendor/../../app.py"])
async def test_unknown_files_are_404(api: Api, path: str) -> None:
    response = await api.client.get(f"/console/{path}")
    assert_error(response, 404, "NOT_FOUND")


async def test_the_console_routes_are_in_the_openapi_document(api: Api) -> None:
    paths = (await api.client.get("/api/v1/openapi.json")).json()["paths"]
    assert "get" in paths["/"] and "get" in paths["/console/{path}"]
    assert paths["/"]["get"]["security"] == []


async def test_only_get_is_allowed(api: Api) -> None:
    assert_error(await api.client.post("/"), 405, "METHOD_NOT_ALLOWED")


async def test_head_answers_like_get_without_a_body(api: Api) -> None:
    response = await api.client.head("/console/app.js")
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"


async def test_static_files_stay_inside_their_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.js").write_text("export const a = 1;")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    (root / "big.js").write_bytes(b"x" * (MAX_FILE + 1))
    (root / "edge.js").write_bytes(b"x" * MAX_FILE)
    files = StaticFiles(root)
    found = await files.get("sub/a.js")
    assert found is not None and found.body == b"export const a = 1;" and found.etag.startswith('"')
    assert await files.get("sub/../sub/a.js") == found
    assert (await files.get("edge.js")) is not None  # at the limit
    for path in ("link.txt", "../secret.txt", "/etc/passwd", "sub", "", ".", "big.js", "sub\\a.js"):
        assert await files.get(path) is None, path
