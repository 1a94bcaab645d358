"""Bearer keys for MCP over HTTP through the SDK's own token verification.

`KeyRingVerifier` is an ``mcp`` `TokenVerifier` over the API's key ring (`recall.auth.KeyRing`):
the SDK's ``AuthenticationMiddleware`` and ``RequireAuthMiddleware`` refuse a request without a
valid key (401, ``WWW-Authenticate: Bearer``) before any tool runs, and put the verified
`AccessToken` on the request. `principal_of` turns that token back into the key's `Principal`
(org, repos, admin), which the tools use to choose and check the scope. The key itself stays in
the token only to be forwarded to the API, which applies its own key rules to the same key.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from recall.auth import KeyRing, Principal


class KeyRingVerifier:
    """`mcp.server.auth.provider.TokenVerifier` over a `KeyRing` (reloaded as the API's is)."""

    def __init__(self, keys: KeyRing) -> None:
        self.keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        principal = self.keys.authenticate(f"Bearer {token}")
        if principal is None:
            return None
        return AccessToken(
            token=token,
            client_id=principal.key_id,
            scopes=[],
            claims={
                "org": principal.org,
                "repos": None if principal.repos is None else sorted(principal.repos),
                "admin": principal.admin,
            },
        )


def auth_settings(base_url: str) -> AuthSettings:
    """The SDK's auth settings for a resource server that verifies its own tokens (no OAuth
    authorization server: keys come from `memflow keys add`)."""
    return AuthSettings(issuer_url=base_url, resource_server_url=None)  # type: ignore[arg-type]


def access_token_of(request: Any) -> AccessToken | None:
    """The token the SDK's middleware verified for this HTTP request, if any."""
    user = request.scope.get("user") if request is not None else None
    return user.access_token if isinstance(user, AuthenticatedUser) else None


def principal_of(token: AccessToken | None) -> Principal | None:
    if token is None or not isinstance(token.claims, dict):
        return None
    claims = token.claims
    repos = claims.get("repos")
    return Principal(
        key_id=token.client_id,
        org=str(claims.get("org")),
        repos=None if repos is None else frozenset(repos),
        admin=claims.get("admin") is True,
    )
