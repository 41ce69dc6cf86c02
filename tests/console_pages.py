"""Drives the console's transactions, security and group pages in headless Chromium (as
`console_browser.py` does the overview's) and prints what a person would see, as one JSON
object, for `tests/tests/integration/console.rs`:

    console_pages.py <console url> <screenshot dir> <group> <share group> [abort]

It follows the header's links (real `<a href>`) to the transactions page and the security
page, reads their tables, then opens the group's and the share group's pages and reads their
members and share partitions. With `abort`, it aborts the first open transaction shown through
the page's two-step button and reports the answer. Browser console errors are collected;
screenshots are saved per page.
"""

import json
import os
import sys

from playwright.sync_api import expect, sync_playwright

from console_browser import open_page, rows


def main(url, shots, group, share_group, abort=None):
    os.makedirs(shots, exist_ok=True)
    out = {"errors": []}
    with sync_playwright() as p:
        browser, page = open_page(p, out)
        page.goto(url + "/")
        page.wait_for_selector("#brokers tbody tr")
        with page.expect_navigation():
            page.locator("header nav a", has_text="Transactions").click()
        page.wait_for_selector("#transactions tbody tr")
        page.wait_for_selector("#open-transactions tbody tr")
        out["transactions_url"] = page.url
        out["transactions"] = rows(page, "transactions")
        out["open"] = rows(page, "open-transactions")
        page.screenshot(path=os.path.join(shots, "transactions.png"), full_page=True)
        if abort:
            page.locator("#open-transactions button.abort").first.click()
            page.locator("#open-transactions button.abort-confirm").first.click()
            done = page.locator("section[aria-label=transactions] .ok, section[aria-label=transactions] p.error")
            done.first.wait_for()
            out["aborted"] = done.first.inner_text()
            # The next refresh shows one open transaction fewer.
            expect(page.locator("#open-transactions tbody tr")).to_have_count(len(out["open"]) - 1, timeout=15000)
            out["open_after"] = rows(page, "open-transactions")
        with page.expect_navigation():
            page.locator("header nav a", has_text="Security").click()
        page.wait_for_selector("#authorizer")
        page.wait_for_selector("#users tbody tr")
        out["authorizer"] = page.locator("#authorizer").inner_text()
        out["users"] = rows(page, "users")
        out["quotas"] = rows(page, "quotas")
        out["security_text"] = page.locator("main").inner_text()
        page.screenshot(path=os.path.join(shots, "security.png"), full_page=True)
        page.goto(url + "/groups/" + group)
        page.wait_for_selector("#group-members tbody tr")
        out["members"] = rows(page, "group-members")
        out["reset_form"] = page.locator("#reset-offsets").count()
        page.screenshot(path=os.path.join(shots, "group-members.png"), full_page=True)
        page.goto(url + "/groups/" + share_group)
        page.wait_for_selector("#share-partitions tbody tr")
        page.wait_for_selector("#group-members tbody tr")
        out["share_members"] = rows(page, "group-members")
        out["share_partitions"] = rows(page, "share-partitions")
        out["share_heading"] = page.locator("h2", has_text="Members").inner_text()
        page.screenshot(path=os.path.join(shots, "share-group.png"), full_page=True)
        browser.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
