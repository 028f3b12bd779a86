#!/usr/bin/env python3
"""The web page at / in a real browser: Debian's Chromium (headless) driven by Selenium (.venv).

Starts `kvstash serve` on a free loopback port with the default model (an API key set, so the page's
files are shown to need none and the page's own key field to work), checks the page's HTTP headers
(Content-Type, Cache-Control, ETag and 304, API routes not shadowed), then in the browser: sends a
message with Enter and waits for the streamed answer, checks the per-turn reused / computed counters,
checks Shift+Enter makes a new line instead of sending, forks at the first message and answers it
again (reused > 0: the prefix cache), saves a named state, reloads the page and switches to that state
and continues it (reused > 0), downloads the state's file and uploads it under a new name and continues
that one as text, deletes the first state and checks its branch still sends (without it), and checks the page fits a phone-sized window. Screenshots go to BUILD_DIR/webui-screenshot.png (and -narrow.png); their paths
are printed. The server and the browser are stopped on every exit path.

Usage: webui_browser_test.py KVSTASH_BINARY BUILD_DIR    (needs scripts/setup.sh's chromium,
chromium-driver and selenium; exit 0 on success)
"""
import ctypes
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[3]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
API_KEY = "webui-test-key"
ANSWER_TIMEOUT_S = 40


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    # The server goes when this script goes, even when it is killed (a ctest timeout).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_reaper(marker):
    """Forks a watcher that, once this script has ended in any way (SIGKILL included), kills every process
    whose command line holds `marker` (the browser's profile directory: chromium and its helpers, which
    chromedriver leaves behind when it is killed) and removes the scratch directory."""
    read_end, write_end = os.pipe()  # not inherited by the server or chromedriver (Python's fds are CLOEXEC)
    if os.fork() == 0:
        os.close(write_end)
        try:
            os.read(read_end, 1)  # returns at EOF: this script's end
            for _ in range(2):  # a helper may start while the first pass runs
                for entry in pathlib.Path("/proc").iterdir():
                    if not entry.name.isdigit() or int(entry.name) == os.getpid():
                        continue
                    try:
                        if marker.encode() in (entry / "cmdline").read_bytes():
                            os.kill(int(entry.name), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass  # gone already, or not ours to read
                time.sleep(0.2)
            shutil.rmtree(marker, ignore_errors=True)
        finally:
            os._exit(0)
    os.close(read_end)
    return write_end  # held open until this script ends


def http(url, headers=None, method="GET", data=None):
    request = urllib.request.Request(url, headers=headers or {}, method=method, data=data)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def check_http(base):
    auth = {"Authorization": "Bearer " + API_KEY}
    for path, kind in [("/", "text/html"), ("/webui/app.js", "text/javascript"), ("/webui/style.css", "text/css")]:
        status, headers, body = http(base + path)  # no key: the page's files hold no data
        check(status == 200, f"GET {path}: {status} {body[:200]!r}")
        check(headers.get("Content-Type", "").startswith(kind), f"GET {path}: Content-Type {headers.get('Content-Type')}")
        check(headers.get("Cache-Control") == "no-cache", f"GET {path}: Cache-Control {headers.get('Cache-Control')}")
        etag = headers.get("ETag", "")
        check(etag.startswith('"') and len(etag) > 2, f"GET {path}: ETag {etag!r}")
        status, _, body = http(base + path, {"If-None-Match": etag})
        check(status == 304 and body == b"", f"GET {path} with its ETag: {status}, not 304")
        status, _, _ = http(base + path, {"If-None-Match": '"stale"'})
        check(status == 200, f"GET {path} with a stale ETag: {status}")
    # The API keeps its routes and its key.
    status, _, _ = http(base + "/v1/models")
    check(status == 401, f"GET /v1/models without the key: {status}, not 401")
    status, _, body = http(base + "/v1/models", auth)
    check(status == 200 and b'"object":"list"' in body, f"GET /v1/models: {status} {body[:200]!r}")
    status, _, body = http(base + "/webui/missing.js", auth)
    check(status == 404 and b"no route" in body, f"GET /webui/missing.js: {status}")


def start_browser(profile_dir, download_dir):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,900", "--no-first-run", "--disable-extensions",
                "--user-data-dir=" + str(profile_dir)]:
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": str(download_dir),
                                              "download.prompt_for_download": False})
    # chromedriver (and the browser it ends with it) goes with this script too, even on SIGKILL.
    service = Service(shutil.which("chromedriver") or "/usr/bin/chromedriver",
                      popen_kw={"preexec_fn": die_with_parent})
    return webdriver.Chrome(service=service, options=options)


def browser_steps(driver, base, build_dir, download_dir):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    def wait(condition, what, timeout=ANSWER_TIMEOUT_S):
        try:
            return WebDriverWait(driver, timeout, ignored_exceptions=[StaleElementReferenceException]).until(
                lambda d: condition())
        except Exception:
            shot = build_dir / "webui-screenshot-failure.png"
            driver.save_screenshot(str(shot))
            status = driver.find_element(By.ID, "status").text
            fail(f"timed out waiting for {what} (status line: {status!r}; screenshot: {shot})")

    def field(element_id, text):
        element = driver.find_element(By.ID, element_id)
        element.clear()
        element.send_keys(text)

    def messages():
        return driver.find_elements(By.CSS_SELECTOR, "#messages .msg")

    def last_usage(count):
        # Waits for `count` messages, the last an answered assistant turn; returns (reused, computed). Read
        # in one script: the page re-renders the list when a turn ends, so element handles can go stale.
        usage = wait(lambda: driver.execute_script("""
            const m = document.querySelectorAll('#messages .msg');
            const u = m.length === arguments[0] && m[m.length - 1].querySelector('.usage');
            return u ? [u.querySelector('.reused').textContent, u.querySelector('.computed').textContent,
                        u.textContent] : null;""", count), f"answer number {count}")
        print(f"  turn: {usage[2]}")
        return int(usage[0]), int(usage[1])

    driver.get(base + "/")
    check(driver.title == "kvstash", f"page title {driver.title!r}")
    field("api-key", API_KEY + "\t")  # the change event: stored, then the model and states reload
    wait(lambda: "SmolLM2" in driver.find_element(By.ID, "model").text, "the model name", 15)
    field("max-tokens", "12\t")  # Tab: the change event stores the setting
    field("temperature", "0\t")

    # Shift+Enter: a new line, nothing sent.
    box = driver.find_element(By.ID, "input")
    box.send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.SHIFT, "line two")
    check(box.get_attribute("value") == "line one\nline two", f"Shift+Enter: {box.get_attribute('value')!r}")
    check(len(messages()) == 0, "Shift+Enter sent the message")
    box.clear()

    # 1. A message sent with Enter; the answer streams in with its counters.
    box.send_keys("What is the capital of France?", Keys.ENTER)
    reused, computed = last_usage(2)
    check(computed > 0, f"first turn: computed {computed}")
    check(messages()[-1].find_element(By.CSS_SELECTOR, ".text").text.strip() != "", "first answer is empty")

    # 2. Fork at the first message and answer it again: the prompt comes from the prefix cache.
    messages()[0].find_element(By.CSS_SELECTOR, "button.fork").click()
    wait(lambda: len(messages()) == 1, "the forked branch")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#branches li")) == 2, "no second branch after the fork")
    driver.find_element(By.ID, "send").click()
    reused, computed = last_usage(2)
    check(reused > 0, f"fork: reused {reused}, want > 0")

    # 3. Save a named state of this branch.
    field("save-name", "webui-e2e")
    driver.find_element(By.ID, "save-state").click()
    wait(lambda: driver.find_elements(By.ID, "state-webui-e2e"), "the saved state in the list", 20)

    # 4. Reload; the branches survive; switch to the state and continue it.
    driver.refresh()
    wait(lambda: driver.find_elements(By.ID, "state-webui-e2e"), "the state list after reload", 15)
    check(len(driver.find_elements(By.CSS_SELECTOR, "#branches li")) == 2, "branches lost on reload")
    driver.find_element(By.CSS_SELECTOR, "#state-webui-e2e button[aria-label='Open state webui-e2e']").click()
    wait(lambda: "state webui-e2e" in driver.find_element(By.ID, "branch-title").text, "the state's branch")
    check(len(messages()) == 2, f"the state's branch shows {len(messages())} messages, want 2")
    settings = [driver.find_element(By.ID, i).get_attribute("value") for i in ("max-tokens", "temperature")]
    check(settings == ["12", "0"], f"settings after reload: {settings}, want ['12', '0']")
    driver.find_element(By.ID, "input").send_keys("And of Germany?", Keys.ENTER)
    reused, computed = last_usage(4)
    check(reused > 0, f"continuing the state: reused {reused}, want > 0")
    shot = build_dir / "webui-screenshot.png"  # the state continued, with its counters
    driver.save_screenshot(str(shot))
    print(f"screenshot: {shot}")

    # 5. Download the state file, upload it under another name.
    driver.find_element(By.CSS_SELECTOR, "#state-webui-e2e button[aria-label='Download state webui-e2e']").click()
    downloaded = download_dir / "webui-e2e.kvs"
    wait(lambda: downloaded.exists() and downloaded.stat().st_size > 0, "the downloaded state file", 20)
    driver.find_element(By.ID, "upload-file").send_keys(str(downloaded))
    field("upload-name", "webui-upload")
    driver.find_element(By.ID, "upload-state").click()
    wait(lambda: driver.find_elements(By.ID, "state-webui-upload"), "the uploaded state in the list", 20)
    # Its messages are not known to this browser: the branch continues the state's text (/v1/completions).
    driver.find_element(By.CSS_SELECTOR, "#state-webui-upload button[aria-label='Open state webui-upload']").click()
    wait(lambda: "does not know" in driver.find_element(By.ID, "branch-title").text, "the uploaded state's branch")
    driver.find_element(By.ID, "input").send_keys("Tell me more.", Keys.ENTER)
    reused, computed = last_usage(2)
    check(reused > 0, f"continuing the uploaded state: reused {reused}, want > 0")

    # 6. The state deleted behind the page's back: the branch sends its messages without it.
    status, _, body = http(base + "/v1/states/webui-e2e", {"Authorization": "Bearer " + API_KEY}, "DELETE")
    check(status == 200, f"DELETE /v1/states/webui-e2e: {status} {body[:200]!r}")
    branch = [b for b in driver.find_elements(By.CSS_SELECTOR, "#branches li button.name") if b.text == "state webui-e2e"]
    check(len(branch) == 1, "no branch 'state webui-e2e' in the list")
    branch[0].click()
    wait(lambda: len(messages()) == 4, "the state's branch again")
    driver.find_element(By.ID, "input").send_keys("And of Italy?", Keys.ENTER)
    last_usage(6)
    status_line = driver.find_element(By.ID, "status").text
    check("without it" in status_line, f"status after the state was deleted: {status_line!r}")

    # 7. A phone-sized window: nothing wider than the screen; the side panel behind its button.
    driver.set_window_size(390, 844)
    overflow = driver.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
    check(overflow <= 0, f"narrow window: the page is {overflow}px wider than the window")
    check(driver.find_element(By.ID, "toggle-side").is_displayed(), "narrow window: no button for the side panel")
    narrow = build_dir / "webui-screenshot-narrow.png"
    driver.save_screenshot(str(narrow))
    print(f"screenshot (narrow): {narrow}")


def shut_down(driver, server, log):
    """Closes the browser (if it started), stops the server (killed after 10 s) and closes its log."""
    if driver is not None:
        try:
            driver.quit()
        except Exception as e:  # the browser is gone already
            print(f"note: closing the browser: {e}", file=sys.stderr)
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    log.close()


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary, build_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]).resolve()
    try:
        import selenium  # noqa: F401
    except ImportError:
        fail("selenium is not installed for " + sys.executable + " (scripts/setup.sh installs it into .venv)")
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        fail("chromium and chromedriver are needed (scripts/setup.sh installs Debian's chromium and chromium-driver)")
    check(MODEL.exists(), f"{MODEL} is missing (scripts/fetch_model.sh)")
    # SIGTERM (ctest, a user) ends this script through the finally blocks below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    started = time.monotonic()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="kvstash-webui-"))
    start_reaper(str(scratch))
    log = open(scratch / "server.log", "w")
    server = subprocess.Popen([str(binary), "serve", "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
                               "--api-key", API_KEY, "--ctx", "1024", "--threads", "2"],
                              stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    driver = None
    try:
        for _ in range(300):
            if server.poll() is not None:
                fail(f"the server exited ({server.returncode}): {(scratch / 'server.log').read_text()[-2000:]}")
            try:
                if http(base + "/health")[0] == 200:
                    break
            except urllib.error.URLError:  # not listening yet
                pass
            time.sleep(0.1)
        else:
            fail("the server did not answer /health within 30 s")
        check_http(base)
        print("HTTP headers: ok")
        driver = start_browser(scratch / "chrome-profile", scratch / "downloads")
        browser_steps(driver, base, build_dir, scratch / "downloads")
        print(f"web page test passed in {time.monotonic() - started:.1f} s")
        return 0
    finally:
        shut_down(driver, server, log)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
