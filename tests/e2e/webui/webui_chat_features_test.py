#!/usr/bin/env python3
"""The web page's chat features (issue 33 item 9) in headless Chromium driven by Selenium.

Starts `kvstash serve` with the default model, then checks: the favicon is served and linked; an answer
holding Markdown (put in the page's own store, as a past conversation) is rendered as headings, emphasis,
lists, links and a code block with a Copy button that puts the code on the clipboard, while HTML and
javascript: links in it stay text; the system-prompt field starts a new chat with a system message and
the sampler settings reach the request (read from the page's own fetch); each answer shows its tokens/s;
Regenerate answers the same message again in a new branch (temperature 0: the same text, its prompt
reused from the prefix cache); Edit changes a message as a new branch and answers it. Screenshots (the
page, the rendered code block) go to BUILD_DIR/webui-features*.png and are checked to be non-blank
(decoded here: many distinct colours).

Usage: webui_chat_features_test.py KVSTASH_BINARY BUILD_DIR    (exit 0 on success)
"""
import json
import pathlib
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import zlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import webui_browser_test as common  # noqa: E402  (server, browser and clean-up helpers)

check, fail = common.check, common.fail

MARKDOWN = """# Adding numbers

Here is **bold**, *italic* and `inline code`, a [link](https://example.com) and a
[bad link](javascript:alert(1)) and <img src=x onerror="window.pwned=1">.

- first item
- second item

1. one
2. two

> a quote

```python
def add(a, b):
    return a + b
```
"""
CODE = "def add(a, b):\n    return a + b"


def png_colours(png):
    """The number of distinct RGB(A) pixels of a PNG (8-bit RGB or RGBA, any filter): a blank image has 1."""
    check(png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    at, idat, width, height, channels = 8, b"", 0, 0, 0
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        data = png[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            check(depth == 8 and colour in (2, 6), f"PNG depth {depth} colour type {colour}")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += data
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colours = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            corner = previous[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        for x in range(0, stride, channels * 7):  # a sample of the pixels is enough
            colours.add(bytes(line[x:x + 3]))
        previous = line
    return len(colours)


def browser_steps(driver, base, build_dir):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition, what, timeout=common.ANSWER_TIMEOUT_S):
        try:
            return WebDriverWait(driver, timeout, ignored_exceptions=[StaleElementReferenceException]).until(
                lambda d: condition())
        except Exception:
            shot = build_dir / "webui-features-failure.png"
            driver.save_screenshot(str(shot))
            fail(f"timed out waiting for {what} (status: {driver.find_element(By.ID, 'status').text!r}; {shot})")

    def field(element_id, text):
        element = driver.find_element(By.ID, element_id)
        element.clear()
        element.send_keys(text)

    def answered(count):
        # `count` messages, the last an answered assistant turn: its text and usage line.
        return wait(lambda: driver.execute_script("""
            const m = document.querySelectorAll('#messages .msg');
            const u = m.length === arguments[0] && m[m.length - 1].querySelector('.usage');
            return u ? [m[m.length - 1].querySelector('.text').textContent, u.textContent,
                        u.querySelector('.reused').textContent] : null;""", count), f"answer number {count}")

    def branches():
        return len(driver.find_elements(By.CSS_SELECTOR, "#branches li"))

    driver.execute_cdp_cmd("Browser.grantPermissions", {"origin": base, "permissions": [
        "clipboardReadWrite", "clipboardSanitizedWrite"]})
    driver.get(base + "/")
    icon = driver.execute_script("const l = document.querySelector('link[rel=icon]'); return l && l.href;")
    check(icon == base + "/webui/favicon.svg", f"favicon link: {icon!r}")

    # 1. Markdown: a past conversation in the page's store, rendered on load.
    store = {"branches": [{"id": 1, "title": "markdown", "messages": [
        {"role": "user", "content": "Show me code"}, {"role": "assistant", "content": MARKDOWN}],
        "state": None, "stateMessages": 0, "raw": False}], "current": 1, "next": 2}
    driver.execute_script("localStorage.setItem('kvstash.webui.v1', arguments[0]);", json.dumps(store))
    driver.refresh()
    wait(lambda: driver.find_elements(By.CSS_SELECTOR, ".msg.assistant .text.md"), "the Markdown answer", 10)
    answer = driver.find_element(By.CSS_SELECTOR, ".msg.assistant .text.md")
    found = driver.execute_script("""
        const a = arguments[0];
        return {heading: (a.querySelector('h3') || {}).textContent, strong: (a.querySelector('strong') || {}).textContent,
                em: (a.querySelector('em') || {}).textContent, code: (a.querySelector('p code') || {}).textContent,
                bullets: a.querySelectorAll(':scope ul li').length, numbers: a.querySelectorAll(':scope ol li').length,
                quote: (a.querySelector('blockquote') || {}).textContent,
                links: Array.from(a.querySelectorAll('a')).map((l) => l.href),
                images: a.querySelectorAll('img').length, pwned: window.pwned === 1,
                block: (a.querySelector('.code-block pre code') || {}).textContent,
                lang: (a.querySelector('.code-block .lang') || {}).textContent};""", answer)
    print(f"  rendered: {found}")
    check(found["heading"] == "Adding numbers", f"heading: {found}")
    check(found["strong"] == "bold" and found["em"] == "italic" and found["code"] == "inline code", f"inline: {found}")
    check(found["bullets"] == 2 and found["numbers"] == 2 and "a quote" in (found["quote"] or ""), f"blocks: {found}")
    check(found["links"] == ["https://example.com/"], f"links (javascript: must stay text): {found['links']}")
    check(found["images"] == 0 and not found["pwned"], "HTML in the answer was rendered as HTML")
    check("<img src=x" in answer.text, "the HTML in the answer is not shown as text")
    check(found["block"] == CODE and found["lang"] == "python", f"code block: {found['block']!r} {found['lang']!r}")
    copy = answer.find_element(By.CSS_SELECTOR, ".code-block button.copy")
    copy.click()
    wait(lambda: copy.text == "Copied", "the Copy button's confirmation", 5)
    clipboard = driver.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('error: ' + e));")
    check(clipboard == CODE, f"clipboard: {clipboard!r}")
    block = build_dir / "webui-features-code.png"
    png = answer.find_element(By.CSS_SELECTOR, ".code-block").screenshot_as_png
    block.write_bytes(png)
    colours = png_colours(png)
    print(f"screenshot (code block): {block}: {colours} colours")
    check(colours >= 3, f"the code block's screenshot is blank ({colours} colours)")

    # 2. A new chat with a system prompt and sampler settings; the answer's tokens/s.
    driver.execute_script("""
        window.sentBodies = [];
        const original = window.fetch;
        window.fetch = (url, init) => {
          if (init && typeof init.body === 'string' && String(url).includes('/v1/chat/completions'))
            window.sentBodies.push(JSON.parse(init.body));
          return original(url, init);
        };""")
    driver.find_element(By.ID, "new-chat").click()
    field("system-prompt", "You are a terse assistant.")
    field("max-tokens", "16\t")
    field("temperature", "0\t")
    driver.find_element(By.CSS_SELECTOR, "#sampler summary").click()
    field("top-k", "20\t")
    field("seed", "7\t")
    driver.find_element(By.ID, "input").send_keys("What is the capital of France?", Keys.ENTER)
    first_text, first_usage, _ = answered(3)  # system, user, assistant
    sent = driver.execute_script("return window.sentBodies;")
    check(len(sent) == 1, f"requests: {sent}")
    check(sent[0]["messages"][0] == {"role": "system", "content": "You are a terse assistant."}, f"sent: {sent[0]}")
    check(sent[0]["top_k"] == 20 and sent[0]["seed"] == 7 and sent[0]["temperature"] == 0, f"sampler: {sent[0]}")
    check("tokens/s" in first_usage, f"usage line: {first_usage!r}")
    roles = [m.get_attribute("class") for m in driver.find_elements(By.CSS_SELECTOR, "#messages .msg")]
    check(roles[0].startswith("msg system"), f"first message: {roles}")

    # 3. Regenerate: a new branch answering the same message again (greedy: the same text; the prompt reused).
    before = branches()
    driver.find_element(By.CSS_SELECTOR, "#messages .msg.assistant button.regenerate").click()
    again_text, again_usage, reused = answered(3)
    check(branches() == before + 1, f"branches after regenerate: {branches()}, want {before + 1}")
    check(again_text == first_text, f"regenerated {again_text!r}, first {first_text!r}")
    check(int(reused) > 0, f"regenerate reused {reused} prompt tokens")
    check(len(sent) == 1 and len(driver.execute_script("return window.sentBodies;")) == 2, "regenerate sent no request")

    # 4. Edit the user message: a new branch with the new text, answered.
    driver.find_element(By.CSS_SELECTOR, "#messages .msg.user button.edit").click()
    box = wait(lambda: driver.find_element(By.CSS_SELECTOR, "#messages .msg.user .edit-box"), "the edit box", 5)
    box.clear()
    box.send_keys("What is the capital of Italy?")
    driver.find_element(By.CSS_SELECTOR, "#messages .msg.user button.send-edit").click()
    edited_text, _, _ = answered(3)
    check(branches() == before + 2, f"branches after edit: {branches()}")
    user = driver.find_element(By.CSS_SELECTOR, "#messages .msg.user .text").text
    check(user == "What is the capital of Italy?", f"edited message: {user!r}")
    check(edited_text.strip() != "", "the edited message got no answer")
    print(f"  answers: first {first_text!r}, regenerated {again_text!r}, edited {edited_text!r}")

    shot = build_dir / "webui-features.png"
    png = driver.get_screenshot_as_png()
    shot.write_bytes(png)
    colours = png_colours(png)
    print(f"screenshot: {shot}: {colours} colours")
    check(colours >= 5, f"the page's screenshot is blank ({colours} colours)")


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, build_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
    check(common.MODEL.exists(), f"{common.MODEL} is missing (scripts/fetch_model.sh)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="kvstash-webui-features-"))
    common.start_reaper(str(scratch))
    log = open(scratch / "server.log", "w")
    server = subprocess.Popen([str(binary), "serve", "-m", str(common.MODEL), "--host", "127.0.0.1", "--port",
                               str(port), "--ctx", "1024", "--threads", "2"],
                              stdout=log, stderr=subprocess.STDOUT, preexec_fn=common.die_with_parent)
    driver = None
    try:
        for _ in range(300):
            if server.poll() is not None:
                fail(f"the server exited ({server.returncode}): {(scratch / 'server.log').read_text()[-2000:]}")
            try:
                if common.http(base + "/health")[0] == 200:
                    break
            except urllib.error.URLError:
                pass
            time.sleep(0.1)
        else:
            fail("the server did not answer /health within 30 s")
        for path, kind in [("/webui/favicon.svg", "image/svg+xml"), ("/webui/markdown.js", "text/javascript")]:
            status, headers, body = common.http(base + path)
            check(status == 200 and headers.get("Content-Type", "").startswith(kind), f"GET {path}: {status} {headers}")
        driver = common.start_browser(scratch / "chrome-profile", scratch / "downloads")
        browser_steps(driver, base, build_dir)
        print(f"web page features test passed in {time.monotonic() - started:.1f} s")
        return 0
    finally:
        common.shut_down(driver, server, log)


if __name__ == "__main__":
    sys.exit(main())
