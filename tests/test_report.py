"""The HTML report: self-contained (nothing fetched, no scripts), renders in headless Chromium without console
errors and shows the predicted numbers; text from a user's files shows as text; bad input is a TokensimError
and never leaves a half-written file.

The browser is Debian's Chromium (/usr/bin/chromium; `apt-get install -y chromium`), driven through the `playwright`
package with `executable_path` pointed at it: Playwright never downloads a browser here. Console errors, page
errors and every request come from Playwright's events and, for the browser's own log and network view, from a
DevTools session on the page.
"""
import io
import json
import os
import shutil
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tokensim.errors import TokensimError
from tokensim.scenarios.claims import all_claims
from tokensim.output.report import build_report, write_report
from tokensim.output.report_html import duration, speed
from tokensim.scenarios.scenario import find_scenario, load_scenario, run_scenario

SHIPPED = ["kimi-k2.6-cs3", "sol-cs3"]
MARKUP = "<script>alert(1)</script>"
IMG_MARKUP = "<img src=x onerror=alert(2)>"
FLAGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]
LOCAL_SCHEMES = ("file:", "data:", "about:")


def chromium_path() -> str | None:
    return os.environ.get("TOKENSIM_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser") or (
        "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)


@dataclass
class Opened:
    """A page that loaded a report, with what the browser reported while loading it."""

    page: object
    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def evaluate(self, expression: str):
        return self.page.evaluate(expression)

    def screenshot_png(self) -> bytes:
        return self.page.screenshot(type="png")


@pytest.fixture(scope="module")
def browser():
    exe = chromium_path()
    if not exe:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); the browser checks of the "
                    "HTML report need it")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install '.[test]' installs playwright")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def open_report(browser):
    """Open a report file in a fresh page; the page is closed after the test."""
    contexts = []

    def opener(path: Path) -> Opened:
        context = browser.new_context(viewport={"width": 1280, "height": 1600}, device_scale_factor=1)
        contexts.append(context)
        page = context.new_page()
        seen = Opened(page)
        page.on("console", lambda m: seen.errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "assert") else None)
        page.on("pageerror", lambda exc: seen.errors.append(f"page error: {exc}"))
        page.on("request", lambda r: seen.urls.append(r.url))
        devtools = context.new_cdp_session(page)
        devtools.on("Log.entryAdded",
                    lambda e: seen.errors.append(e["entry"].get("text", "")) if e["entry"].get("level") == "error" else None)
        devtools.on("Network.requestWillBeSent", lambda e: seen.urls.append(e["request"]["url"]))
        devtools.send("Log.enable")
        devtools.send("Network.enable")
        page.goto(path.resolve().as_uri(), wait_until="load")
        page.evaluate("1")              # let late console/log events arrive before the checks
        return seen

    yield opener
    for context in contexts:
        context.close()


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


def test_report_renders_offline_in_chromium(tmp_path, open_report):
    """Two shipped scenarios: no console errors, no request beyond the file itself and its data: images,
    the predicted numbers in the rendered text, every image decoded, and a screenshot that is not blank."""
    out = write_report(SHIPPED, tmp_path / "report.html")
    browser = open_report(out)
    assert browser.errors == []
    urls = browser.urls
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
    c03 = next(r for r in all_claims() if r.id == "c03")               # kimi-k2.6-cs3's claim and its verdict, as rendered
    assert "c03" in text and c03.verdict in text
    assert browser.evaluate("document.scripts.length") == 0
    images = browser.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth])")
    assert len(images) == 2 * len(SHIPPED) and all(done and width > 100 for done, width in images)
    assert _distinct_colours(browser.screenshot_png()) > 50


def test_the_browser_checks_see_errors_and_requests(tmp_path, open_report):
    """The harness is not blind: a page that logs an error, throws, and fetches from the network is caught."""
    page = tmp_path / "noisy.html"
    page.write_text('<!DOCTYPE html><html><body><p>noisy</p><img src="http://127.0.0.1:9/x.png">'
                    '<script>console.error("logged"); throw new Error("thrown");</script></body></html>', encoding="utf-8")
    browser = open_report(page)
    assert any("logged" in e for e in browser.errors) and any("thrown" in e for e in browser.errors)
    assert "http://127.0.0.1:9/x.png" in browser.urls


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


def test_markup_shows_as_text_in_chromium(tmp_path, open_report):
    out = write_report([str(p) for p in _markup_scenarios(tmp_path)], tmp_path / "markup.html")
    browser = open_report(out)
    assert browser.evaluate("document.querySelectorAll('script').length") == 0
    assert browser.evaluate("document.querySelectorAll('img[onerror]').length") == 0
    text = browser.evaluate("document.body.innerText")
    assert f"title {MARKUP}" in text and f"assumed {MARKUP}" in text and IMG_MARKUP in text
    assert browser.errors == []
    assert browser.urls and all(u.startswith(LOCAL_SCHEMES) for u in browser.urls)


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
