"""What chat front ends send besides the person's own words: their task prompts, and their markup.

A chat app pointed at ``/v1`` sends requests of its own beside the person's messages: a title for
the chat, tags, follow-up suggestions, search queries, an autocompletion... They are not the person
talking, so they must never become memories. ``TASK_PROMPTS`` is the one table that recognises
them, each row read from the app's own source (named in ``source``); ``task_of`` applies it. A
client can also say so itself (``X-SiliconFriend-Task``, see ``routes.py``).

And a person's message arrives wrapped in the app's markup: a list of attached files, the context
blocks its own retrieval injected (``<context><source ...>``), image parts. ``person_words`` keeps
what the person said, and a short note of what was attached.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class TaskPrompt:
    """One front end's task prompt: every one of ``signs`` is in one message (compared in lower
    case, whitespace folded). ``where``: "last" (the request's last message), "system" (any
    system message) or "any" (any message). ``persona``: the reply speaks as the companion (so the
    companion's persona helps); otherwise the app's prompt is answered as it is sent."""

    app: str
    task: str
    signs: tuple[str, ...]
    source: str
    where: str = "last"
    persona: bool = False


_OWUI = "open-webui/open-webui backend/open_webui/config.py"
_ST = "SillyTavern/SillyTavern public/scripts/openai.js"

TASK_PROMPTS: tuple[TaskPrompt, ...] = (
    # Open WebUI: each task is one user message built from a DEFAULT_*_PROMPT_TEMPLATE, sent
    # without streaming, with the chat so far inside <chat_history> (routers/tasks.py)
    TaskPrompt(
        "Open WebUI",
        "title",
        ("### task:", "title", "summarizing the chat history"),
        f"{_OWUI} DEFAULT_TITLE_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        "Open WebUI",
        "title",
        ("create a concise, 3-5 word title with an emoji as a title for the",),
        f"{_OWUI} (0.3) DEFAULT_TITLE_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        "Open WebUI",
        "tags",
        ("### task:", "generate 1-3 broad tags categorizing"),
        f"{_OWUI} DEFAULT_TAGS_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        "Open WebUI",
        "follow_ups",
        ("### task:", "suggest 3-5 relevant follow-up questions"),
        f"{_OWUI} DEFAULT_FOLLOW_UP_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        # one template for both retrieval and web-search queries (its type is in the language)
        "Open WebUI",
        "queries",
        ("### task:", "generating search queries"),
        f"{_OWUI} DEFAULT_QUERY_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        "Open WebUI",
        "autocomplete",
        ("### task:", "you are an autocompletion system"),
        f"{_OWUI} DEFAULT_AUTOCOMPLETE_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        "Open WebUI",
        "image_prompt",
        ("### task:", "image generation task"),
        f"{_OWUI} DEFAULT_IMAGE_PROMPT_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        # the summary that replaces the older messages of a long chat (off by default)
        "Open WebUI",
        "context_compaction",
        ("### task:", "summarize the conversation history that will be compacted"),
        "open-webui/open-webui backend/open_webui/utils/context_compaction.py DEFAULT_CONTEXT_COMPACTION_PROMPT",
    ),
    TaskPrompt(
        "Open WebUI",
        "emoji",
        ("your task is to reflect the speaker's likely facial expression through a fitting emoji",),
        f"{_OWUI} DEFAULT_EMOJI_GENERATION_PROMPT_TEMPLATE",
    ),
    TaskPrompt(
        # the merged answer of several models to the person's question: it speaks as the companion
        "Open WebUI",
        "moa",
        ("you have been provided with a set of responses from various models to the latest user query",),
        f"{_OWUI} DEFAULT_MOA_GENERATION_PROMPT_TEMPLATE",
        persona=True,
    ),
    TaskPrompt(
        # a system message with the tools' specs, then "Query: History: ..." (utils/middleware.py)
        "Open WebUI",
        "function_calling",
        ("your task is to choose and return the correct tool(s) from the list of available tools",),
        f"{_OWUI} DEFAULT_TOOLS_FUNCTION_CALLING_PROMPT_TEMPLATE",
        where="system",
    ),
    # SillyTavern: these prompts go as a system message after the chat (openai.js
    # populateChatCompletion's control prompts: impersonate, quietPrompt)
    TaskPrompt(
        "SillyTavern",
        "impersonate",
        ("[write your next reply from the point of view of",),
        f"{_ST} default_impersonation_prompt",
        where="any",
    ),
    TaskPrompt(
        "SillyTavern",
        "summarize",
        ("summarize the most important facts and events in the story so far",),
        "SillyTavern/SillyTavern public/scripts/extensions/memory/index.js defaultPrompt",
        where="any",
    ),
    TaskPrompt(
        "SillyTavern",
        "continue",
        ("[continue the following message. do not include any parts of the original message",),
        f"{_ST} default_continue_nudge_prompt",
        where="any",
    ),
    TaskPrompt(
        # the Expressions extension's LLM classifier: generateRaw(the reply, systemPrompt=this)
        "SillyTavern",
        "expressions",
        ("classify the emotion of the last message",),
        "SillyTavern/SillyTavern public/scripts/extensions/expressions/index.js DEFAULT_LLM_PROMPT",
        where="system",
    ),
    TaskPrompt(
        # Image Generation's prompts for a character's or the user's portrait
        "SillyTavern",
        "image_prompt",
        ("in the next response i want you to provide only a detailed comma-delimited list of keywords",),
        "SillyTavern/SillyTavern public/scripts/extensions/stable-diffusion/index.js promptTemplates",
        where="any",
    ),
    TaskPrompt(
        # the extensions' quiet prompts open so: Image Generation's (scene, background, last
        # message...), Summarize's; a quiet prompt is always the request's last message
        # (openai.js populateChatCompletion, "controlPrompts"), so a character card or a preset
        # that says the same words earlier is no task
        "SillyTavern",
        "quiet",
        ("ignore previous instructions",),
        "SillyTavern/SillyTavern public/scripts/extensions/{stable-diffusion,memory}/index.js",
    ),
    # LibreChat: its title prompts, by version
    TaskPrompt(
        "LibreChat",
        "title",
        ("5-word-or-less title for the conversation",),
        "danny-avila/LibreChat api/app/clients/prompts/titlePrompts.js titleInstruction; "
        "@librechat/agents src/utils/title.ts defaultCompletionPrompt",
        where="any",
    ),
    TaskPrompt(
        "LibreChat",
        "title",
        ("analyze this conversation and provide:", "concise title in the detected language"),
        "@librechat/agents src/utils/title.ts defaultTitlePrompt",
        where="any",
    ),
    TaskPrompt(
        "LibreChat",
        "title",
        ("generate a concise title (max 40 characters) for a conversation that starts with",),
        "danny-avila/LibreChat api/server/services/Endpoints/assistants/title.js",
        where="any",
    ),
    # LobeChat: a system message, then the chat as "role: content" lines (chains/summaryTitle.ts)
    TaskPrompt(
        "LobeChat",
        "title",
        ("you are a professional conversation summarizer", "title"),
        "lobehub/lobe-chat packages/prompts/src/chains/summaryTitle.ts chainSummaryTitle",
        where="system",
    ),
    TaskPrompt(
        "LobeChat",
        "title",
        ("10 个字以内的标题",),
        "lobehub/lobe-chat src/chains/summaryTitle.ts chainSummaryTitle (zh)",
        where="any",
    ),
    TaskPrompt(
        "LobeChat",
        "title",
        ("10个字以内的标题",),
        "lobehub/lobe-chat src/chains/summaryTitle.ts chainSummaryTitle (zh)",
        where="any",
    ),
    TaskPrompt(
        "LobeChat",
        "emoji",
        ("you are an emoji expert",),
        "lobehub/lobe-chat packages/prompts/src/chains/pickEmoji.ts chainPickEmoji",
        where="system",
    ),
)


@dataclass(frozen=True)
class Task:
    """A request that is not the person talking: answered, never remembered."""

    app: str  # the front end it was recognised as ("" when the client said so itself)
    name: str  # title, tags, queries, impersonate... or what the client called it
    persona: bool = False  # the companion's persona opens the prompt


def fold(text: str) -> str:
    return " ".join(text.split()).lower()


def task_of(items: Sequence[tuple[str, str]]) -> Task | None:
    """The task a request's messages (role, text) are, or None where the person is talking."""
    if not items:
        return None
    last = fold(items[-1][1])
    systems = [fold(t) for r, t in items if r in ("system", "developer")]
    every = [fold(t) for _, t in items]
    for rule in TASK_PROMPTS:
        texts = {"last": [last], "system": systems, "any": every}[rule.where]
        if any(all(sign in text for sign in rule.signs) for text in texts):
            return Task(rule.app, rule.task, rule.persona)
    if items[-1][0] == "user" and last.startswith("### task:") and "<chat_history>" in last:
        return Task("Open WebUI", "task")  # an admin's own task template keeps the app's placeholders
    if items[-1][0] in ("system", "developer"):
        # after the chat, an instruction and no new message of the person's: a "quiet" prompt
        # (SillyTavern's expressions, image prompts, extensions). A system message after the
        # person's message (post-history instructions) is not one: that turn is theirs.
        spoken = [r for r, _ in items if r in ("user", "assistant")]
        if not spoken or spoken[-1] != "user":
            return Task("", "quiet")
    return None


# -- which app -------------------------------------------------------------------------------------
# Open WebUI's builtin tools (backend/open_webui/tools/builtin.py): one of them in ``tools`` names the app
OPEN_WEBUI_TOOLS = frozenset(
    {
        "get_current_timestamp",
        "calculate_timestamp",
        "search_web",
        "fetch_url",
        "generate_image",
        "edit_image",
        "execute_code",
        "search_memories",
        "add_memory",
        "replace_memory_content",
        "search_notes",
        "view_note",
        "write_note",
        "replace_note_content",
        "search_chats",
        "view_chat",
        "search_channels",
        "search_channel_messages",
        "view_channel_message",
        "view_channel_thread",
        "list_knowledge_bases",
        "search_knowledge_bases",
        "search_knowledge_files",
        "view_knowledge_file",
        "query_knowledge_files",
        "query_knowledge_bases",
        "view_skill",
        # and those 0.12.4 sends by default (recorded live)
        "ask_user",
        "grep_knowledge_files",
        "list_memories",
        "list_memory_paths",
        "read_memory_path",
        "update_memory",
        "delete_memory",
        "create_skill",
        "create_tasks",
        "update_task",
        "create_automation",
        "update_automation",
        "list_automations",
        "toggle_automation",
        "delete_automation",
        "search_calendar_events",
        "create_calendar_event",
        "update_calendar_event",
        "delete_calendar_event",
    }
)
# how many of them make a request Open WebUI's whole chat (``sends_whole_chat``): one or two names
# such as search_web may be any app's own tools
WHOLE_CHAT_TOOLS = 3
# SillyTavern's own function tools (public/scripts/extensions/*: the Expressions classifier's)
SILLYTAVERN_TOOLS = frozenset({"set_emotion"})


def _tool_names(fields: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in fields.get("tools") or []:
        if isinstance(tool, dict):
            inner = tool.get("function")
            spec: dict = inner if isinstance(inner, dict) else tool
            if isinstance(spec.get("name"), str):
                names.add(spec["name"])
    for spec in fields.get("functions") or []:
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            names.add(spec["name"])
    return names


def app_of(headers: Mapping[str, str], fields: Mapping[str, Any]) -> str:
    """The chat app a request comes from, as far as the request says ("" if it does not): Open
    WebUI by its headers or its builtin tools; SillyTavern by its own tools, or by how its server
    forwards a Custom (OpenAI-compatible) request (node-fetch, with an empty ``logit_bias``)."""
    if any(h.startswith("x-openwebui-") for h in headers) or _tool_names(fields) & OPEN_WEBUI_TOOLS:
        return "Open WebUI"
    agent = headers.get("user-agent", "").lower()
    if _tool_names(fields) & SILLYTAVERN_TOOLS or ("node-fetch" in agent and fields.get("logit_bias") == {}):
        return "SillyTavern"
    return ""


def sends_whole_chat(headers: Mapping[str, str], fields: Mapping[str, Any]) -> bool:
    """Whether the request comes from an app that sends its chat whole, from its start, with every
    request: Open WebUI (the branch the person sees), by its headers or by several of its builtin
    tools. An exchange such a request lacks before the first one it shares with the stored chat
    was deleted by the person, not left out to fit the model's context (a chat so cut, taken for
    whole, would have its older exchanges taken for deleted: hence more than a tool name or two)."""
    owui_tools = len(_tool_names(fields) & OPEN_WEBUI_TOOLS)
    return any(h.startswith("x-openwebui-") for h in headers) or owui_tools >= WHOLE_CHAT_TOOLS


# Open WebUI's context compaction (ENABLE_CONTEXT_COMPACTION, off by default) leaves a long chat's
# older messages out, and their summary opens with this in the system message
_OWUI_SUMMARY = "[conversation summary]"


def compacted(system: Sequence[str]) -> bool:
    """Whether a request's system messages say its chat's older messages were left out."""
    return any(_OWUI_SUMMARY in fold(t) for t in system)


# -- what the person said -------------------------------------------------------------------------
@dataclass
class Said:
    """A message as the person wrote it: ``text`` without the app's markup, ``attached`` the names
    of what came with it, ``shown`` the whole message for the model (the context an app attached
    helps the answer; it is never stored)."""

    text: str
    attached: list[str] = field(default_factory=list)
    shown: str = ""

    @property
    def stored(self) -> str:
        """What is remembered: the words, and a short note of what was attached."""
        if not self.attached:
            return self.text
        note = f"[attached: {', '.join(dict.fromkeys(self.attached))}]"
        return f"{self.text}\n{note}" if self.text else note


_NAME = re.compile(r"""\bname\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.I)
_ATTACHED = re.compile(r"<attached_files\b[^>]*>(.*?)</attached_files\s*>", re.I | re.S)
_CONTEXT = re.compile(r"<context\b[^>]*>(.*?)</context\s*>", re.I | re.S)
_SOURCE = re.compile(r"<source\b([^>]*)>(.*?)</source\s*>", re.I | re.S)
_USER_QUERY = re.compile(r"<user_query\b[^>]*>(.*?)</user_query\s*>", re.I | re.S)
# Open WebUI's RAG template opens with this when the context goes into the user's message
# (RAG_SYSTEM_CONTEXT off; DEFAULT_RAG_TEMPLATE): the template, then the person's message
_RAG_OPENING = "### task: respond to the user query using the provided context"


def _names(markup: str) -> list[str]:
    found = [html.unescape(a or b).strip() for a, b in _NAME.findall(markup)]
    if not found:  # a plain list: "- uploads/notes.txt" lines
        found = [line.strip(" -*\t").rsplit("/", 1)[-1] for line in markup.splitlines() if line.strip(" -*\t")]
    return [n for n in found if n][:20]


def _source_names(block: str) -> list[str]:
    """The names of the <source name="..."> blocks in ``block`` (a source without one is the app's)."""
    return [html.unescape(a or b).strip() for attrs, _ in _SOURCE.findall(block) for a, b in _NAME.findall(attrs)[:1]]


def clean_text(text: str) -> tuple[str, list[str]]:
    """A message's text without the front end's markup, and the names of what it attached."""
    attached: list[str] = []
    if fold(text[:200]).startswith(_RAG_OPENING) and _USER_QUERY.search(text):
        query = _USER_QUERY.search(text)
        assert query is not None
        context = _CONTEXT.search(text)  # (the template's own words mention "the <source> tag")
        attached += _source_names(context.group(1)) if context else []
        rest = text[query.end() :].strip()  # the person's own message follows the template
        text = rest or query.group(1)
    elif fold(text[:200]).startswith(_RAG_OPENING) and _CONTEXT.search(text):
        # 0.12's DEFAULT_RAG_TEMPLATE has no <user_query>: it ends with the context block, and
        # the person's message follows it (seen in a real Open WebUI 0.12.4 session)
        context = list(_CONTEXT.finditer(text))[-1]
        attached += _source_names(context.group(1))
        text = text[context.end() :]
    for match in _ATTACHED.finditer(text):
        attached += _names(match.group(1))
    text = _ATTACHED.sub("", text)
    for match in _CONTEXT.finditer(text):
        attached += _source_names(match.group(1))
    text = _CONTEXT.sub("", text)
    attached += _source_names(text)
    text = _SOURCE.sub("", text)
    return text.strip(), attached


def person_words(content: Any) -> Said:
    """What the person said in one message's content (a string or a list of content parts)."""
    texts: list[str] = []
    attached: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind in ("image_url", "input_image", "image"):
                attached.append("image")
            elif kind in ("input_audio", "audio"):
                attached.append("audio")
            elif kind in ("file", "input_file"):
                info = part.get("file")
                name = (info if isinstance(info, dict) else part).get("filename")
                attached.append(str(name or "file"))
    shown = "\n".join(texts).strip()
    text, more = clean_text(shown)
    return Said(text, attached + more, shown)


__all__ = [
    "app_of",
    "sends_whole_chat",
    "compacted",
    "OPEN_WEBUI_TOOLS",
    "TASK_PROMPTS",
    "TaskPrompt",
    "Task",
    "task_of",
    "Said",
    "person_words",
    "clean_text",
    "fold",
]
