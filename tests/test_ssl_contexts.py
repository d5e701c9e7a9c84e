"""The test process's httpx clients share their SSL contexts (tests/ssl_contexts.py), each
verifying as it asked."""

from __future__ import annotations

import asyncio
import ssl

import httpx

from tests.ssl_contexts import ssl_context


def _context(client: httpx.Client | httpx.AsyncClient) -> ssl.SSLContext:
    return client._transport._pool._ssl_context  # type: ignore[union-attr,no-any-return]


def test_clients_share_one_context_per_configuration() -> None:
    with httpx.Client() as one, httpx.Client() as two, httpx.Client(verify=False) as loose:
        assert _context(one) is _context(two) is ssl_context()
        assert _context(loose) is ssl_context(verify=False) is not _context(one)
        other_kind = httpx.AsyncClient()
        assert _context(other_kind) is _context(one)
        asyncio.run(other_kind.aclose())


def test_each_verifies_as_it_asked() -> None:
    verified, loose = ssl_context(), ssl_context(verify=False)
    assert verified.verify_mode == ssl.CERT_REQUIRED and verified.check_hostname
    assert verified.cert_store_stats()["x509_ca"] > 0  # the CA bundle, read once
    assert loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname


def test_a_context_of_its_own_is_used_as_given() -> None:
    own = ssl.create_default_context()
    assert ssl_context(verify=own) is own
    with httpx.Client(verify=own) as client:
        assert _context(client) is own
