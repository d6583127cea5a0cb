from tests.support import Api, Tenant


async def test_health_and_tenant(api: Api, tenant: Tenant) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    response = await api.request("GET", "/api/v1/tenant", key=tenant.key)
    assert response.status_code == 200
    assert response.json()["data"]["id"] == tenant.id
