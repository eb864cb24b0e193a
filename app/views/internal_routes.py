"""The routes the OpenAPI document leaves out (`app/views/openapi.py`)."""

from __future__ import annotations

# Routes deliberately left out of the document: static files and the support dashboard's
# HTML pages (for staff signed in with a session, not an API).
INTERNAL = {
    "/static/<path:filename>",
    "/sign-in",
    "/sign-out",
    "/",
    "/stuck",
    "/dead-letters",
    "/dead-letters/<int:message_id>/requeue",
    "/messages/<int:message_id>",
    "/messages/<int:message_id>/status",
    "/messages/<int:message_id>/requeue",
    "/messages/<int:message_id>/recipient",
    "/search",
    "/alerts",
    "/alerts/banner",
    "/dead-letters/<int:message_id>/dismiss",
    "/dead-letters/bulk-requeue",
    "/messages/<int:message_id>/cancel",
    "/cancel",
    "/cancel/preview",
    "/bulk/<int:plan_id>",
    "/bulk/<int:plan_id>/progress",
    "/bulk/<int:plan_id>/confirm",
    "/bulk/<int:plan_id>/stop",
    "/audit",
    "/identities",
    "/identities/<int:identity_id>/pause",
    "/identities/<int:identity_id>/resume",
    "/identities/<int:identity_id>/rates",
    "/identities/<int:identity_id>/credentials",
    "/identities/<int:identity_id>/business-account",
    "/identities/<int:identity_id>/events",
    "/staff",
    "/staff/<int:staff_id>/role",
    "/staff/<int:staff_id>/disable",
    "/staff/<int:staff_id>/enable",
    "/staff/<int:staff_id>/password",
    # Platform admins' tenant settings (app/views/tenant_settings.py).
    "/tenants",
    "/tenants/<int:tenant_id>/settings",
}
