"""Tool calling (``tools``, ``tool_choice``, the legacy ``functions`` / ``function_call``, and
``tool`` messages): refused with a 400 that says what to change, never dropped in silence.

Why refuse rather than pass them on: the companion answers from its own prompt (meta-prompt,
memories, summaries) with a backend that streams text; it has no loop that runs a tool and feeds
its result back, and a reply that silently ignored the app's tools would look to the person like
the tools ran and found nothing. A 400 before anything is stored loses nothing: the app shows the
message, the person changes one setting and sends again.

Open WebUI sends ``tools`` on every chat request by default (0.12: Function Calling "Native" is
the default, and the model capability "Builtin Tools", on by default, adds its ~36 tools: memory,
notes, chats, time, web search...). Its setting to change is named in the message.
"""

from __future__ import annotations

from typing import Any, Sequence

from .service import ApiError

HOW_TO = (
    "In Open WebUI: Admin Panel > Settings > Models > (the model) > Advanced Params > "
    "Function Calling: Legacy, or untick Capabilities > Builtin Tools. "
    "硅基朋友不调用工具：请在请求中去掉 tools（Open WebUI：管理员面板 > 设置 > 模型 > 高级参数 > "
    "Function Calling 选 Legacy，或取消勾选 Builtin Tools）。"
)


def _offered(fields: dict[str, Any]) -> int:
    count = 0
    for name in ("tools", "functions"):
        value = fields.get(name)
        if value:
            count += len(value) if isinstance(value, list) else 1
    return count


def refuse_tool_calling(fields: dict[str, Any], messages: Sequence[dict]) -> None:
    """An ApiError (400) for a request that offers tools or carries tool calls; nothing otherwise.
    ``fields``: the request's fields besides ``messages`` (``tools``, ``tool_choice``...).

    Accepted: no tools at all, ``tool_choice: "none"`` (the client itself says not to call them,
    so nothing is dropped), ``tool_choice: "auto"`` with no tools, and empty lists."""
    offered = _offered(fields)
    choice, legacy_choice = fields.get("tool_choice"), fields.get("function_call")
    declined = choice == "none" or legacy_choice == "none"
    if offered and not declined:
        param = "tools" if fields.get("tools") else "functions"
        raise ApiError(
            400,
            f"this model does not call tools, and the request offers {offered}: send it without "
            f'`{param}` (or with tool_choice "none"); nothing was stored. {HOW_TO}',
            param=param,
            code="tools_not_supported",
        )
    for name, value in (("tool_choice", choice), ("function_call", legacy_choice)):
        if value not in (None, "none", "auto"):
            raise ApiError(
                400,
                f"{name} {value!r} asks for a tool call, and this model does not call tools; nothing was stored",
                param=name,
                code="tools_not_supported",
            )
    for i, m in enumerate(messages):
        if m.get("role") in ("tool", "function") or m.get("tool_calls") or m.get("function_call"):
            raise ApiError(
                400,
                f"messages[{i}] is a tool call or a tool's result (from another model?): this model "
                "does not call tools, so it cannot continue this chat; start a new chat, or leave "
                f"the tool messages out. Nothing was stored. {HOW_TO}",
                param=f"messages[{i}]",
                code="tools_not_supported",
            )


__all__ = ["refuse_tool_calling"]
