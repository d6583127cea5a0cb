"""The console's operator page (contract §19) in a real headless Chromium against a real
server: the admin key asked for and kept in the tab only, the node panel, the cluster's
nodes, a live actor in the table, and the charts filling as the page polls."""

from __future__ import annotations

from corral.ids import new_uuid
from tests.actors.machine import TABLE, create_machine
from tests.http.test_actor_introspection import Add, MachineActor
from tests.http.test_console_browser import SHOTS, console_browser, expect, fill
from tests.support import ADMIN_KEY, Api, Tenant


async def test_the_operator_page_shows_the_node_and_a_live_actor(api: Api, tenant: Tenant) -> None:
    await api.platform.db.execute(TABLE)
    machine_id = new_uuid()
    await create_machine(api.platform.db, machine_id, "running")
    ref = await api.platform.system.get(MachineActor, machine_id)
    assert await ref.ask(Add(1)) == 1

    base = str(api.client.base_url)
    async with console_browser(api) as browser:
        page = await browser.new_page(f"{base}/#/operator")
        await expect(page, "document.getElementById('admin-key-form')")  # no tenant session needed
        await fill(page, {"admin-key": tenant.key}, "admin-key-form")  # a tenant's key is not the operator's
        refused = await expect(page, "document.getElementById('operator-error').textContent")
        assert "403" in refused or "FORBIDDEN" in refused, refused
        await fill(page, {"admin-key": ADMIN_KEY}, "admin-key-form")

        name = await expect(page, "document.getElementById('node-name')?.textContent")
        assert name == (await api.admin("GET", "/api/v1/admin/node")).json()["data"]["node"]["name"]
        cores = await expect(page, "document.querySelector('[data-figure=cores] strong')?.textContent")
        assert int(cores) >= 1
        node_row = f"document.querySelector('#nodes tr[data-node=\"{name}\"]')"
        await expect(page, node_row)
        node_cells = await page.evaluate(f"[...{node_row}.children].map(td => td.textContent)")
        assert node_cells[:3] == [name, "active", "local"], node_cells
        assert node_cells[3] == f"http://127.0.0.1:{api.platform.settings.port}" and node_cells[4].endswith("s ago"), node_cells
        row = f"document.querySelector('#actors tr[data-id=\"{machine_id}\"]')"
        await expect(page, row)
        cells = await page.evaluate(f"[...{row}.children].map(td => td.textContent)")
        assert cells[0] == MachineActor.kind and cells[2] == "running" and cells[4] == "0", cells

        # Polled every 2 s: the charts gain samples, and a request made meanwhile shows.
        await expect(page, "Number(document.getElementById('chart-mailbox').dataset.samples) >= 3", timeout=15)
        assert await page.evaluate("document.querySelector('#chart-rate polyline').getAttribute('points').length > 0")
        if SHOTS:
            (SHOTS / "operator.png").write_bytes(await page.screenshot())

        # The key lives in this tab's sessionStorage, never in the URL; forgetting it asks again.
        assert await page.evaluate("sessionStorage.getItem('corral.console.admin')") == ADMIN_KEY
        assert ADMIN_KEY not in await page.evaluate("location.href")
        await page.evaluate("document.getElementById('forget-admin-key').click(); true")
        await expect(page, "document.getElementById('admin-key-form')")
        assert await page.evaluate("sessionStorage.getItem('corral.console.admin')") is None
