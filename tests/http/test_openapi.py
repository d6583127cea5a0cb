"""The OpenAPI document covers every registered route."""

import re
import uuid
from typing import Any

from corral.http import Route, create_app
from corral.ids import UUID_PATTERN
from tests.support import Api, assert_error

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
    internal = {(route.method.lower(), route.full_path) for route in create_app(api.platform).extensions["corral.routes"] if route.internal}
    missing = _registered(api) - documented - internal
    assert not missing, f"routes missing from the OpenAPI document: {sorted(missing)}"
    assert internal == {  # node to node only: not a user's
        ("get", "/api/v1/nodes/blobs/{digest}"), ("post", "/api/v1/nodes/blobs/{digest}/hold"), ("delete", "/api/v1/nodes/blobs/{digest}/hold"),
    }
    assert not internal & documented
    assert len(documented) >= 20


async def test_operations_describe_auth_and_errors(api: Api) -> None:
    document = (await api.client.get("/api/v1/openapi.json")).json()
    login = document["paths"]["/api/v1/auth/login"]["post"]
    assert login["security"] == []
    assert "requestBody" in login
    keys = document["paths"]["/api/v1/api-keys/{id}"]["delete"]
    assert keys["parameters"][0] == {
        "name": "id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": f"^(?:{UUID_PATTERN})$", "format": "uuid"},
    }
    assert "keys:write" in keys["description"]
    assert keys["responses"]["default"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
    operation_ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids))


def test_request_bodies_drawn_from_the_document_pass_the_routes_own_checks() -> None:
    """A client generated from the document sends what the server accepts: bodies drawn
    from each request schema (by schemathesis, as a fuzzer draws them) all pass the model
    that validates that route's body. Checks a schema cannot say (a name that exists, a
    public suffix, a balance) come later in the handlers."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    from corral.errors import ApiError
    from corral.http import api_document
    from corral.http.routes import all_routers
    from corral.models import parse

    schema = schemathesis.openapi.from_dict(api_document())
    refused: dict[str, list[str]] = {}
    routes = [route for router in all_routers() for route in router.routes if route.request is not None]
    assert len(routes) > 50

    def drawn_bodies_of(route: Route) -> None:
        @settings(max_examples=15, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        @given(schema[route.openapi_path][route.method].as_strategy())
        def draw(case: Any) -> None:
            body = case.body if isinstance(case.body, dict) else {}  # no body: the server reads `{}`
            try:
                parse(route.request, body)  # type: ignore[arg-type]
            except ApiError as error:
                refused.setdefault(route.endpoint, []).append(f"{error.code} {error.message} {error.details} for {body!r}"[:300])

        draw()

    for route in routes:
        drawn_bodies_of(route)
    assert not refused, "\n".join(f"{endpoint}: {problems[0]}" for endpoint, problems in refused.items())


async def test_declared_parameters_are_the_ones_the_server_enforces(api: Api) -> None:
    document = (await api.client.get("/api/v1/openapi.json")).json()
    tenant = await api.create_tenant()
    sandbox_id = document["paths"]["/api/v1/sandboxes/{id}"]["get"]["parameters"][0]
    assert sandbox_id["schema"]["format"] == "uuid"
    refused = await api.request("GET", "/api/v1/sandboxes/not-a-uuid", key=tenant.key)
    assert_error(refused, 400, "INVALID_ID")
    unknown = await api.request("GET", f"/api/v1/sandboxes/{uuid.uuid4()}", key=tenant.key)
    assert unknown.status_code == 404

    deployment_id = document["paths"]["/api/v1/deployments/{id}"]["get"]["parameters"][0]["schema"]
    assert deployment_id["pattern"].startswith("^(?:dep_")
    assert_error(await api.request("GET", "/api/v1/deployments/dep_x", key=tenant.key), 404, "DEPLOYMENT_NOT_FOUND")

    limit = next(p for p in document["paths"]["/api/v1/audit-log"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"] == {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}
    assert_error(await api.request("GET", "/api/v1/audit-log?limit=0", key=tenant.key), 400, "INVALID_PARAM")
    assert_error(await api.request("GET", "/api/v1/audit-log?limit=1001", key=tenant.key), 400, "INVALID_PARAM")
    assert (await api.request("GET", "/api/v1/audit-log?limit=1000", key=tenant.key)).status_code == 200


async def test_integers_are_json_schema_integers_within_64_bits(api: Api) -> None:
    """`2.0` is an integer to JSON Schema, so to the server; one past what the ledger holds
    is refused with the field's message, not a server error."""
    tenant = await api.create_tenant()
    path = f"/api/v1/admin/tenants/{tenant.id}/credits"
    granted = await api.admin("POST", path, json={"amount_credits": 5.0, "description": "a float that is an integer"})
    assert granted.status_code == 201, granted.text
    assert granted.json()["data"]["amount_credits"] == 5
    too_many = await api.admin("POST", path, json={"amount_credits": 10**20, "description": "more than the ledger holds"})
    error = assert_error(too_many, 422, "VALIDATION_ERROR")
    assert "amount_credits" in error["details"]
    fraction = await api.admin("POST", path, json={"amount_credits": 2.5, "description": "not an integer"})
    assert assert_error(fraction, 422, "VALIDATION_ERROR")["details"] == {"amount_credits": "must be an integer"}
