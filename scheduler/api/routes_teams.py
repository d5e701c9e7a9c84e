"""The teams' entries of the route table (routes.TABLE, where they stand in its order; its
docstring says what an entry says): named keys and the audit (docs/SECURITY.md, Named keys),
namespaces and their quotas (docs/GUIDE.md, Teams and Quotas)."""

from __future__ import annotations

from scheduler.api import keys, quotas
from scheduler.api.described import DONE, body, got, json, text
from scheduler.api.routing import Entry, Method
from scheduler.models.access_key import AuditEntry, KeyMade, KeyRequest, KeyView, Role
from scheduler.models.quota import NamespaceView, Quota, QuotaChange

READER, ADMIN = Role.READER, Role.ADMIN

ENTRIES = [
    # Named keys (docs/SECURITY.md, Named keys): the admin's.
    Entry(
        "/keys",
        {
            "GET": Method(
                keys.list_keys,
                role=ADMIN,
                summary="The named keys, by name (never the keys themselves)",
                answers=got(list[KeyView]),
            ),
            "POST": Method(
                keys.add_key,
                role=ADMIN,
                summary="Make a named key with a role (the key is shown this once)",
                body=body(KeyRequest),
                answers={
                    201: json(KeyMade, "the key made, shown this once"),
                    409: text("the name is taken, too many keys, or no admin key is set"),
                },
            ),
        },
    ),
    Entry(
        "/audit",
        {
            "GET": Method(
                keys.audit,
                reads=("limit",),
                role=ADMIN,
                summary="The newest admin calls (keys made and revoked), newest first",
                answers=got(list[AuditEntry]),
            )
        },
    ),
    Entry(
        "/keys/{name}",
        {
            "DELETE": Method(
                keys.revoke_key,
                role=ADMIN,
                summary="Revoke a named key: it stops working on every replica",
                answers={**DONE, 404: text("key not found")},
            )
        },
    ),
    # Namespaces' quotas (docs/GUIDE.md, Quotas): set by an admin, read by any key.
    Entry(
        "/namespaces",
        {
            "GET": Method(
                quotas.list_namespaces,
                role=READER,
                summary="The namespaces (those of the key), each with its quota and use",
                answers=got(list[NamespaceView]),
            )
        },
    ),
    Entry(
        "/namespaces/{namespace}/quota",
        {
            "PUT": Method(
                quotas.set_quota,
                role=ADMIN,
                summary="Set a namespace's quota (every limit 0: none)",
                body=body(Quota),
                answers={200: json(Quota, "the quota set")},
            ),
            "PATCH": Method(
                quotas.change_quota,
                role=ADMIN,
                summary="Change some of a namespace's limits (0: that one goes), keep the rest",
                body=body(QuotaChange),
                answers={200: json(Quota, "the quota as it is now")},
            ),
        },
    ),
]
