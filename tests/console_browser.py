"""Drives Strata's console in headless Chromium (Debian's `chromium`, through Playwright) and
prints what a person would see, as one JSON object, for `tests/tests/integration/console.rs`
to compare with the Kafka APIs' answers:

    console_browser.py <console url> <screenshot dir> <group> [<changes>]

It opens the overview, reads the brokers, topics and groups tables, follows the group's link
(a real `<a href>`) and reads its page, then follows a topic link from there. Every page's
browser console errors (a refused script, a content security policy violation, a failed
request) are collected; screenshots are saved per page.

With `<changes>` (JSON: `{"create": topic, "alter": topic, "cancel": topic, "delete": topic}`)
it then makes those changes through the console's forms (create a topic, set a config, cancel
a move, delete the created topic) and reports what each answered; without, it reports whether
the read-only console offers any change at all.
"""

import json
import os
import sys

from playwright.sync_api import expect, sync_playwright

CHROMIUM = os.environ.get("STRATA_CHROMIUM", "/usr/bin/chromium")


def rows(page, table):
    return page.eval_on_selector_all(
        f"#{table} tbody tr",
        "trs => trs.map(tr => Array.from(tr.cells).map(td => td.innerText.trim()))",
    )


def open_page(p, out):
    """Chromium and a laptop-sized page whose console errors, script errors and failed
    requests are collected in `out["errors"]`."""
    browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.on(
        "console",
        lambda m: out["errors"].append(m.text) if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: out["errors"].append(str(e)))
    page.on("requestfailed", lambda r: out["errors"].append(f"{r.url}: {r.failure}"))
    return browser, page


def changes(page, url, shots, asked, out):
    """Makes `asked`'s changes through the forms; each answer as the page shows it."""
    said = {}

    def answer():
        # The outcome of the last change: a status in words, or an alert.
        done = page.locator(".ok, section[aria-label=changes] .error, #create-topic .error")
        done.first.wait_for()
        return done.first.inner_text()

    page.goto(url + "/")
    page.wait_for_selector("#create-topic")
    page.fill("#new-topic-name", asked["create"])
    page.fill("#new-topic-partitions", "2")
    page.click("#create-topic button[type=submit]")
    said["create"] = answer()
    page.goto(url + "/topics/" + asked["alter"])
    page.wait_for_selector("#set-config")
    page.fill("#config-name", "retention.ms")
    page.fill("#config-value", "3600000")
    page.click("#set-config button[type=submit]")
    said["alter"] = answer()
    page.goto(url + "/topics/" + asked["cancel"])
    page.get_by_role("button", name="Cancel its move").click()
    said["cancel"] = answer()
    page.screenshot(path=os.path.join(shots, "changes.png"), full_page=True)
    page.goto(url + "/topics/" + asked["delete"])
    page.wait_for_selector("#delete-topic")
    # Deleting is offered only once the name is typed again.
    said["delete_enabled_before"] = page.locator("#delete-topic button").is_enabled()
    page.fill("#delete-confirm", asked["delete"])
    page.click("#delete-topic button")
    said["delete"] = answer()
    out["changes"] = said


def main(url, shots, group, asked=None):
    os.makedirs(shots, exist_ok=True)
    out = {"errors": []}
    with sync_playwright() as p:
        browser, page = open_page(p, out)
        page.goto(url + "/")
        page.wait_for_selector("#topics tbody tr")
        page.wait_for_selector("#groups tbody tr")
        page.wait_for_selector("#brokers tbody tr")
        page.wait_for_selector("#quorum tbody tr")
        out["overview"] = {
            "brokers": rows(page, "brokers"),
            "topics": rows(page, "topics"),
            "groups": rows(page, "groups"),
            "quorum": rows(page, "quorum"),
            "moves": rows(page, "moves"),
            "stats": page.eval_on_selector_all(
                ".stat",
                "s => Object.fromEntries(s.map(e => [e.querySelector('.label').innerText, e.querySelector('.value').innerText]))",
            ),
        }
        page.screenshot(path=os.path.join(shots, "overview.png"), full_page=True)
        # The filter asks the server: only matching topics come back.
        page.fill("input[type=search]", "no-such-topic-anywhere")
        # (A locator, not a string predicate: the console's policy forbids evaluating strings,
        # and Playwright's wait_for_function would run into it.)
        expect(page.locator("#topics tbody tr")).to_have_count(0)
        out["filtered_topics"] = rows(page, "topics")
        page.fill("input[type=search]", "")
        page.wait_for_selector("#topics tbody tr")
        # Keyboard: the group's link is reachable with Tab and followed with Enter.
        link = page.locator(f"#groups a", has_text=group)
        link.focus()
        with page.expect_navigation():
            page.keyboard.press("Enter")
        page.wait_for_selector("#group-partitions tbody tr")
        out["group_url"] = page.url
        out["group"] = rows(page, "group-partitions")
        expect(page.locator("#lag-charts figure canvas")).to_have_count(2)
        out["group_totals"] = page.eval_on_selector_all(
            "#group-totals .stat",
            "s => Object.fromEntries(s.map(e => [e.querySelector('.label').innerText, e.querySelector('.value').innerText]))",
        )
        page.screenshot(path=os.path.join(shots, "group.png"), full_page=True)
        with page.expect_navigation():
            page.locator("#group-partitions a").first.click()
        page.wait_for_selector("#topic-partitions tbody tr")
        out["topic_url"] = page.url
        out["topic"] = rows(page, "topic-partitions")
        out["topic_configs"] = rows(page, "topic-configs")
        # The latest records are shown; then from an offset typed in, with the keyboard.
        page.wait_for_selector("#messages tbody tr")
        out["latest_messages"] = rows(page, "messages")
        page.fill("#message-start", "3")
        page.press("#message-start", "Enter")
        expect(page.locator("#messages tbody tr").first.locator("td").first).to_have_text("3")
        out["messages_from_3"] = rows(page, "messages")
        # Older records: the page before offset 3 starts at the log's start.
        page.get_by_role("button", name="Older").click()
        expect(page.locator("#messages tbody tr").first.locator("td").first).to_have_text("0")
        out["older_messages"] = rows(page, "messages")
        # From a date and time typed in: the record at offset 3's, then the first at or after it.
        stamp = out["messages_from_3"][0][1]
        page.fill("#message-start", stamp)
        page.press("#message-start", "Enter")
        expect(page.locator("#messages tbody tr").first.locator("td").nth(1)).to_have_text(stamp)
        out["messages_at_time"] = rows(page, "messages")
        page.screenshot(path=os.path.join(shots, "topic.png"), full_page=True)
        out["change_forms"] = page.locator("section[aria-label=changes]").count()
        if os.environ.get("CHARTS_OF"):
            # A broker's last hour, as charts (their captions say the figures in words).
            page.goto(url + "/brokers/" + os.environ["CHARTS_OF"])
            expect(page.locator("#charts figure canvas")).to_have_count(6)
            out["charts"] = page.eval_on_selector_all(
                "#charts figcaption", "cs => cs.map(c => c.innerText)"
            )
            page.screenshot(path=os.path.join(shots, "broker.png"), full_page=True)
        if asked:
            changes(page, url, shots, json.loads(asked), out)
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
