"""``/turns/{id}``: one stored turn and what its reply remembered."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from ...accounts.keys import KeyOwner
from ..service import ApiService
from .deps import owner, service

router = APIRouter()


@router.get("/turns/{turn_id}", summary='One stored turn and what its reply remembered ("what I remembered")')
def turn(turn_id: str, who: KeyOwner = Depends(owner), api: ApiService = Depends(service)):
    return api.turn(who.user, turn_id)
