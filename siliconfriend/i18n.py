"""The web app's words in English and Chinese, and a registry that relabels components when the
user switches language."""

from __future__ import annotations

import math
from typing import Any

from memory.message import Message, Said

LANGS = {"en": "English", "zh": "中文"}

TEXT: dict[str, dict[str, str]] = {
    "title": {"en": "# SiliconFriend", "zh": "# 硅基朋友 SiliconFriend"},
    "tagline": {
        "en": "A companion that remembers, and lets you see and control what it remembers.",
        "zh": "一个会记住你的伙伴：它记得什么，你都能看到、都能管。",
    },
    "loading": {"en": "Loading…", "zh": "加载中…"},
    "login_intro": {"en": "### Log in or sign up", "zh": "### 登录或注册"},
    "username": {"en": "User name", "zh": "用户名"},
    "password": {"en": "Password", "zh": "密码"},
    "login": {"en": "Log in", "zh": "登录"},
    "signup": {"en": "Sign up", "zh": "注册"},
    "logout": {"en": "Log out", "zh": "退出登录"},
    "language": {"en": "Language", "zh": "语言"},
    "welcome": {"en": "Logged in as **{user}**", "zh": "当前用户：**{user}**"},
    "logged_out": {"en": "You are logged out.", "zh": "你已退出登录。"},
    "login_first": {"en": "Please log in first.", "zh": "请先登录。"},
    "error_title": {"en": "Refused", "zh": "未完成"},
    "warning_title": {"en": "Note", "zh": "提示"},
    "note_title": {"en": "Note", "zh": "提示"},
    "signup_closed": {"en": "Sign-up is closed on this server.", "zh": "本服务器已关闭注册。"},
    "server_error": {
        "en": "The server failed on this request ({name}; it is logged): nothing was changed unless the page said so.",
        "zh": "服务器处理这个请求时出错（{name}，已记录）：除非页面另有说明，什么都没有改动。",
    },
    # tabs
    "tab_chat": {"en": "Chat", "zh": "聊天"},
    "tab_memory": {"en": "Memory", "zh": "记忆"},
    "tab_account": {"en": "Settings & account", "zh": "设置与账户"},
    # chat
    "chat": {"en": "Conversation", "zh": "对话"},
    "message": {"en": "Message", "zh": "消息"},
    "message_ph": {
        "en": "Say something… (Enter to send, Shift+Enter for a new line)",
        "zh": "说点什么…（回车发送，Shift+回车换行）",
    },
    "counter": {"en": "{n} / {limit} characters", "zh": "{n} / {limit} 字"},
    "waiting_model": {
        "en": "⏳ Waiting for the model: {n} reply(ies) ahead of yours…",
        "zh": "⏳ 正在等待模型：前面还有 {n} 条回复…",
    },
    "looking_back": {
        "en": "⏳ Looking back over our last conversations before I answer ({n} day(s) to summarise)…",
        "zh": "⏳ 回答之前，先回顾一下我们之前的聊天（{n} 天待总结）…",
    },
    "session_lost": {
        "en": "Your session ended (logged out in another tab, or expired). Log in again: what you typed is kept.",
        "zh": "你的登录已失效（在别的标签页退出了，或已过期）。请重新登录：你输入的内容还在。",
    },
    "demo_model": {
        "en": "**Hello!** You are talking with a small demo model (SmolLM2, 135M parameters) that runs on "
        "this computer without the internet: its replies are often odd or wrong, and it speaks only "
        "English. What you tell it is remembered all the same: see the Memory tab. For real "
        "conversations, ask the server's operator to connect a real model.",
        "zh": "**你好！** 现在和你聊天的是一个在本机离线运行的小型演示模型（SmolLM2，1.35 亿参数）："
        "它的回答常常离谱或出错，而且只会说英文。你告诉它的事照样会被记住：可在「记忆」页查看。"
        "想要真正的对话，请让服务器管理员接入一个真正的大模型。",
    },
    "send": {"en": "Send", "zh": "发送"},
    "stop": {"en": "Stop", "zh": "停止"},
    "regenerate": {"en": "Regenerate / retry", "zh": "重新生成 / 重试"},
    "clear": {"en": "Clear screen", "zh": "清屏"},
    "clear_note": {
        "en": "Clearing the screen keeps the memories; manage them on the Memory tab.",
        "zh": "清屏不会删除记忆；记忆可在「记忆」页管理。",
    },
    "remembered": {"en": "What I remembered", "zh": "我想起了什么"},
    "remembered_h": {"en": "### What I remembered", "zh": "### 我想起了什么"},
    "remembered_none_today": {
        "en": "_No older memory was retrieved for this reply._",
        "zh": "_这次回复没有检索到更早的记忆。_",
    },
    "today_lines": {
        "en": "Today's conversation, in the prompt as it is ({n} turns):",
        "zh": "今天的对话，原样放在提示里（{n} 轮）：",
    },
    "today_lines_1": {
        "en": "Today's conversation, in the prompt as it is (1 turn):",
        "zh": "今天的对话，原样放在提示里（1 轮）：",
    },
    "today_short": {"en": "today's conversation: {n}", "zh": "今天的对话：{n}"},
    "remembered_none": {
        "en": "_Nothing from earlier came to mind for this reply._",
        "zh": "_这次回复没有用到以前的记忆。_",
    },
    "remembered_empty": {
        "en": "_Send a message: the memories each reply uses appear here._",
        "zh": "_发一条消息吧：每次回复用到的记忆会显示在这里。_",
    },
    "llm_error": {
        "en": "⚠️ {error}\n\nYour message is back in the box below; press **Regenerate / retry** to send it again.",
        "zh": "⚠️ 模型没能回答：{error}\n\n你的消息已放回输入框；点「重新生成 / 重试」再发一次。",
    },
    "stopped": {"en": "_(stopped)_", "zh": "_（已停止）_"},
    "nothing_to_regen": {"en": "There is no reply today to regenerate.", "zh": "今天还没有可以重新生成的回复。"},
    "col_id": {"en": "id", "zh": "编号"},
    "col_day": {"en": "day", "zh": "日期"},
    "col_kind": {"en": "kind", "zh": "类型"},
    "col_state": {"en": "state", "zh": "状态"},
    "col_pinned": {"en": "pinned", "zh": "钉住"},
    "col_recalls": {"en": "recalls", "zh": "回忆次数"},
    "col_text": {"en": "text", "zh": "内容"},
    "col_why": {"en": "why", "zh": "原因"},
    "col_importance": {"en": "importance", "zh": "重要性"},
    "col_status": {"en": "status", "zh": "状态说明"},
    "kind_turn": {"en": "turn", "zh": "对话"},
    # a memory's tier in "what I remembered"
    "tier_core": {"en": "core", "zh": "核心"},
    "tier_active": {"en": "active", "zh": "活跃"},
    "tier_long_term": {"en": "long-term", "zh": "长期"},
    "tier_archive": {"en": "from the archive", "zh": "来自归档"},
    "kind_daily_events": {"en": "daily events", "zh": "每日事件"},
    "kind_daily_personality": {"en": "daily personality", "zh": "每日性格"},
    "kind_global_events": {"en": "global events", "zh": "总体事件"},
    "kind_global_personality": {"en": "global personality", "zh": "总体性格"},
    "kind_today": {"en": "today", "zh": "今天"},
    "state_active": {"en": "active", "zh": "活跃"},
    "state_archived": {"en": "archived", "zh": "已归档"},
    "state_superseded": {"en": "superseded", "zh": "已被取代"},
    "yes": {"en": "yes", "zh": "是"},
    # memory page
    "mem_intro": {
        "en": "Every memory with its strength **S** and retention **R = e^(−t/S)**, where **t** is the "
        "time since it was last recalled (or made), in {unit}: t = 1 after {days:g} days (some kinds of "
        "memory fade at a pace of their own). Faded "
        "memories are archived, not erased: restore them, pin what must never fade, "
        "delete what you want gone.",
        "zh": "每条记忆都显示强度 **S** 与保持率 **R = e^(−t/S)**，其中 **t** 是自上次想起（或记下）以来的"
        "时间，以{unit}为单位：{days:g} 天后 t = 1（有些种类的记忆按各自的速度淡忘）。淡忘的记忆只是归档、不会抹去："
        "可以恢复，可以钉住让它永不淡忘，也可以彻底删除。",
    },
    "mem_day": {"en": "Day", "zh": "日期"},
    "mem_kind": {"en": "Kind", "zh": "类型"},
    "mem_state": {"en": "State", "zh": "状态"},
    "mem_search": {"en": "Search my memories", "zh": "搜索我的记忆"},
    "mem_search_btn": {"en": "Search / refresh", "zh": "搜索 / 刷新"},
    "mem_archived": {"en": "Include archived", "zh": "包含已归档"},
    "mem_table": {"en": "Memories (click a row to select it)", "zh": "记忆（点击一行选中）"},
    "mem_id": {"en": "Selected memory id", "zh": "选中的记忆编号"},
    "mem_id_ph": {"en": "click a row", "zh": "点击一行"},
    "no_match": {"en": "No memories match.", "zh": "没有匹配的记忆。"},
    "confirm_delete": {
        "en": "Delete memory #{id} (“{text}”) for good? This cannot be undone.",
        "zh": "要永久删除记忆 #{id}（“{text}”）吗？此操作无法撤销。",
    },
    "delete_yes": {"en": "Yes, delete it for good", "zh": "确定永久删除"},
    "delete_no": {"en": "Keep it", "zh": "保留"},
    "delete_cancelled": {"en": "Nothing was deleted.", "zh": "没有删除任何内容。"},
    "pin": {"en": "Pin", "zh": "钉住"},
    "unpin": {"en": "Unpin", "zh": "取消钉住"},
    "restore": {"en": "Restore", "zh": "恢复"},
    "delete": {"en": "Delete for good", "zh": "永久删除"},
    "all": {"en": "all", "zh": "全部"},
    "no_memories": {"en": "No memories yet.", "zh": "还没有记忆。"},
    "done_pin": {"en": "Memory #{id} pinned: it will not fade.", "zh": "记忆 #{id} 已钉住：不会淡忘。"},
    "done_unpin": {"en": "Memory #{id} unpinned.", "zh": "记忆 #{id} 已取消钉住。"},
    "done_restore": {"en": "Memory #{id} restored.", "zh": "记忆 #{id} 已恢复。"},
    "done_delete": {"en": "Memory #{id} deleted.", "zh": "记忆 #{id} 已删除。"},
    "pick_memory": {"en": "Select a memory first (click its row).", "zh": "请先选中一条记忆（点击所在行）。"},
    "summaries": {"en": "Summaries and personality", "zh": "摘要与性格画像"},
    "sum_day": {"en": "Day of the daily summary", "zh": "每日摘要的日期"},
    "daily_events": {"en": "What happened that day", "zh": "当天发生的事"},
    "daily_personality": {"en": "Your mood and traits that day", "zh": "当天的情绪与性格"},
    "global_events": {"en": "Global summary of events", "zh": "总体事件摘要"},
    "global_personality": {"en": "Personality profile and reply strategy", "zh": "性格画像与回复策略"},
    "save_daily": {"en": "Save daily summary", "zh": "保存每日摘要"},
    "save_global": {"en": "Save global summary and profile", "zh": "保存总体摘要与画像"},
    "summarise_now": {"en": "Summarise now", "zh": "立即总结"},
    "summarised": {"en": "Summarised: {days}", "zh": "已总结：{days}"},
    "summarising": {
        "en": "⏳ Summarising {day} (day {i} of {n}) · {s} s…",
        "zh": "⏳ 正在总结 {day}（第 {i} 天，共 {n} 天）· {s} 秒…",
    },
    "summarise_today": {"en": "Today too (it is not over)", "zh": "也总结今天（还没结束）"},
    "nothing_summarised": {"en": "Nothing new to summarise.", "zh": "没有需要总结的新内容。"},
    "saved": {"en": "Saved.", "zh": "已保存。"},
    "nothing_saved": {"en": "Nothing changed.", "zh": "没有改动。"},
    "plot": {"en": "Retention over time", "zh": "记忆保持率随时间变化"},
    "plot_h": {"en": "### Retention over time", "zh": "### 记忆保持率随时间变化"},
    "plot_axis": {"en": "retention R = e^(-t/S)", "zh": "保持率 R = e^(-t/S)"},
    "plot_empty": {"en": "No active memories to plot yet.", "zh": "还没有可绘制的记忆。"},
    "plot_now": {"en": "now", "zh": "现在"},
    "plot_threshold": {"en": "forgetting threshold", "zh": "遗忘阈值"},
    # settings and account
    "prefs_intro": {"en": "### Companion", "zh": "### 伙伴设置"},
    "companion_name": {"en": "Companion's name", "zh": "伙伴的名字"},
    "persona": {"en": "Persona (how your companion should be)", "zh": "人设（你希望伙伴是什么样）"},
    "backend": {"en": "Backend", "zh": "后端"},
    "model": {"en": "Model", "zh": "模型"},
    "export_link": {
        "en": '<a href="{url}" download id="download">⬇ Download my data (JSON)</a>: a link '
        "for this session only, gone after the download or in {minutes:g} minutes.",
        "zh": '<a href="{url}" download id="download">⬇ 下载我的数据（JSON）</a>：仅限本次登录使用，'
        "下载后或 {minutes:g} 分钟后失效。",
    },
    "save_prefs": {"en": "Save settings", "zh": "保存设置"},
    "data_intro": {"en": "### My data", "zh": "### 我的数据"},
    "export": {"en": "Export all my data", "zh": "导出我的全部数据"},
    "download": {"en": "Download my data (JSON)", "zh": "下载我的数据（JSON）"},
    "export_ready": {
        "en": "Your export is ready: MemoryBank JSON plus every field SiliconFriend keeps.",
        "zh": "导出已就绪：MemoryBank JSON，外加 SiliconFriend 保存的全部字段。",
    },
    "keys_intro": {
        "en": "### API keys\nUse your companion, with its memory, from any OpenAI-compatible chat app "
        "(SillyTavern, Open WebUI...): base URL `{base}`, and a key made here. A key acts as you; "
        "it is shown once.",
        "zh": "### API 密钥\n在任何兼容 OpenAI 的聊天应用（SillyTavern、Open WebUI 等）里使用你的伙伴和它的"
        "记忆：接口地址 `{base}`，加上在这里创建的密钥。密钥代表你本人，只显示一次。",
    },
    "key_label": {"en": "Name of the new key (e.g. SillyTavern)", "zh": "新密钥的名称（例如 SillyTavern）"},
    "key_create": {"en": "Create a key", "zh": "创建密钥"},
    "key_id": {"en": "Key id to revoke", "zh": "要吊销的密钥编号"},
    "key_revoke": {"en": "Revoke", "zh": "吊销"},
    "key_created": {
        "en": "Your new key (copy it now: it is not shown again):\n\n```\n{secret}\n```",
        "zh": "你的新密钥（请现在复制，之后不会再显示）：\n\n```\n{secret}\n```",
    },
    "key_revoked": {"en": "Key {id} is revoked.", "zh": "密钥 {id} 已吊销。"},
    "no_keys": {"en": "No API keys yet.", "zh": "还没有 API 密钥。"},
    "keys_table": {
        "en": "| id | key | state | created | last used | name |\n|---|---|---|---|---|---|",
        "zh": "| 编号 | 密钥 | 状态 | 创建于 | 最近使用 | 名称 |\n|---|---|---|---|---|---|",
    },
    "key_active": {"en": "active", "zh": "有效"},
    "key_is_revoked": {"en": "revoked", "zh": "已吊销"},
    "danger_intro": {
        "en": "### Delete my account\nThis erases the account, every memory, summary and setting. It cannot be undone.",
        "zh": "### 删除我的账户\n这会清除账户以及全部记忆、摘要和设置，无法撤销。",
    },
    "confirm_password": {"en": "Your password, to confirm", "zh": "输入密码以确认"},
    "delete_account": {"en": "Delete my account and all my data", "zh": "删除我的账户和全部数据"},
    "account_deleted": {"en": "Your account and all its data were deleted.", "zh": "你的账户及全部数据已删除。"},
    # what the grounding check of the day rollover left out of a summary (memory page)
    "left_out_1": {"en": "1 unsupported sentence left out", "zh": "略去了 1 句没有依据的话"},
    "left_out_n": {"en": "{n} unsupported sentences left out", "zh": "略去了 {n} 句没有依据的话"},
    "told_me_note": {
        "en": "The model's summary did not match what you said: these are your own words",
        "zh": "模型写的总结与你说的话对不上：这里是你自己的原话",
    },
    "not_from_memory": {
        "en": "Not from memory: {names}. I named this without having heard it from you.",
        "zh": "不是来自记忆：{names}。这是我自己说出来的，你并没有告诉过我。",
    },
    "no_profile_note": {
        "en": "No profile: what the model wrote could not be found in what you said",
        "zh": "没有画像：模型写的内容在你说过的话里找不到依据",
    },
}


def time_unit(days: float, lang: str) -> str:
    """The unit of the forgetting curve's t, ``days`` days, in words."""
    if days == 7:
        return "周" if lang == "zh" else "weeks"
    if days == 1:
        return "天" if lang == "zh" else "days"
    return f"{days:g} 天" if lang == "zh" else f"units of {days:g} days"


# how long a refused login must wait: seconds under a minute, else minutes (rounded up)
WAIT_SECOND = Message("wait.second", en="1 second", zh="1 秒")
WAIT_SECONDS = Message("wait.seconds", en="{n} seconds", zh="{n} 秒")
WAIT_MINUTE = Message("wait.minute", en="1 minute", zh="1 分钟")
WAIT_MINUTES = Message("wait.minutes", en="{n} minutes", zh="{n} 分钟")


def wait_said(seconds: float) -> Said:
    if seconds < 60:
        n = max(1, math.ceil(seconds))
        return WAIT_SECOND() if n == 1 else WAIT_SECONDS(n=str(n))
    minutes = math.ceil(seconds / 60)
    return WAIT_MINUTE() if minutes == 1 else WAIT_MINUTES(n=str(minutes))


def wait_words(seconds: float, lang: str) -> str:
    return wait_said(seconds).in_lang(lang)


def say(message: str, lang: str) -> str:
    """``message`` in ``lang``: a message made below the pages (a ``Said``: a refusal, a state, a
    reason) is shown by its id; an English text one was made from (stored, or passed through an
    exception) is read back to it (``Message.read``). Anything else, shown as it is."""
    said = Message.read(message or "")
    return said.in_lang(lang) if said is not None else message


def why_words(why: str, lang: str) -> str:
    """The "why" of a memory ("similar in meaning (0.86); shares words with your message") in
    ``lang``: its reasons, each read back to its message (a reason may hold "; " itself)."""
    parts = [p.strip() for p in (why or "").split(";") if p.strip()]
    out: list[str] = []
    while parts:
        joined = Message.read(f"{parts[0]}; {parts[1]}") if len(parts) > 1 else None
        if joined is not None and "; " in joined.message.templates["en"]:
            out.append(joined.in_lang(lang))
            del parts[:2]
        else:
            out.append(say(parts.pop(0), lang))
    return ("；" if lang == "zh" else "; ").join(out)


def t(key: str, lang: str = "en", **values: Any) -> str:
    entry = TEXT[key]
    text = entry.get(lang) or entry["en"]
    return text.format(**values) if values else text


class Translator:
    """Remembers which component shows which text, so that one event can relabel them all."""

    def __init__(self, lang: str = "en"):
        self.lang = lang if lang in LANGS else "en"
        self._entries: list[tuple[Any, dict[str, str]]] = []

    def __call__(self, component: Any, **attrs: Any) -> Any:
        """Register ``component``: ``attrs`` maps a property (label, value, placeholder, info)
        to a TEXT key, or (choices...) to a function of the language. Returns the component, so
        it can wrap the constructor call."""
        self._entries.append((component, attrs))
        return component

    def text(self, key: str, **values: Any) -> str:
        return t(key, self.lang, **values)

    @property
    def components(self) -> list[Any]:
        return [c for c, _ in self._entries]

    def updates(self, lang: str) -> list[dict]:
        import gradio as gr

        return [
            gr.update(**{attr: key(lang) if callable(key) else t(key, lang) for attr, key in attrs.items()})
            for _, attrs in self._entries
        ]
