"""The requests real chat apps send to an OpenAI-compatible endpoint, rebuilt from their sources
(the templates' opening lines and structure; each names where it comes from), for the API tests.

Open WebUI (backend/open_webui/config.py, routers/tasks.py, utils/middleware.py): a chat turn is
the whole chat resent; each background task is one user message from a ``### Task:`` template with
the chat so far in ``<chat_history>``, not streamed. SillyTavern (public/scripts/openai.js): its
impersonate / quiet / summarize prompts are a system message after the chat. LibreChat and
LobeChat: their title requests."""

from __future__ import annotations


def owui_history(chat: list[dict]) -> str:
    """Open WebUI's {{MESSAGES:END:n}}: the last messages as "ROLE: text" lines."""
    return "\n".join(f"{m['role'].upper()}: {m['content']}" for m in chat)


def owui_task(template_head: str, chat: list[dict], tail: str = "") -> list[dict]:
    body = f"### Task:\n{template_head}\n### Guidelines:\n- ...\n### Output:\nJSON format: {{...}}\n"
    return [
        {
            "role": "user",
            "content": f"{body}### Chat History:\n<chat_history>\n{owui_history(chat)}\n</chat_history>{tail}",
        }
    ]


def owui_tasks(chat: list[dict]) -> dict[str, list[dict]]:
    """Every task request Open WebUI makes around a chat (DEFAULT_*_PROMPT_TEMPLATE)."""
    last = chat[-1]["content"] if chat else ""
    return {
        "title": owui_task("Generate a concise title summarizing the chat history.", chat),
        "title_emoji": owui_task(
            "Generate a concise, 3-5 word title with an emoji summarizing the chat history.", chat
        ),
        "tags": owui_task(
            "Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more "
            "specific subtopic tags.",
            chat,
        ),
        "follow_ups": owui_task(
            "Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in "
            "this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.",
            chat,
        ),
        "queries": owui_task(
            "Analyze the chat history to determine the necessity of generating search queries, in the given "
            "language. By default, **prioritize generating 1-3 broad and relevant search queries** unless it is "
            "absolutely certain that no additional information is required.",
            chat,
        ),
        "autocomplete": owui_task(
            "You are an autocompletion system. Continue the text in `<text>` based on the **completion type** "
            "in `<type>` and the given language.",
            chat,
            tail="\n<type>General</type>\n<text>My dog is</text>\n#### Output:\n",
        ),
        "image_prompt": owui_task(
            "Generate a detailed prompt for am image generation task based on the given language and context.",
            chat,
        ),
        "emoji": [
            {
                "role": "user",
                "content": "Your task is to reflect the speaker's likely facial expression through a fitting "
                f"emoji. Interpret emotions from the message and reflect their facial expression using fitting, "
                f"diverse emojis (e.g., 😊, 😢, 😡, 😱).\n\nMessage: ```{last}```",
            }
        ],
        "moa": [
            {
                "role": "user",
                "content": "You have been provided with a set of responses from various models to the latest user "
                f'query: "{last}"\n\nYour task is to synthesize these responses into a single, high-quality '
                'response.\n\nResponses from models: "He is called Biscuit."',
            }
        ],
        "function_calling": [
            {
                "role": "system",
                "content": 'Available Tools: [{"name": "get_weather"}]\n\nYour task is to choose and return the '
                "correct tool(s) from the list of available tools based on the query. Follow these guidelines:\n\n"
                "- Return only the JSON object, without any additional text or explanation.",
            },
            {"role": "user", "content": f'Query: History:\nUSER: """{last}"""\nQuery: {last}'},
        ],
        "context_compaction": [
            {
                "role": "user",
                "content": "### Task:\nSummarize the conversation history that will be compacted out of the "
                f"active chat context.\n\n### Instructions:\n- ...\n\n### Previous Summary:\n\n\n"
                f"### Messages Being Compacted:\n{owui_history(chat[:-1])}\n\n### Recent Messages Kept In "
                f"Context:\n{owui_history(chat[-1:])}",
            }
        ],
        "custom": owui_task("Write a haiku about the chat history.", chat),
    }


def owui_rag(query: str, source_name: str, source_text: str, *, user_query: bool = True) -> str:
    """A user message with Open WebUI's RAG template put in front of it (RAG_SYSTEM_CONTEXT off:
    add_or_update_user_message(rag_template(...), append=False)). ``user_query=False``: 0.12.4's
    DEFAULT_RAG_TEMPLATE, which ends with the context block (as a real 0.12.4 session sent it)."""
    template = (
        "### Task:\nRespond to the user query using the provided context, incorporating inline citations in "
        "the format [id] **only when the <source> tag includes an explicit id attribute** (e.g., <source "
        'id="1">).\n\n### Guidelines:\n- If you don\'t know the answer, clearly state that.\n\n### Output:\n'
        "Provide a clear and direct response to the user's query.\n\n"
        f'<context>\n<source id="1" name="{source_name}">{source_text}</source>\n</context>\n'
    )
    if not user_query:
        return f"{template}\n{query}"
    return f"{template}\n<user_query>\n{query}\n</user_query>\n\n{query}"


def owui_attached(query: str, name: str) -> str:
    """A user message with the attachment list Open WebUI 0.12 puts before it."""
    return f'<attached_files><file type="file" id="7df1c2a9-0b4e" name="{name}"/></attached_files> {query}'


ST_IMPERSONATE = (
    "[Write your next reply from the point of view of Jo, using the chat history so far as a guideline for the "
    "writing style of Jo. Don't write as Sol or system. Don't describe actions of Sol.]"
)
ST_SUMMARIZE = (
    "Ignore previous instructions. Summarize the most important facts and events in the story so far. If a "
    "summary already exists in your memory, use that as a base and expand with new facts. Limit the summary to "
    "200 words or less. Your response should include nothing but the summary."
)
ST_QUIET = "[Pause your roleplay. Describe Sol's facial expression in one word.]"


def sillytavern(chat: list[dict], control: str | None = None) -> list[dict]:
    """SillyTavern's chat-completion request: its main prompt and card as system messages, the
    chat, and a control prompt (impersonate, quiet) as a system message at the end."""
    messages = [
        {"role": "system", "content": "Write Sol's next reply in a fictional chat between Sol and Jo."},
        {"role": "system", "content": "[Sol's personality: warm, curious]"},
        {"role": "system", "content": "[Start a new Chat]"},
        *chat,
    ]
    if control:
        messages.append({"role": "system", "content": control})
    return messages


def librechat_title(user: str, reply: str) -> list[dict]:
    """LibreChat's title request (api/app/clients: titleInstruction, its "||>" convo)."""
    convo = f'||>User:\n"{user}"\n ||>Response:\n"{reply}"'
    return [
        {
            "role": "system",
            "content": "Please generate a concise, 5-word-or-less title for the conversation, using its same "
            "language, with no punctuation. Apply title case conventions appropriate for the language. Never "
            f'directly mention the language name or the word "title"\n\n{convo}\n\n||>Title:',
        }
    ]


def lobechat_title(user: str, reply: str) -> list[dict]:
    """LobeChat's chainSummaryTitle: a system message, then the chat as "role: content" lines."""
    return [
        {
            "role": "system",
            "content": "You are a professional conversation summarizer. Generate a concise title that captures "
            "the essence of the conversation.\n\nRules:\n- Output ONLY the title text\n- Maximum 10 words",
        },
        {"role": "user", "content": f"user: {user}\nassistant: {reply}"},
    ]


def lobechat_title_zh(user: str, reply: str) -> list[dict]:
    return [
        {"role": "system", "content": "你是一名擅长会话的助理，你需要将用户的会话总结为 10 个字以内的标题"},
        {
            "role": "user",
            "content": f"user: {user}\nassistant: {reply}\n\n请总结上述对话为10个字以内的标题，不需要包含标点符号",
        },
    ]


# -- what the apps put around the messages ----------------------------------------------------------
# Open WebUI 0.12.4's builtin tools (backend/open_webui/tools/builtin.py) as its defaults send them
# with every chat request (Function Calling "Native", Capabilities > Builtin Tools), with no
# tool_choice: the 36 names and their order recorded from a live run (web search, images, code and
# channels come when those features are turned on)
OWUI_BUILTIN = (
    "get_current_timestamp calculate_timestamp ask_user list_knowledge_bases search_knowledge_bases "
    "query_knowledge_bases grep_knowledge_files search_knowledge_files query_knowledge_files view_knowledge_file "
    "search_chats view_chat search_memories list_memory_paths read_memory_path list_memories update_memory "
    "add_memory replace_memory_content delete_memory search_notes view_note write_note replace_note_content "
    "create_skill create_tasks update_task create_automation update_automation list_automations "
    "toggle_automation delete_automation search_calendar_events create_calendar_event update_calendar_event "
    "delete_calendar_event"
).split()


def tool(name: str) -> dict:
    """A tool as Open WebUI sends its builtin ones (``{"type": "function", "function": spec}``)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} (an Open WebUI builtin tool)",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        },
    }


OWUI_TOOLS = [tool(n) for n in OWUI_BUILTIN]


def owui_chat(messages: list[dict]) -> dict:
    """Open WebUI's chat request as its defaults make it (middleware.py, routers/openai.py):
    streamed, with its builtin tools and no tool_choice."""
    return {"model": "siliconfriend", "messages": messages, "stream": True, "tools": OWUI_TOOLS}


# SillyTavern's server forwards a Custom (OpenAI-compatible) request with node-fetch 2
# (src/endpoints/backends/chat-completions.js): its sliders always, an empty logit_bias
ST_HEADERS = {"User-Agent": "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)"}


def st_body(messages: list[dict], *, stream: bool = True, max_tokens: int = 300, **more) -> dict:
    """The body SillyTavern 1.12's server sends (default sliders of public/scripts/openai.js)."""
    return {
        "messages": messages,
        "model": "siliconfriend",
        "temperature": 1,
        "max_tokens": max_tokens,
        "stream": stream,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "top_p": 1,
        "logit_bias": {},
        **more,
    }


# the Expressions extension's LLM classifier (public/scripts/extensions/expressions/index.js):
# generateRaw(sampleClassifyText(reply), systemPrompt=DEFAULT_LLM_PROMPT), not streamed
ST_EXPRESSIONS = (
    "Ignore previous instructions. Classify the emotion of the last message. Output just one word, e.g. "
    '"joy" or "anger". Choose only one of the following labels: "admiration", "amusement", "anger", "joy", '
    '"neutral", "sadness", "surprise"'
)


def st_classify_text(reply: str) -> str:
    """sampleClassifyText: quotes and asterisks removed, trimmed to the end of a sentence (the
    first and last 250 characters of a long reply)."""
    import re

    text = re.sub(r'[*"]', "", reply)

    def to_end(s: str) -> str:
        cut = max(s.rfind("."), s.rfind("!"), s.rfind("?"))
        return s[: cut + 1] if cut > 0 else s

    if len(reply) < 500:
        return to_end(text).strip()
    tail = text[-250:]
    start = min((i for i in (tail.find(". "), tail.find("! "), tail.find("? ")) if i >= 0), default=-2)
    return (to_end(text[:250]) + " " + tail[start + 2 :]).strip()


def st_expressions(reply: str) -> list[dict]:
    return [{"role": "system", "content": ST_EXPRESSIONS}, {"role": "user", "content": st_classify_text(reply)}]


def st_genraw(prompt: str, system: str | None = None) -> list[dict]:
    """``/genraw`` (Quick Replies, STscript): generateRaw's messages, no chat history."""
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
