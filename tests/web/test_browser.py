"""The web app in a real browser (Playwright driving Debian's Chromium), with the embedded
SmolLM2 model: two users, memories remembered across days, the memory page, export,
isolation, and deleting an account. Set SF_SCREENSHOTS=<folder> to keep screenshots."""
from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
DONE = "What I remembered ("        # the title of the panel added to a reply when it is complete
LONG = 180_000                      # ms: a reply from the CPU model, with a day rollover before it


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


@pytest.fixture
def live_app(tmp_path, e5_embedder, smollm2_backend, web_clock):
    """The app on a free port with the real SmolLM2 (short replies and summaries)."""
    import app as web_app
    from conftest import FAST_HASHER, free_port
    from memory.bank import MemoryBank
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_companion, build_web_service
    from siliconfriend.web.accounts import Accounts
    settings = Settings(home=tmp_path / "home", backend="hf", model="smollm2", max_new_tokens=20)
    bank = MemoryBank(settings.home, e5_embedder)
    companion = build_companion(settings, clock=web_clock, backend=smollm2_backend, bank=bank, summary_tokens=16)
    service = build_web_service(settings, accounts=Accounts(settings.home / "accounts.db", hasher=FAST_HASHER),
                                companion=companion, clock=web_clock)
    service.export_dir = tmp_path / "exports"
    demo = web_app.build_app(service)
    port = free_port()
    web_app.launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield f"http://127.0.0.1:{port}/", service
    demo.close()
    bank.close()


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
            arg=[selector, needle], timeout=timeout)

    def enter(self, button: str, name: str, password: str) -> None:
        self.page.locator("#username textarea").fill(name)
        self.page.locator("#password input").fill(password)
        self.page.locator(f"#{button}").click()

    def logged_in(self, name: str) -> None:
        self.wait_text("#whoami", name)
        self.page.locator("#message textarea").wait_for(state="visible")

    def say(self, text: str, replies_before: int) -> None:
        self.page.locator("#message textarea").fill(text)
        self.page.locator("#send").click()
        self.page.wait_for_function(
            "([n, done]) => (document.querySelector('#chatbot').innerText.split(done).length - 1) > n",
            arg=[replies_before, DONE], timeout=LONG)

    def tab(self, name: str) -> None:
        self.page.get_by_role("tab", name=name).click()

    def logout(self) -> None:
        self.page.locator("#logout").click()
        self.page.locator("#username textarea").wait_for(state="visible")


def test_two_users_in_a_browser(browser, live_app, web_clock, tmp_path):
    url, service = live_app
    shots = Path(os.environ["SF_SCREENSHOTS"]) if os.environ.get("SF_SCREENSHOTS") else None
    if shots:
        shots.mkdir(parents=True, exist_ok=True)
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
    assert "Pixel" not in ui.text("#chatbot")        # yesterday is memory, not today's screen
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
    assert page.locator("#global_events textarea").input_value().strip()   # yesterday was summarised
    page.locator("#mem_table [data-testid=cell-0-2]").click()                # select a row...
    page.wait_for_function("() => Number(document.querySelector('#mem_id input').value) > 0")
    page.get_by_role("button", name="Pin", exact=True).click()               # ...and pin it
    ui.wait_text("#mem_status", "pinned")
    assert "yes" in ui.text("#mem_table")
    ui.shot("03-memory-page")

    # export all my data
    ui.tab("Settings & account")
    page.locator("#export").click()
    page.locator("#download").wait_for(state="visible")
    with page.expect_download() as download:
        page.locator("#download").click()
    exported = json.loads(Path(download.value.path()).read_text())
    assert list(exported) == ["alice"]
    assert any("Pixel" in t["query"] for t in exported["alice"]["history"]["2024-05-04"])
    assert exported["alice"]["siliconfriend"]["memories"]
    ui.logout()

    # bob sees none of it
    ui.enter("signup", "bob", "bob-password")
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
    page.locator("#export").click()
    page.locator("#download").wait_for(state="visible")
    with page.expect_download() as download:
        page.locator("#download").click()
    bob_export = Path(download.value.path()).read_text()
    assert "Pixel" not in bob_export and list(json.loads(bob_export)) == ["bob"]
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
    assert not service.bank.user_dir("alice").exists() and not service.accounts.exists("alice")
    home = service.settings.home
    assert not [p for p in home.rglob("*") if p.is_file() and b"Pixel" in p.read_bytes()]
    ui.enter("login", "alice", "alice-password")
    ui.wait_text("#login_message", "wrong user name or password")
    assert service.accounts.exists("bob") and service.bank.has_user("bob")
    assert not errors, errors
    context.close()
