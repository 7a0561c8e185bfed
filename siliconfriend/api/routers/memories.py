"""``/memories``: the key's user's memories, a page at a time, searched, exported, pinned,
archived, restored and deleted (only ever that user's)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from ...accounts.keys import KeyOwner
from ..service import MAX_OFFSET, ApiService
from .deps import owner, service

router = APIRouter()


@router.get("/memories", summary="The user's memories, newest day first, a page at a time")
def memories(
    who: KeyOwner = Depends(owner),
    kind: str | None = None,
    state: str | None = None,
    day: str | None = Query(None, description="YYYY-MM-DD"),
    limit: int = Query(50, description="1 to 200"),
    offset: int = Query(0, description=f"0 to {MAX_OFFSET:,}"),
    api: ApiService = Depends(service),
):
    return api.list_memories(who.user, kind=kind, state=state, day=day, limit=limit, offset=offset)


# before /memories/{memory_id}: "search" and "export" are not ids
@router.get("/memories/search", summary="Search the user's memories (the companion's retrieval, with reasons)")
def search(
    q: str = Query(..., description="what to look for"),
    limit: int = Query(10, description="1 to 50"),
    include_archived: bool = False,
    who: KeyOwner = Depends(owner),
    api: ApiService = Depends(service),
):
    return api.search(who.user, q, limit=limit, include_archived=include_archived)


@router.get(
    "/memories/known", summary="What I know about you: the profile and the facts you stated, each with its turn"
)
def known(
    lang: str = Query("en", description="en or zh: the sorts' titles"),
    who: KeyOwner = Depends(owner),
    api: ApiService = Depends(service),
):
    return api.known(who.user, lang=lang)


@router.get("/memories/export", summary="Everything of the user: MemoryBank JSON plus SiliconFriend's fields")
def export(who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.export(who.user)


@router.get("/memories/{memory_id}", summary="One memory")
def get_memory(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.get(who.user, memory_id)


@router.post("/memories/{memory_id}/pin", summary="Pin: it never fades")
def pin(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.pin(who.user, memory_id, True)


@router.post("/memories/{memory_id}/unpin", summary="Unpin: it fades again")
def unpin(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.pin(who.user, memory_id, False)


@router.post("/memories/{memory_id}/archive", summary="Archive (as forgetting would): kept, not retrieved")
def archive(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.archive(who.user, memory_id)


@router.post("/memories/{memory_id}/restore", summary="Bring an archived memory back, as if just recalled")
def restore(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.restore(who.user, memory_id)


@router.delete("/memories/{memory_id}", summary="Delete for good")
def delete(memory_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.delete(who.user, memory_id)
