"""Times Strata's console in headless Chromium (Debian's `chromium`, through Playwright) and
measures the broker's CPU per page view, for scripts/bench-console.sh:

    bench-console.py <console url> <topic> <broker pid> [views]

Prints one JSON object. For the overview (`/`) and the topic's page (`/topics/<topic>`), each
loaded RUNS times in a fresh page (median reported, milliseconds from navigation start, as
the page's own `performance.now()` reads it):
  - `first_paint`: the first contentful paint (the page's frame, before any figure);
  - `figures`: the first row of figures on screen (the topics table; the partitions table);
  - `interactive`: after the figures, a filter typed (overview: the topic filter, answered by
    the server; topic page: a partition's messages asked for) until its answer is on screen.
Then `cpu_ms_per_view`: the broker's CPU time (utime + stime from /proc) per page view of
each page, over `views` views made with the requests the page makes on load, minus what the
broker spent idle over as long.
"""

import json
import os
import statistics
import sys
import time
import urllib.error
import urllib.request

from playwright.sync_api import expect, sync_playwright

CHROMIUM = os.environ.get("STRATA_CHROMIUM", "/usr/bin/chromium")
RUNS = int(os.environ.get("RUNS", "5"))
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICKS


def now_ms(page):
    return page.evaluate("() => performance.now()")


def paint_ms(page):
    return page.evaluate(
        "() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime || null"
    )


def overview(page, url):
    page.goto(url + "/")
    page.wait_for_selector("#topics tbody tr")
    figures = now_ms(page)
    t0 = now_ms(page)
    page.fill("input[type=search]", "no-such-topic")
    expect(page.locator("#topics tbody tr")).to_have_count(0)
    return {"first_paint": paint_ms(page), "figures": figures, "interactive": now_ms(page) - t0}


def topic(page, url, name):
    page.goto(url + "/topics/" + name)
    page.wait_for_selector("#topic-partitions tbody tr")
    figures = now_ms(page)
    t0 = now_ms(page)
    page.fill("#message-start", "0")
    page.press("#message-start", "Enter")
    # The answer is on screen (the partition may hold no record: its offsets are said).
    expect(page.get_by_text("showing from 0.")).to_be_visible()
    return {"first_paint": paint_ms(page), "figures": figures, "interactive": now_ms(page) - t0}


def median(runs):
    return {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}


def views_cpu(url, pid, paths, views):
    """The broker's CPU ms per view of `paths` (fetched as the page does on load), idle
    subtracted."""
    start, t0 = cpu_ms(pid), time.monotonic()
    for _ in range(views):
        for p in paths:
            try:
                with urllib.request.urlopen(url + p, timeout=10) as r:
                    r.read()
            except urllib.error.HTTPError as e:
                # An answer all the same (a group not sampled yet is a 404): its cost counts.
                e.read()
    busy, elapsed = cpu_ms(pid) - start, time.monotonic() - t0
    idle_start = cpu_ms(pid)
    time.sleep(elapsed)
    idle = cpu_ms(pid) - idle_start
    return round((busy - idle) / views, 2), round(elapsed * 1000 / views, 1)


def main(url, name, pid, views="50"):
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for label, load in [("overview", lambda pg: overview(pg, url)), ("topic", lambda pg: topic(pg, url, name))]:
            runs = []
            for _ in range(RUNS):
                page = browser.new_page(viewport={"width": 1366, "height": 900})
                runs.append(load(page))
                page.close()
            out[label] = median(runs)
        browser.close()
    views = int(views)
    q = "q=&offset=0&limit=50"
    overview_paths = ["/", "/console/app.js", "/console/app.css", "/v1/overview", f"/v1/topics?{q}", "/v1/groups?q=&limit=50"]
    topic_paths = [f"/topics/{name}", "/console/app.js", "/console/app.css", f"/v1/topics/{name}", f"/v1/topics/{name}/messages?partition=0"]
    shell = ["/console/app.js", "/console/app.css"]
    pages = [
        ("overview", overview_paths),
        ("topic", topic_paths),
        ("transactions", ["/transactions", *shell, "/v1/transactions"]),
        ("security", ["/security", *shell, "/v1/security?q="]),
        ("group", ["/groups/bench-group", *shell, "/v1/groups/bench-group"]),
    ]
    for label, paths in pages:
        out.setdefault(label, {})
        cpu, wall = views_cpu(url, pid, paths, views)
        out[label]["cpu_ms_per_view"] = cpu
        out[label]["server_ms_per_view"] = wall
    print(json.dumps(out))


if __name__ == "__main__":
    main(*sys.argv[1:])
