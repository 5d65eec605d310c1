"""``make local``'s two pages in headless Chromium: what a customer and an agent see.

The customer signs in on the chat page, chats (the reply streams in; one cut at the reply budget
is continued with the page's Continue button), asks for a human; the
agent signs in on the console, goes available, accepts the waiting handoff and replies; the
customer sees the handoff notice and the agent's reply. Chromium is the distribution's
(``make browser`` installs it with apt); without one the test is skipped and says why.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.local.process import LocalProcess, local_server

pytestmark = pytest.mark.slow

CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")


def chromium() -> str | None:
    """The browser to drive: ``$CHROMIUM`` when set, else the first of the distribution's names on PATH."""
    given = os.environ.get("CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser_path() -> str:
    path = chromium()
    if path is None:
        where = (
            f"CHROMIUM={os.environ['CHROMIUM']} is not executable"
            if os.environ.get("CHROMIUM")
            else (f"no {', '.join(CHROMIUM_NAMES)} on PATH")
        )
        pytest.skip(
            f"browser test needs Chromium: {where}; `make browser` installs chromium-headless-shell (apt, root)"
        )
    return path


#: Seconds between the local responder's tokens. What the page shows does not depend on it: a reply's
#: frames are cut by length and sentence (``lambdas/ws/deltas.py``), and the long reply stops at
#: the stage's reply budget, a count of tokens. It only sets how long the test waits for that long
#: reply and its continuation (about a thousand tokens: 20 s at 0.02, 5 s at 0.005).
TOKEN_DELAY = "0.005"


@pytest.fixture(scope="module")
def server(browser_path: str) -> Iterator[LocalProcess]:
    with local_server("--token-delay", TOKEN_DELAY) as running:
        yield running


def test_customer_and_agent_pages(server: LocalProcess, browser_path: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, headless=True)
        try:
            customer = browser.new_context().new_page()
            agent = browser.new_context().new_page()

            # The customer signs in (the page fills the demo password in) and the chat connects.
            customer.goto(f"{server.origin}/pages/chat.html")
            expect(customer.locator("#password")).not_to_have_value("")
            customer.click("#sign-in-button")
            expect(customer.locator("#status")).to_contain_text("Connected to session", timeout=20_000)

            # A question; the reply streams in and ends as the local responder's answer.
            customer.fill("#text", "Where is volume 3 of Frieren?")
            customer.click("#send")
            expect(customer.locator(".msg.user")).to_contain_text("Where is volume 3 of Frieren?")
            reply = customer.locator(".msg.assistant.done").last
            expect(reply).to_contain_text("[local responder] You said: Where is volume 3 of Frieren?", timeout=20_000)
            assert int(reply.get_attribute("data-deltas") or 0) >= 3, "the reply did not arrive in pieces"

            # A long question: the reply stops at the stage's reply budget, and the page offers the rest.
            customer.fill("#text", " ".join(f"Is volume {n} of Frieren out?" for n in range(1, 120))[:3900])
            customer.click("#send")
            more = customer.locator(".msg.assistant.done button.continue")
            expect(more).to_have_count(1, timeout=60_000)
            more.click()
            expect(more).to_have_count(0)
            expect(customer.locator(".msg.assistant.done")).to_have_count(3, timeout=60_000)
            expect(customer.locator(".msg.assistant.done").last).to_contain_text("Continue it exactly where it stopped")

            # The customer asks for a human: no agent is available, so the request waits, and the
            # page says so at once: the queued notice, the session shown in handoff
            customer.click("#human")
            expect(customer.locator('.msg.notice[data-event="requested"]')).to_be_visible()
            expect(customer.locator('.msg.notice[data-event="queued"]')).to_contain_text("you are next", timeout=20_000)
            expect(customer.locator("#status")).to_contain_text("(handoff)")
            # What the customer writes while waiting is kept for the agent, not answered by the model.
            customer.fill("#text", "I will wait for the agent.")
            customer.click("#send")
            expect(customer.locator(".msg.notice").last).to_contain_text("still in the queue", timeout=20_000)

            # The agent signs in, sees the waiting request, goes available and accepts it.
            agent.clock.install()  # the console polls on a timer; the test pauses and runs it where it matters
            agent.goto(f"{server.origin}/pages/agent.html")
            expect(agent.locator("#password")).not_to_have_value("")
            agent.click("#sign-in-button")
            waiting = agent.locator("#inbox li.item.waiting")
            expect(waiting).to_have_count(1, timeout=20_000)
            expect(waiting).to_contain_text("general, normal, waiting")  # its priority and time waiting
            agent.click("#available")
            expect(agent.locator("#presence")).to_have_text("available")
            # Available now, the agent is offered the customer served next (the only one here).
            offer = agent.locator("#offer")
            expect(offer).to_contain_text("Next customer for you", timeout=20_000)
            expect(offer).to_have_attribute("data-priority", "normal")
            # Accepting shows the request as the agent's own at once, without waiting for the next poll.
            # (the own inbox item itself is written by the dashboard updater from the stream, so it
            # appears at a later poll; the conversation opens on the accept's own answer)
            agent.clock.pause_at(agent.evaluate("Date.now()") + 1)
            agent.locator("#inbox li.item button").first.click()
            expect(agent.locator("#conversation")).to_be_visible(timeout=20_000)
            agent.clock.resume()
            expect(agent.locator("#inbox li.item.own")).to_have_count(1, timeout=20_000)
            expect(agent.locator("#turns")).to_contain_text("Where is volume 3 of Frieren?", timeout=20_000)
            expect(agent.locator("#turns")).to_contain_text("I will wait for the agent.")

            # The customer is told an agent took over, and sees the agent's reply.
            expect(customer.locator('.msg.notice[data-event="handoff_started"]')).to_be_visible(timeout=20_000)
            agent.fill("#reply", "Hi, this is your agent: volume 3 is out.")
            agent.click("#send")
            expect(customer.locator(".msg.agent")).to_contain_text(
                "Hi, this is your agent: volume 3 is out.", timeout=20_000
            )
            # What the customer writes now reaches the agent's console.
            customer.fill("#text", "Thanks!")
            customer.click("#send")
            expect(agent.locator("#turns")).to_contain_text("Thanks!", timeout=20_000)

            # The agent closes the request: the console says so and no poll reads the closed turns.
            agent.click("#close")
            expect(agent.locator("#log")).to_contain_text("Closed the request", timeout=20_000)
            expect(agent.locator("#inbox li.empty")).to_be_visible(timeout=20_000)
            agent.clock.run_for(3000)  # three more polls of the inbox, none of the turns
            expect(agent.locator("#inbox li.empty")).to_be_visible(timeout=20_000)
            expect(agent.locator("#log")).to_contain_text("Closed the request")
            expect(customer.locator('.msg.notice[data-event="handoff_closed"]')).to_be_visible(timeout=20_000)

            # The customer leaves; Send then says why it sends nothing.
            customer.click("#leave")
            expect(customer.locator("#status")).to_contain_text("Disconnected", timeout=20_000)
            customer.fill("#text", "Hello?")
            customer.click("#send")
            expect(customer.locator('.msg.notice[data-event="not_sent"]')).to_contain_text("You left the chat")
        finally:
            browser.close()
