#!/usr/bin/env python3
"""tests/server/test_chat_page.py — the chat page at "/" in a real browser (Debian's chromium,
headless, driven through chromium-driver by selenium), on the bundled tiny model with DSpark.

Loads the page, checks the model line (the page's own /v1/models fetch), types a message and
sends it with Enter, waits for the streamed reply and its speed figures (tokens/s, first-token
time, DSpark acceptance), checks that the page's answer is byte-identical to the same greedy
request made with the `openai` client, that a second turn lands as a second reply, and saves a
screenshot. Exits 77 (ctest: skipped) with the reason when selenium, chromium or its driver is
missing or the browser cannot start.

Usage: test_chat_page.py --server build/bin/ds4-server --models models --screenshot build/chat_page.png
"""
import argparse
import os
import shutil
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import MODEL, Server, check  # noqa: E402

SKIP = 77
QUESTION = "What is a struct in C?"
MAX_TOKENS = 24


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def start_browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        skip(f"selenium is not installed ({e}); run scripts/setup.sh")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)
    if not browser or not driver:
        skip("chromium or chromium-driver is not installed; run scripts/setup.sh")
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1100,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    try:
        return webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    except Exception as e:  # noqa: BLE001 — any start failure is a skip with its reason
        skip(f"chromium did not start: {str(e).splitlines()[0] if str(e) else type(e).__name__}")


def wait_for(driver, cond, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = driver.execute_script(cond)
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def send(driver, text):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    box = driver.find_element(By.ID, "input")
    box.send_keys(text)
    box.send_keys(Keys.ENTER)


def run(driver, srv, screenshot):
    driver.set_page_load_timeout(20)
    driver.get(srv.base + "/")
    check(driver.title == "ds4-server", f"title {driver.title!r}")
    model = wait_for(driver, "const t = document.getElementById('model').textContent; return t.includes('context') && t;",
                     "the model line")
    check(MODEL in model, f"model line {model!r}")
    driver.execute_script(f"document.getElementById('maxtok').value = {MAX_TOKENS};")

    send(driver, QUESTION)
    stats = wait_for(driver, "const s = document.querySelectorAll('.assistant .stats'); "
                             "return s.length === 1 && s[0].textContent;", "the first reply's speed figures")
    check("tokens/s" in stats and "first token" in stats, f"speed figures {stats!r}")
    check("DSpark" in stats and "drafts accepted" in stats, f"no DSpark acceptance in {stats!r}")
    check(not driver.execute_script("return document.querySelector('.error')"), "the page shows an error")
    answer = driver.execute_script("return document.querySelector('.assistant .answer').textContent;")
    want = srv.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}],
                                                max_tokens=MAX_TOKENS, temperature=0,
                                                extra_body={"reasoning_effort": "none"})
    check(answer == want.choices[0].message.content, f"page answer {answer!r} != API {want.choices[0].message.content!r}")
    check(str(want.usage.completion_tokens) + " tokens" in stats, f"token count in {stats!r}")

    send(driver, "And a union?")
    wait_for(driver, "const s = document.querySelectorAll('.assistant .stats'); "
                     "return s.length === 2 && s[1].textContent;", "the second reply")
    n_user = driver.execute_script("return document.querySelectorAll('.msg.user').length;")
    check(n_user == 2, f"{n_user} user bubbles")
    if screenshot:
        os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
        driver.execute_script("window.scrollTo(0, 0);")
        check(driver.save_screenshot(screenshot), "screenshot failed")
        print(f"    screenshot: {screenshot}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--screenshot", default="")
    args = ap.parse_args()
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium: never download a driver
    driver = start_browser()
    srv = None
    t0 = time.time()
    try:
        srv = Server(args.server, args.models, "--ctx", "1024", "--dspark")
        run(driver, srv, args.screenshot)
        print(f"ok   chat page in chromium ({time.time() - t0:.1f} s)")
        return 0
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print(f"FAIL chat page in chromium ({time.time() - t0:.1f} s)")
        return 1
    finally:
        driver.quit()
        if srv is not None:
            srv.stop()


if __name__ == "__main__":
    sys.exit(main())
