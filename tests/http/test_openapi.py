"""The OpenAPI document covers every registered route."""

import re

from corral.http import create_app
from tests.support import Api

_CONVERTER = re.compile(r"<(?:[a-z]+:)?([a-z_]+)>")
UNDOCUMENTED = {"/healthz", "/api/v1/openapi.json"}


def _registered(api: Api) -> set[tuple[str, str]]:
    app = create_app(api.platform)
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static" or rule.rule in UNDOCUMENTED:
            continue
        path = _CONVERTER.sub(lambda m: "{" + m[1] + "}", rule.rule)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                found.add((method.lower(), path))
    return found


async def test_every_registered_route_is_documented(api: Api) -> None:
    response = await api.client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.1")
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    missing = _registered(api) - documented
    assert not missing, f"routes missing from the OpenAPI document: {sorted(missing)}"
    assert len(documented) >= 20


async def test_operations_describe_auth_and_errors(api: Api) -> None:
    document = (await api.client.get("/api/v1/openapi.json")).json()
    login = document["paths"]["/api/v1/auth/login"]["post"]
    assert login["security"] == []
    assert "requestBody" in login
    keys = document["paths"]["/api/v1/api-keys/{id}"]["delete"]
    assert keys["parameters"][0] == {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    assert "keys:write" in keys["description"]
    assert keys["responses"]["default"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))
