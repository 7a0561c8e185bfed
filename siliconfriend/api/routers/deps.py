"""What the routes receive: the API's service (kept on the app's state by ``routes.build_api``)
and the owner of the request's key."""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from ...accounts.keys import KeyOwner
from ..service import ApiService

bearer = HTTPBearer(auto_error=False, description="a per-user API key, sf-...")


def client_of(request: Request) -> str | None:
    return request.client.host if request.client else None


def api_of(request: Request) -> ApiService:
    """The service of the API app serving this request (also where it is mounted in another app:
    a FastAPI app names itself in the request's scope)."""
    return request.app.state.api


# both async: run on the event loop, not on a worker thread (a sync dependency costs a hop)
async def service(request: Request) -> ApiService:
    return api_of(request)


async def owner(request: Request, _=Depends(bearer)) -> KeyOwner:
    found = getattr(request.state, "owner", None)  # a request with a body: authenticated first (intake.py)
    if isinstance(found, KeyOwner):
        return found
    # a digest and one indexed SQLite read, cheaper than the hop to a thread
    return api_of(request).authenticate(request.headers.get("authorization"), client_of(request))
