#!/usr/bin/env python3
"""The web page's model picker (issue 31 item 5) in headless Chromium: `kvstash serve --models DIR` with two
tiny models (the Qwen2 fixtures as alpha.gguf and beta.gguf); the page shows a picker listing both, a message
goes to the first model (the request carries ?model=alpha), picking beta sends the next one to beta (the answer
comes back; /api/ps then lists beta loaded), and the choice survives a reload. With one model the page shows
no picker (webui_browser_test.py covers that page).

Usage: webui_models_test.py KVSTASH_BINARY BUILD_DIR    (exit 0 on success)
"""
import json
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import webui_browser_test as common  # noqa: E402  (server, browser and clean-up helpers)

check, fail = common.check, common.fail
FIXTURES = common.ROOT / "tests" / "fixtures" / "qwen2"


def browser_steps(driver, base):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    def wait(condition, what, timeout=common.ANSWER_TIMEOUT_S):
        try:
            return WebDriverWait(driver, timeout, ignored_exceptions=[StaleElementReferenceException]).until(
                lambda d: condition())
        except Exception:
            fail(f"timed out waiting for {what} (status: {driver.find_element(By.ID, 'status').text!r})")

    def send_and_wait(text, count):
        box = driver.find_element(By.ID, "input")
        box.clear()
        box.send_keys(text)
        driver.find_element(By.ID, "send").click()
        wait(lambda: driver.execute_script("""
            const m = document.querySelectorAll('#messages .msg');
            return m.length === arguments[0] && m[m.length - 1].querySelector('.usage') !== null;""", count),
             f"answer number {count}")

    driver.get(base + "/")
    pick = wait(lambda: (lambda e: e if e.is_displayed() and len(e.find_elements(By.TAG_NAME, "option")) == 2
                         else None)(driver.find_element(By.ID, "model-pick")), "the model picker", 10)
    names = [o.get_attribute("value") for o in pick.find_elements(By.TAG_NAME, "option")]
    check(names == ["alpha", "beta"], f"picker options: {names}")
    check(Select(pick).first_selected_option.get_attribute("value") == "alpha", "alpha is not chosen first")
    driver.execute_script("document.getElementById('max-tokens').value = '8';")  # short answers: room for two turns
    driver.execute_script("""
        window.sentUrls = [];
        const original = window.fetch;
        window.fetch = (url, init) => { window.sentUrls.push(String(url)); return original(url, init); };""")
    send_and_wait("Hello", 2)
    urls = driver.execute_script("return window.sentUrls;")
    check(any("/v1/chat/completions?model=alpha" in u for u in urls), f"requests: {urls}")
    Select(pick).select_by_value("beta")
    send_and_wait("Again", 4)
    urls = driver.execute_script("return window.sentUrls;")
    check(any("/v1/chat/completions?model=beta" in u for u in urls), f"requests: {urls}")
    status, _, body = common.http(base + "/api/ps")
    loaded = sorted(m["name"] for m in json.loads(body)["models"])
    check(status == 200 and "beta:latest" in loaded, f"/api/ps: {loaded}")
    driver.refresh()
    pick = wait(lambda: (lambda e: e if e.is_displayed() else None)(driver.find_element(By.ID, "model-pick")),
                "the picker after a reload", 10)
    wait(lambda: Select(pick).first_selected_option.get_attribute("value") == "beta", "beta kept after a reload", 10)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    binary = pathlib.Path(sys.argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    port = common.free_port()
    base = f"http://127.0.0.1:{port}"
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="kvstash-webui-models-"))
    common.start_reaper(str(scratch))
    (scratch / "models").mkdir()
    shutil.copy(FIXTURES / "qwen2_f32.gguf", scratch / "models" / "alpha.gguf")
    shutil.copy(FIXTURES / "qwen2_q8_0.gguf", scratch / "models" / "beta.gguf")
    log = open(scratch / "server.log", "w")
    server = subprocess.Popen([str(binary), "serve", "--models", str(scratch / "models"), "--host", "127.0.0.1",
                               "--port", str(port), "--ctx", "2048", "--threads", "2"],
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
        driver = common.start_browser(scratch / "chrome-profile", scratch / "downloads")
        browser_steps(driver, base)
        print("web page model picker test passed")
        return 0
    finally:
        common.shut_down(driver, server, log)


if __name__ == "__main__":
    sys.exit(main())
