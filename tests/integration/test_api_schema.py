"""The OpenAPI schema: committed in docs/openapi.yaml, equal to what the views generate, served."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from rest_framework.test import APIClient

from django_strait.api.schema import generate_schema, render_schema

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


def test_committed_schema__equals_the_generated_one():
    # On failure: python -c "..render_schema().." > docs/openapi.yaml (see docs/api.md).
    assert COMMITTED.read_text() == render_schema()


def test_schema__is_openapi_3_with_every_endpoint():
    schema = generate_schema()
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        "/jobs/", "/jobs/{name}/", "/jobs/{name}/pause/", "/jobs/{name}/resume/",
        "/jobs/{name}/trigger/", "/jobs/{name}/bulk-trigger/", "/runs/", "/runs/{id}/",
        "/runs/{id}/cancel/", "/runs/{id}/replay/", "/dead-letters/", "/dead-letters/replay/",
        "/dead-letters/{id}/replay/", "/dead-letters/{id}/discard/", "/circuits/",
        "/circuits/reset/", "/health/", "/budgets/", "/budgets/{project}/",
        "/workflows/{name}/trigger/", "/workflow-runs/", "/workflow-runs/{id}/",
        "/workflow-runs/{id}/cancel/", "/runs/{id}/deliveries/", "/deliveries/{id}/redeliver/",
    }  # fmt: skip
    security = schema["components"]["securitySchemes"]
    assert {"apiKey", "tokenAuth"} <= set(security)


def test_schema__every_operation_documents_the_error_shape():
    schema = generate_schema()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for code in ("401", "403", "429"):
                content = operation["responses"][code]["content"]["application/json"]
                assert content["schema"] == {"$ref": "#/components/schemas/Error"}, (path, method)


@pytest.mark.django_db
def test_schema_view__serves_it_without_credentials():
    response = APIClient().get("/api/strait/schema/")
    assert response.status_code == 200
    assert response.json() == yaml.safe_load(render_schema())
