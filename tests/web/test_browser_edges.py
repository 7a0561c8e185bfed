"""The page's edges in a real browser (Playwright driving Debian's Chromium), with a chat backend
whose replies the test sets: links and images in a reply, "what I remembered" after a reload, a
message sent while a reply streams, the memory page's search in Chinese, its table and its
words, and the lock-out message."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from test_browser import UI, browser, serve_app  # noqa: F401 - the module's browser fixture

from siliconfriend.accounts.rate_limit import Limits

pytestmark = [pytest.mark.browser]


class ScriptedBackend:
    """Replies with ``reply`` (``{message}`` is the user's words); while ``hold`` is set, a reply
    waits after its first chunk until it is cleared (a reply still streaming)."""

    name = "scripted"
    model = "scripted"
    context_tokens = 4096

    def __init__(self):
        self.reply = "Noted: {message}"
        self.hold = threading.Event()

    def count_tokens(self, text: str) -> int:
        return max(1, len(text) // 4)

    def stream(self, messages, *, max_tokens=None):
        said = messages[-1].content.split("\n\n")[-1]
        text = self.reply.replace("{message}", said)
        yield text[:8]
        deadline = time.time() + 20
        while self.hold.is_set() and time.time() < deadline:
            time.sleep(0.05)
        yield text[8:]


@pytest.fixture(scope="module")
def edge_app(tmp_path_factory, e5_embedder):
    from conftest import Clock

    clock = Clock(datetime(2024, 5, 4, 10, 0))
    backend = ScriptedBackend()
    url, service, stop = serve_app(tmp_path_factory.mktemp("browser-edges") / "home", e5_embedder, backend, clock)
    yield url, service, backend, clock
    stop()


@contextlib.contextmanager
def opened(browser, url: str, name: str | None = None):  # noqa: F811
    """A fresh browser context on the app: (UI, page, the addresses it requested outside the
    app), signed up as ``name`` where given; closed afterwards."""
    context = browser.new_context()
    try:
        page = context.new_page()
        outside: list[str] = []
        page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(url.rstrip("/")) else None)
        page.goto(url)
        ui = UI(page, None)
        if name:
            ui.enter("signup", name, f"{name}-password")
            ui.logged_in(name)
        yield ui, page, outside
    finally:
        context.close()


def test_links_in_replies_are_text_and_images_never_load(browser, edge_app):  # noqa: F811
    url, service, backend, _ = edge_app
    with opened(browser, url, "lina") as (ui, page, outside):
        backend.reply = (
            "Read [the guide](https://evil.example/guide) or https://evil.example/raw now. "
            "![a cat](https://evil.example/cat.png) <img src='https://evil.example/tag.png'> "
            "<a href='https://evil.example/a'>here</a> **done**<br>next line"
        )
        ui.say("Where can I read more?", 0)
        chat = page.locator("#chatbot")
        assert chat.locator("a[href*='evil.example']").count() == 0
        assert chat.locator("img[src*='evil.example']").count() == 0
        text = chat.inner_text()
        assert "https://evil.example/guide" in text and "https://evil.example/raw" in text  # visible
        assert "https://evil.example/cat.png" in text
        assert chat.locator("strong", has_text="done").count() >= 1  # markdown still works
        assert "<br>" not in text and "next line" in text  # a model's HTML line break is a line break
        page.reload()
        ui.logged_in("lina")
        ui.wait_text("#chatbot", "https://evil.example/raw")
        assert chat.locator("a[href*='evil.example']").count() == 0
        assert chat.locator("img[src*='evil.example']").count() == 0
        assert not [u for u in outside if "evil.example" in u]


def test_what_i_remembered_shows_the_last_replys_after_a_reload(browser, edge_app):  # noqa: F811
    url, service, backend, _ = edge_app
    with opened(browser, url, "remy") as (ui, page, _):
        backend.reply = "Noted: {message}"
        ui.say("My bicycle is called Blue Comet.", 0)
        ui.say("What is my bicycle called?", 1)
        panel = page.locator("#remembered")
        before = panel.inner_text()
        assert "Blue Comet" in before
        page.reload()
        ui.logged_in("remy")
        ui.wait_text("#remembered", "Blue Comet")


def test_a_message_sent_while_a_reply_streams_is_not_lost(browser, edge_app):  # noqa: F811
    url, service, backend, _ = edge_app
    with opened(browser, url, "enzo") as (ui, page, _):
        backend.reply = "Noted slowly: {message}"
        backend.hold.set()
        box = page.locator("#message textarea")
        box.fill("first message")
        box.press("Enter")
        ui.wait_text("#chatbot", "Noted sl")  # the reply has begun and waits
        box.fill("second message")
        box.press("Enter")
        time.sleep(1.0)
        backend.hold.clear()
        # the second message waits in its box and is sent once the first reply has ended
        ui.wait_text("#chatbot", "Noted slowly: second message", timeout=60_000)
        assert ui.text("#chatbot").count("Noted slowly: first message") == 1


def test_the_memory_page_search_finds_a_single_chinese_character(browser, edge_app):  # noqa: F811
    url, service, backend, clock = edge_app
    with opened(browser, url, "bobo") as (ui, page, _):
        dog = "我的狗叫旺财，我每周都和同事一起加班到很晚，周末还要去上英语课。"
        others = ["我的猫叫小白，它喜欢吃鱼。", "我养了一只仓鼠。", "我家的鹦鹉会说话。", "我的兔子喜欢吃胡萝卜。"]
        for i, said in enumerate([*others, dog]):
            service.bank.add_turn("bobo", said, "好的。<br>下次再聊。", clock.now - timedelta(days=1, minutes=-i))
        service.bank.settle()
        ui.tab("Memory")
        page.locator("#mem_query textarea, #mem_query input").first.fill("狗")
        page.locator("#mem_search").click()
        ui.wait_text("#mem_table", "旺财")
        table = page.locator("#mem_table").inner_text()
        assert table.index("旺财") >= 0 and "<br>" not in table  # a reply's line break is not shown as markup
        intro = page.locator("#mem_intro").inner_text()
        assert "t is the time since it was last recalled" in intro and "weeks" in intro
        # no header is broken inside a word: each header cell's words fit its width
        broken = page.evaluate(
            """() => {
                const out = [];
                for (const th of document.querySelectorAll('#mem_table th')) {
                    const walk = document.createTreeWalker(th, NodeFilter.SHOW_TEXT);
                    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
                        const text = node.textContent.trim();
                        if (!text) continue;
                        const r = document.createRange(); r.selectNodeContents(node);
                        const lines = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
                        if (lines.size > text.split(/\\s+/).length) out.push(text);
                    }
                }
                return out;
            }"""
        )
        assert broken == []


def test_a_lock_out_of_seconds_says_seconds(browser, edge_app):  # noqa: F811
    url, service, backend, _ = edge_app
    service.accounts.signup("lou", "lou-password")

    def failures() -> int:
        return len(service.accounts.limiter.store.events("user:lou", "fail", 0))

    with opened(browser, url) as (ui, page, _):

        def send(password: str) -> None:
            """Log in as lou; the page drops a click that comes while the last try's event is
            still finishing there (its answer shown a moment before), so a try is sent once its
            request left the page, and a dropped one is made again."""
            for _ in range(10):
                ui.fill_login("lou", password)
                try:
                    with page.expect_request(
                        lambda r: "queue/join" in r.url and password in (r.post_data or ""), timeout=5000
                    ):
                        page.locator("#login").click()
                    return
                except PlaywrightTimeout:
                    continue
            raise AssertionError(f"the page sent no login with {password!r}")

        for i in range(Limits().per_pair):
            send(f"wrong {i}")
            deadline = time.monotonic() + 30
            while failures() <= i and time.monotonic() < deadline:
                time.sleep(0.05)
            page.wait_for_function("() => document.querySelector('#password input').value === ''")
        assert failures() == Limits().per_pair
        send("lou-password")
        ui.wait_text("#login_message", "try again in")
        message = page.locator("#login_message").inner_text()
        assert "second" in message and "minute" not in message, message
