"""The HTML report: self-contained (nothing fetched, no scripts), renders in headless Chromium without console
errors and shows the predicted numbers; text from a user's files shows as text; bad input is a TokensimError
and never leaves a half-written file.

The browser is driven over the DevTools protocol on --remote-debugging-pipe (fd 3: commands in, fd 4: replies
and events out, each message JSON ended by a NUL byte) with the standard library only.
"""
import base64
import fcntl
import io
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tokensim.errors import TokensimError
from tokensim.output.report import build_report, write_report
from tokensim.output.report_html import duration, speed
from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario

SHIPPED = ["kimi-k2.6-cs3", "sol-cs3"]
MARKUP = "<script>alert(1)</script>"
IMG_MARKUP = "<img src=x onerror=alert(2)>"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--remote-debugging-pipe"]
LOCAL_SCHEMES = ("file:", "data:", "about:")


def chromium_path() -> str | None:
    return os.environ.get("TOKENSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


class Browser:
    """One headless Chromium and one page, driven over the DevTools pipe."""

    def __init__(self, exe: str, timeout_s: float = 60.0):
        self.timeout_s = timeout_s
        self.profile = tempfile.TemporaryDirectory(prefix="tokensim-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends go to fds 3 and 4. Copies above 20 (close-on-exec) keep the dup2 onto 3 and 4 from
        # clobbering one another; close_fds stays off, or the fds made in preexec_fn would be closed again
        # (Python's own fds are close-on-exec, so nothing else leaks into the browser).
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 20)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 20)
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)

        def onto_3_and_4():
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={self.profile.name}", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     close_fds=False, preexec_fn=onto_3_and_4)
        os.close(high_r)
        os.close(high_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("no reply from chromium")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, event: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        for seen in self.events:
            if seen.get("method") == event:
                return seen
        while True:
            msg = self._read_message(deadline)
            self.events.append(msg)
            if msg.get("method") == event:
                return msg

    def open(self, url: str) -> None:
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=1280, height=1600, deviceScaleFactor=1,
                  mobile=False)
        self.call("Page.navigate", session=True, url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("1")          # let late console/log events arrive before the checks

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot_png(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", session=True, format="png")["data"])

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            method, params = e.get("method"), e.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(str(params.get("exceptionDetails")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                out.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append(params["entry"].get("text", ""))
        return out

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        self.profile.cleanup()


@pytest.fixture(scope="module")
def browser():
    exe = chromium_path()
    if not exe:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); the browser checks of the "
                    "HTML report need it")
    b = Browser(exe)
    yield b
    b.close()


def _open_report(browser: Browser, path: Path) -> None:
    browser.events.clear()
    browser.open(path.resolve().as_uri())


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict]]:
    parser = _Tags()
    parser.feed(text)
    return parser.tags


def _distinct_colours(png: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(png)) as img:
        return len(img.convert("RGB").getcolors(maxcolors=1 << 20) or [])


def test_report_renders_offline_in_chromium(tmp_path, browser):
    """Two shipped scenarios: no console errors, no request beyond the file itself and its data: images,
    the predicted numbers in the rendered text, every image decoded, and a screenshot that is not blank."""
    out = write_report(SHIPPED, tmp_path / "report.html")
    _open_report(browser, out)
    assert browser.console_errors() == []
    urls = browser.requested_urls()
    assert urls and all(u.startswith(LOCAL_SCHEMES) for u in urls), [u for u in urls if not u.startswith(LOCAL_SCHEMES)]
    text = browser.evaluate("document.body.innerText")
    for name in SHIPPED:
        s = load_scenario(find_scenario(name))
        p = run_scenario(s)
        assert s.title in text
        assert speed(p.tokens_per_s_per_user) in text
        assert duration(p.ttft_s) in text
        lo, hi = p.tokens_per_s_per_user_range
        assert f"{speed(lo)} - {speed(hi)}" in text
    assert "c03" in text and "consistent" in text                      # kimi-k2.6-cs3's claim and its verdict
    assert browser.evaluate("document.scripts.length") == 0
    images = browser.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
    assert len(images) == 2 * len(SHIPPED) and all(done and width > 100 for done, width in images)
    assert _distinct_colours(browser.screenshot_png()) > 50


def _markup_scenarios(tmp_path: Path) -> list[Path]:
    """A scenario whose inline [model_config] is named with a script tag, and one that reads a config.json whose
    file name (tokensim's model name for a config path) carries an <img onerror> tag."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
              "intermediate_size": 1536, "num_attention_heads": 8, "num_key_value_heads": 4, "num_hidden_layers": 4,
              "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "torch_dtype": "bfloat16", "_name_or_path": MARKUP}
    (tmp_path / f"{IMG_MARKUP}.json").write_text(json.dumps(config), encoding="utf-8")
    inline = "\n".join(f"{k} = {json.dumps(v)}" for k, v in config.items() if k != "architectures")
    a = tmp_path / "inline.toml"
    a.write_text(f'name = {json.dumps(MARKUP)}\ntitle = {json.dumps("title " + MARKUP)}\nhardware = "h100-sxm"\n'
                 f'model_name = {json.dumps(MARKUP)}\nassumptions = [{json.dumps("assumed " + MARKUP)}]\n'
                 f"[model_config]\n{inline}\n[deployment]\ntp = 1\nbatch = 1\n", encoding="utf-8")
    b = tmp_path / "from-config.toml"
    b.write_text(f'name = "from-config"\ntitle = {json.dumps("config " + IMG_MARKUP)}\nhardware = "h100-sxm"\n'
                 f'model = {json.dumps(IMG_MARKUP + ".json")}\n[deployment]\ntp = 1\n', encoding="utf-8")
    return [a, b]


def test_markup_from_user_files_is_escaped(tmp_path):
    """No <script> or <img onerror> element comes from a user's strings; the markup is there as text."""
    html_text = build_report([str(p) for p in _markup_scenarios(tmp_path)])
    tags = _tags(html_text)
    assert not [t for t, _ in tags if t == "script"]
    assert not [a for t, a in tags if t == "img" and ("onerror" in a or not a.get("src", "").startswith("data:image/png"))]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text and MARKUP not in html_text
    assert "&lt;img src=x onerror=alert(2)&gt;" in html_text


def test_markup_shows_as_text_in_chromium(tmp_path, browser):
    out = write_report([str(p) for p in _markup_scenarios(tmp_path)], tmp_path / "markup.html")
    _open_report(browser, out)
    assert browser.evaluate("document.querySelectorAll('script').length") == 0
    assert browser.evaluate("document.querySelectorAll('img[onerror]').length") == 0
    text = browser.evaluate("document.body.innerText")
    assert f"title {MARKUP}" in text and f"assumed {MARKUP}" in text and IMG_MARKUP in text
    assert browser.console_errors() == []
    assert all(u.startswith(LOCAL_SCHEMES) for u in browser.requested_urls())


@pytest.mark.parametrize("scenarios", [[], "kimi-k2.6-cs3", ["no-such-scenario"]])
def test_bad_input_is_a_tokensim_error(scenarios):
    with pytest.raises(TokensimError):
        build_report(scenarios)


def test_a_failed_write_leaves_the_old_report_whole(tmp_path):
    """The report is written to a temporary file and renamed: a failure leaves the previous file and no leftovers."""
    out = tmp_path / "report.html"
    write_report(["cs3-capacity"], out)
    before = out.read_bytes()
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "bad"\nhardware = "h100-sxm"\nmodel = "llama-3.1-8b"\n[deployment]\ntp = 3\n')
    with pytest.raises(TokensimError):
        write_report(["cs3-capacity", str(bad)], out)
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml", "report.html"]
    with pytest.raises(TokensimError):
        write_report(["cs3-capacity"], tmp_path)                        # a folder, not a file
