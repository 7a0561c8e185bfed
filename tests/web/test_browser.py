"""The web app in a real browser (Playwright driving Debian's Chromium), with the embedded
SmolLM2 model: two users, memories remembered across days, the memory page, export,
isolation, and deleting an account. Set SF_SCREENSHOTS=<folder> to keep screenshots."""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DONE = "What I remembered ("  # the title of the panel added to a reply when it is complete
LONG = 180_000  # ms: a reply from the CPU model, with a day rollover before it


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = shutil.which("chromium")
    if executable is None:
        pytest.skip("Debian chromium is not installed (make test installs it via .ci/browser-deps)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


def serve_app(home: Path, embedder, chat_backend, clock, **options):
    """app.py's app over ``home`` with ``chat_backend`` (``options``: settings, such as the
    backend's name), on a free port, as app.py serves it (the API
    too, and the keys section): (url, service, stop)."""
    from conftest import FAST_HASHER, free_port

    import app as web_app
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.accounts.users import Accounts
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_companion, build_web_service

    settings = Settings(home=home, max_new_tokens=20, **options)
    bank = MemoryBank(SqliteStores(settings.home), embedder)
    companion = build_companion(settings, clock=clock, backend=chat_backend, bank=bank, summary_tokens=16)
    service = build_web_service(
        settings,
        accounts=Accounts.at(settings.home / "accounts.db", hasher=FAST_HASHER),
        companion=companion,
        clock=clock,
    )
    demo = web_app.build_app(service)
    port = free_port()
    routes = web_app.api_routes(service)
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True, routes=routes)

    def stop():
        demo.close()
        bank.close()

    return f"http://127.0.0.1:{port}/", service, stop


@pytest.fixture(scope="module")
def live_app(tmp_path_factory, e5_embedder, smollm2_backend):
    """The app on a free port with the real SmolLM2 (short replies and summaries), shared by the
    tests of this module (one server, one browser); its clock is the module's own."""
    from conftest import Clock

    clock = Clock(datetime(2024, 5, 4, 10, 0))
    home = tmp_path_factory.mktemp("browser") / "home"
    url, service, stop = serve_app(home, e5_embedder, smollm2_backend, clock, backend="hf", model="smollm2")
    yield url, service, clock
    stop()


def shots_dir(name: str) -> Path:
    """Screenshots for people to look at: out/<name>/ at the repository root (or $SF_SCREENSHOTS)."""
    from conftest import ROOT

    folder = Path(os.environ.get("SF_SCREENSHOTS") or ROOT / "out") / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class UI:
    def __init__(self, page, shots: Path | None):
        self.page, self.shots = page, shots

    def shot(self, name: str) -> None:
        if self.shots:
            self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def text(self, selector: str) -> str:
        return self.page.locator(selector).inner_text()

    def wait_text(self, selector: str, needle: str, timeout: int = 30_000) -> None:
        self.page.wait_for_function(
            "([sel, needle]) => { const e = document.querySelector(sel); return e && e.innerText.includes(needle); }",
            arg=[selector, needle],
            timeout=timeout,
        )

    def fill_login(self, name: str, password: str) -> None:
        self.page.locator("#username textarea").fill(name)
        self.page.locator("#password input").fill(password)

    def enter(self, button: str, name: str, password: str) -> None:
        self.fill_login(name, password)
        self.page.locator(f"#{button}").click()

    def logged_in(self, name: str) -> None:
        self.wait_text("#whoami", name)
        self.page.locator("#message textarea").wait_for(state="visible")

    def say(self, text: str, replies_before: int, *, key: str | None = None) -> None:
        """Type ``text`` and send it (with the Send button, or by pressing ``key``), then wait
        for the reply to be complete."""
        box = self.page.locator("#message textarea")
        box.fill(text)
        if key:
            box.press(key)
        else:
            self.page.locator("#send").click()
        self.wait_replies(replies_before + 1)

    def wait_replies(self, n: int) -> None:
        self.page.wait_for_function(
            "([n, done]) => (document.querySelector('#chatbot').innerText.split(done).length - 1) >= n",
            arg=[n, DONE],
            timeout=LONG,
        )

    def replies(self) -> int:
        return self.text("#chatbot").count(DONE)

    def tab(self, name: str) -> None:
        self.page.get_by_role("tab", name=name).click()

    def logout(self) -> None:
        self.page.locator("#logout").click()
        self.page.locator("#username textarea").wait_for(state="visible")


def download_export(page) -> str:
    """Export from the settings tab and download it by its one-time link: the file's text."""
    page.locator("#export").click()
    link = page.locator("#export_link a#download")
    link.wait_for(state="visible")
    with page.expect_download() as download:
        link.click()
    return Path(download.value.path()).read_text()


def test_a_new_users_first_five_minutes(browser, live_app):
    """Sign up, chat with Enter, ask about something said earlier that day, the memory page,
    search, pin, delete with confirmation, export, 中文; then a stale tab. Screenshots in
    out/first-five-minutes/."""
    url, service, _ = live_app
    ui_shots = shots_dir("first-five-minutes")
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    ui = UI(page, ui_shots)
    page.goto(url)
    page.locator("#username textarea").wait_for(state="visible", timeout=60_000)
    ui.enter("signup", "nina", "nina-password")
    ui.logged_in("nina")
    ui.wait_text("#chatbot", "small demo model")  # said once, before the first message
    ui.shot("01-signed-up")

    # Enter sends; Shift+Enter is a new line in the box
    box = page.locator("#message textarea")
    box.fill("My dog is called Rex.")
    box.press("Shift+Enter")
    box.type("He is a beagle.")
    assert box.input_value() == "My dog is called Rex.\nHe is a beagle." and ui.replies() == 0
    box.press("Enter")
    ui.wait_replies(1)
    assert box.input_value() == ""
    ui.say("I like tea <b>very</b> much.", 1, key="Enter")  # shown as typed, not as HTML
    assert "<b>very</b>" in ui.text("#chatbot")
    ui.say("What is my dog's name?", 2, key="Enter")
    panel = ui.text("#remembered")
    assert "Today's conversation" in panel and "My dog is called Rex" in panel
    assert "today's conversation: 2" in ui.text("#chatbot")
    ui.shot("02-chat-same-day")

    # the memory page: a search that matches nothing says so; a real one finds the turn
    ui.tab("Memory")
    ui.wait_text("#mem_table", "beagle")
    assert page.locator("#mem_id textarea").input_value() == ""  # no id selected, not "0"
    page.locator("#mem_query textarea").fill("zzqxj")
    page.locator("#mem_search").click()
    ui.wait_text("#mem_search_note", "No memories match")
    page.locator("#mem_query textarea").fill("beagle")
    page.locator("#mem_search").click()
    page.wait_for_function("() => !document.querySelector('#mem_search_note').innerText.includes('No memories')")
    ui.wait_text("#mem_table", "beagle")
    assert "tea" not in ui.text("#mem_table")
    page.locator("#mem_table [data-testid=cell-0-8]").click()
    page.wait_for_function("() => Number(document.querySelector('#mem_id textarea').value) > 0")
    page.locator("#mem_pin").click()
    ui.wait_text("#mem_status", "pinned")
    # a failed action: the status line says why, the rest of the page stays
    page.locator("#mem_id textarea").fill("999")
    page.locator("#mem_pin").click()
    ui.wait_text("#mem_status", "no memory 999")
    assert "beagle" in ui.text("#mem_table") and "Error" not in ui.text("#mem_table")
    ui.shot("03-memory-search-pin")
    # delete asks first
    page.locator("#mem_query textarea").fill("")
    page.locator("#mem_search").click()
    ui.wait_text("#mem_table", "tea")
    page.locator("#mem_table [data-testid=cell-1-8]").click()  # the tea turn (newest first)
    page.wait_for_function("() => Number(document.querySelector('#mem_id textarea').value) > 0")
    page.locator("#mem_delete").click()
    ui.wait_text("#mem_status", "for good?")
    assert len(service.memory_page.memories(service.accounts.login("nina", "nina-password").token)) == 3
    ui.shot("04-delete-confirm")
    page.locator("#mem_delete_yes").click()
    ui.wait_text("#mem_status", "deleted")
    page.wait_for_function("() => !document.querySelector('#mem_table').innerText.includes('very')")

    # export
    ui.tab("Settings & account")
    exported = json.loads(download_export(page))
    assert list(exported) == ["nina"] and "beagle" in json.dumps(exported)
    assert not list(service.exports.export_dir.glob("*.json"))  # removed after the download

    # 中文: the labels, the placeholder, the table, its values and the plot; every tab read for
    # English words outside what nina and the model said
    page.locator("#lang").get_by_text("中文").click()
    ui.wait_text("body", "聊天")
    ui.wait_text("#chatbot", "我想起了什么")  # the titles above the earlier replies follow the switch
    ui.wait_text("#message_counter", "字")
    english = {"chat": english_words(page, service, "nina", "nina-password")}
    ui.tab("记忆")
    ui.wait_text("#mem_table", "编号")
    ui.wait_text("#mem_table", "对话")
    ui.wait_text("#mem_table", "天后淡忘")  # the state in words
    page.locator("#mem_query textarea").fill("beagle")
    page.locator("#mem_search").click()
    ui.wait_text("#mem_table", "相同的词")  # the why
    page.locator("#mem_id textarea").fill("abc")
    page.locator("#mem_pin").click()
    ui.wait_text("#mem_status", "没有编号为 abc 的记忆")
    page.locator("#retention_plot img").first.wait_for()
    english["memory"] = english_words(page, service, "nina", "nina-password", typed=("abc", "beagle"))
    ui.shot("05-memory-zh")
    ui.tab("设置与账户")
    ui.wait_text("#keys_intro", "API 密钥")  # the keys section follows the switch
    ui.wait_text("#api_keys", "还没有 API 密钥")
    english["account"] = english_words(page, service, "nina", "nina-password")
    ui.tab("聊天")
    assert "回车发送" in page.locator("#message textarea").get_attribute("placeholder")
    page.locator("#send").click()  # an empty message: refused, in Chinese
    ui.wait_text("body", "消息是空的")
    page.reload()
    ui.logged_in("nina")
    ui.wait_text("#message_counter", "字")  # the counter after a reload, before any typing
    ui.shot("06-chat-zh")
    english["reloaded"] = english_words(page, service, "nina", "nina-password")
    assert not any(english.values()), english
    page.locator("#lang").get_by_text("English").click()
    ui.wait_text("body", "Chat")

    # a stale tab: logged out in another tab, the typed text survives a new login
    other = context.new_page()
    other.goto(url)
    UI(other, None).logged_in("nina")
    other.locator("#logout").click()
    other.locator("#username textarea").wait_for(state="visible")
    page.locator("#message textarea").fill("Words I do not want to lose.")
    page.locator("#message textarea").press("Enter")
    page.locator("#username textarea").wait_for(state="visible")
    ui.wait_text("#login_message", "session ended")
    ui.shot("07-stale-tab-login")
    ui.enter("login", "nina", "nina-password")
    ui.logged_in("nina")
    assert page.locator("#message textarea").input_value() == "Words I do not want to lose."
    ui.shot("08-text-kept")
    # the login box in Chinese: a wrong password, then the back-off, said in minutes
    page.locator("#lang").get_by_text("中文").click()
    ui.wait_text("body", "聊天")
    ui.logout()
    limiter = service.accounts.limiter
    before = limiter.limits
    limiter.limits = replace(before, base_backoff_s=60.0)  # a busy machine's round trips stay inside it
    for i in range(5):
        ui.enter("login", "nina", f"wrong {i}")
        page.wait_for_function("() => document.querySelector('#password input').value === ''")
        ui.wait_text("#login_message", "用户名或密码错误")
    ui.enter("login", "nina", "nina-password")
    ui.wait_text("#login_message", "后再试")
    # a wait of seconds said in seconds, of a minute as one (in Chinese either way)
    assert re.search(r"请(\d+ 秒|1 分钟)后再试", ui.text("#login_message")), ui.text("#login_message")
    ui.shot("09-login-zh-back-off")
    assert "seconds" not in ui.text("#login_message")
    limiter.limits = before
    assert not errors, errors
    context.close()


ALLOWED_ENGLISH = {"SiliconFriend", "API", "JSON", "SillyTavern", "Open", "WebUI", "OpenAI", "Shift", "MemoryBank"}


def english_words(page, service, user: str, password: str, typed: tuple[str, ...] = ()) -> list[str]:
    """The English words on the page, outside what the user and the model said (the memories, the
    replies and the summaries, which the model writes in English) and the names of products and
    models."""
    import re

    token = service.accounts.login(user, password).token
    content = " ".join(
        [r.text for r in service.memory_page.memories(token)]
        + [r.response for r in service.chat.today(token)]
        + list(map(str, service.memory_page.summaries(token).values()))
        + list(service.models.labels.values())
        + list(service.models.labels)
    )
    known = set(re.findall(r"[A-Za-z]+", content + " ".join(typed))) | ALLOWED_ENGLISH | {user}
    # Gradio's own toasts' titles, footer and screen-reader announcements ("common.complete") follow
    # the browser's language (here English), not the page's
    text = page.evaluate(
        """() => {
            const style = document.createElement("style");
            style.textContent = ".toast-wrap, footer, [aria-live] { display: none !important; }";
            document.head.appendChild(style);
            const text = document.body.innerText;
            style.remove();
            return text;
        }"""
    )
    return sorted({w for w in re.findall(r"[A-Za-z]{2,}", text) if w not in known})


def test_two_users_in_a_browser(browser, live_app):
    url, service, web_clock = live_app
    shots = shots_dir("two-users")
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    ui = UI(page, shots)
    page.goto(url)
    page.locator("#username textarea").wait_for(state="visible", timeout=60_000)
    ui.shot("01-login")

    # alice, day 1: tells the companion something
    ui.enter("signup", "alice", "alice-password")
    ui.logged_in("alice")
    ui.say("My cat is called Pixel and she loves tuna.", 0)
    assert "Pixel" in ui.text("#chatbot")

    # day 2: a reload brings the page back logged in; the companion remembers yesterday
    web_clock.now += timedelta(days=1)
    page.reload()
    ui.logged_in("alice")
    assert "Pixel" not in ui.text("#chatbot")  # yesterday is memory, not today's screen
    ui.say("What is my cat called?", 0)
    ui.shot("02-chat-remembered")
    panel = ui.text("#remembered")
    assert "2024-05-04" in panel and "Pixel" in panel and "S " in panel and "R " in panel

    # the memory page finds it
    ui.tab("Memory")
    page.locator("#mem_query textarea").fill("Pixel")
    page.locator("#mem_search").click()
    ui.wait_text("#mem_table", "Pixel")
    assert "2024-05-04" in ui.text("#mem_table")
    # yesterday was summarised: the tab's own refresh fills the summaries, and may come after the
    # search's table
    page.wait_for_function("() => document.querySelector('#global_events textarea').value.trim() !== ''")
    page.locator("#mem_table [data-testid=cell-0-2]").click()  # select a row...
    page.wait_for_function("() => Number(document.querySelector('#mem_id textarea').value) > 0")
    page.locator("#mem_pin").click()  # ...and pin it
    ui.wait_text("#mem_status", "pinned")
    assert "yes" in ui.text("#mem_table")
    ui.shot("03-memory-page")

    # export all my data: the link works in this browser only, and once
    ui.tab("Settings & account")
    page.locator("#export").click()
    page.locator("#export_link a#download").wait_for(state="visible")
    href = page.locator("#export_link a#download").get_attribute("href")
    elsewhere = browser.new_context()  # another browser, with no session: refused, link still good
    assert elsewhere.request.get(url + href).status == 404
    elsewhere.close()
    with page.expect_download() as download:  # the same link, in alice's browser
        page.locator("#export_link a#download").click()
    exported = json.loads(Path(download.value.path()).read_text())
    assert list(exported) == ["alice"]
    assert any("Pixel" in t["query"] for t in exported["alice"]["history"]["2024-05-04"])
    assert exported["alice"]["siliconfriend"]["memories"]
    assert page.context.request.get(url + href).status == 404  # used

    # alice logs out in one tab and types in another, which goes to the login box with her text;
    # bob logs in on that tab: her draft is not shown to him
    other = context.new_page()
    other.goto(url)
    tab2 = UI(other, None)
    tab2.logged_in("alice")
    ui.logout()
    other.locator("#message textarea").fill("Alice's private draft")
    other.locator("#message textarea").press("Enter")
    other.locator("#username textarea").wait_for(state="visible")  # her text is kept for her (see above)
    tab2.enter("signup", "bob", "bob-password")
    tab2.logged_in("bob")
    assert other.locator("#message textarea").input_value() == ""
    other.close()

    # bob sees none of it
    ui.enter("login", "bob", "bob-password")
    ui.logged_in("bob")
    assert "Pixel" not in ui.text("#chatbot") and "tuna" not in ui.text("#chatbot")
    ui.tab("Memory")
    page.locator("#mem_query textarea").fill("Pixel")
    page.locator("#mem_search").click()
    page.wait_for_timeout(1500)
    assert "Pixel" not in ui.text("#mem_table") and "tuna" not in page.content()
    page.locator("#mem_query textarea").fill("")
    page.locator("#mem_search").click()
    page.wait_for_timeout(1000)
    assert "2024-05-04" not in ui.text("#mem_table")
    ui.tab("Settings & account")
    bob_export = download_export(page)
    assert "Pixel" not in bob_export and list(json.loads(bob_export)) == ["bob"]
    # an API key's label is shown as typed, never as HTML; a refused revoke says why, no error badge
    assert page.locator("#key_id textarea").input_value() == ""  # not a pre-filled 0
    label = "<b>bold</b> <img src=x> **star**"
    page.locator("#key_label textarea").fill(label)
    page.locator("#key_create").click()
    ui.wait_text("#new_key", "sf-")
    ui.wait_text("#api_keys", label)
    assert page.locator("#api_keys img, #api_keys b, #api_keys strong").count() == 0
    page.locator("#key_id textarea").fill("999")
    page.locator("#key_revoke").click()
    ui.wait_text("#new_key", "no API key 999")
    assert "Error" not in ui.text("#new_key") and "error" not in (page.locator("#new_key").get_attribute("class") or "")
    ui.shot("04-bob-keys")
    # the language switch relabels the page
    page.locator("#lang").get_by_text("中文").click()
    ui.wait_text("body", "聊天")
    ui.shot("04-bob-zh")
    page.locator("#lang").get_by_text("English").click()
    ui.wait_text("body", "Chat")
    ui.logout()

    # alice again: today's conversation is back; then she deletes her account
    ui.enter("login", "alice", "alice-password")
    ui.logged_in("alice")
    ui.wait_text("#chatbot", "What is my cat called?")
    ui.tab("Settings & account")
    page.locator("#delete_password input").fill("alice-password")
    page.locator("#delete_account").click()
    ui.wait_text("#login_message", "deleted")
    ui.shot("05-deleted")
    assert not service.bank.stores.user_dir("alice").exists() and not service.accounts.exists("alice")
    home = service.settings.home
    assert not [p for p in home.rglob("*") if p.is_file() and b"Pixel" in p.read_bytes()]
    ui.enter("login", "alice", "alice-password")
    ui.wait_text("#login_message", "wrong user name or password")
    assert service.accounts.exists("bob") and service.bank.has_user("bob")
    assert not errors, errors
    context.close()


def test_a_chinese_page_reads_chinese_where_the_app_speaks(browser, live_app):
    """What the app itself says reaches a reader of the Chinese page in Chinese: the built-in
    model's name, a refusal naming a memory id, the toast's title, and the summaries "summarise
    now" writes (the day's own words said as such, "too little was said", the global summary's
    date heading), with their dates in Chinese."""
    import re
    from datetime import time as clock_time

    url, service, clock = live_app
    session = service.account.signup("lin", "lin-password")
    service.account.save_prefs(session.token, lang="zh")
    when = datetime.combine(clock.now.date() - timedelta(days=2), clock_time(20, 0))
    service.bank.add_turn("lin", "我的狗叫旺财，它今年三岁了，特别喜欢追球。", "真好！", when)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    ui = UI(page, shots_dir("chinese-page"))
    page.goto(url)
    page.locator("#username textarea").wait_for(state="visible", timeout=60_000)
    page.locator("#lang").get_by_text("中文").click()
    ui.enter("login", "lin", "lin-password")
    ui.logged_in("lin")
    ui.wait_text("body", "聊天")

    ui.tab("设置与账户")
    model = page.locator("#model input").input_value()
    assert "内置" in model and "built in" not in model, model

    ui.tab("记忆")
    page.locator("#mem_id textarea").fill("999")
    page.locator("#mem_pin").click()
    ui.wait_text("#mem_status", "没有编号为 999 的记忆")
    assert "for this user" not in ui.text("#mem_status")
    page.locator(".toast-title").first.wait_for()
    page.wait_for_function("() => document.querySelector('.toast-title').innerText.includes('提示')")
    assert "Warning" not in page.locator(".toast-title").first.inner_text()

    page.locator("#summarise_now").click()
    ui.wait_text("#sum_status", "已总结", timeout=LONG)
    ui.shot("summarised-zh")
    summaries = service.memory_page.summaries(session.token)
    written = " ".join(str(summaries[k]) for k in ("daily_events", "daily_personality", "global_events"))
    assert "You told me" not in written and "Too little was said" not in written, written
    # one day summarised: the global summary is that day's, under its date, in Chinese
    assert re.match(r"\d{4}年\d{1,2}月\d{1,2}日（星期.）：", summaries["global_events"]), summaries["global_events"]
    page.wait_for_function("() => /\\d{4}年/.test(document.querySelector('#global_events textarea').value)")
    page.context.close()
