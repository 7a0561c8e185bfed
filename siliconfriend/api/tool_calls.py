"""Tool calling (``tools``, ``tool_choice``, the legacy ``functions`` / ``function_call``), as a
client expects it of a model that answers in text: a backend that takes tools (``takes_tools``:
an OpenAI-compatible server) is given them instead, and its calls go back to the client
(``ApiService.passes_tools``); this module is for the others.

A model may always answer in text where ``tool_choice`` is absent, ``"auto"`` or ``"none"``: the
companion does, and the person's turn is stored as any other. Open WebUI sends its ~36 builtin
tools (memory, notes, chats, time, web search...) with every chat request by default (0.12:
Function Calling "Native", Capabilities > Builtin Tools), without ``tool_choice``: those chats are
answered and remembered. A tool call and its result in the history (a chat that was with another
model) are left out of it (``service.read_items``).

A request that forces a call (``"required"``, a named function, a legacy ``function_call`` with a
name) cannot be answered in text without lying to the app that asked: it gets a 400 before
anything is stored, with the setting to change in the app that sent it (``app_of``: recognised
from the request itself, so that a SillyTavern user is not told about Open WebUI's admin panel).
"""

from __future__ import annotations

from typing import Any, Mapping

from .frontends import app_of
from .service import ApiError

ADVICE = {
    "SillyTavern": (
        'In SillyTavern: AI Response Configuration (the sliders icon) > untick "Enable function calling" '
        "(with it on, the Expressions extension forces a call to set_emotion). "
        "硅基朋友只用文字回答：请在 SillyTavern 的 AI 响应配置中取消勾选“启用函数调用”。"
    ),
    "Open WebUI": (
        "In Open WebUI: turn off the tool or function that forces the call (Workspace > Tools / Functions), or "
        "Admin Panel > Settings > Models > (the model) > Advanced Params > Function Calling: Default. "
        "硅基朋友只用文字回答：请在 Open WebUI 中关闭强制调用工具的工具或函数。"
    ),
    "": (
        'Send tool_choice "auto" or "none" (or no tools): the companion then answers in text. '
        "硅基朋友只用文字回答：请把 tool_choice 设为 auto 或 none，或不发送 tools。"
    ),
}


def forced(fields: Mapping[str, Any]) -> str | None:
    """The field that forces a tool call ("tool_choice" or "function_call"), if one does."""
    choice = fields.get("tool_choice")
    if choice == "required" or isinstance(choice, dict):
        return "tool_choice"
    call = fields.get("function_call")
    if isinstance(call, dict) and call.get("name"):
        return "function_call"
    return None


def check_tool_choice(fields: Mapping[str, Any], headers: Mapping[str, str]) -> None:
    """An ApiError (400) for a request that forces a tool call; nothing otherwise (its tools are
    then left unused: the companion answers in text). ``fields``: the request's fields besides
    ``messages``; ``headers`` in lower case."""
    param = forced(fields)
    if param is None:
        return
    what = fields.get(param)
    name = what.get("function", {}).get("name") if isinstance(what, dict) and param == "tool_choice" else None
    name = name or (what.get("name") if isinstance(what, dict) else None)
    asked = f"a call to {name!r}" if name else "a tool call"
    raise ApiError(
        400,
        f"{param} forces {asked}, and this model answers in text only: nothing was stored. "
        f"{ADVICE[app_of(headers, fields)]}",
        param=param,
        code="tools_not_supported",
    )


__all__ = ["check_tool_choice", "forced", "ADVICE"]
