"""The emulator speaks OpenAI's protocol: the official client works, bad requests get OpenAI error objects."""
import concurrent.futures
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai
import pytest
from endpoint_fakes import BrokenSource, emulator_thread

from tokensim.endpoints import FixedRateSource

MODEL = "tokensim-emulated"


def post(url: str, body: bytes | dict, path: str = "/v1/chat/completions", method: str = "POST") -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data if method == "POST" else None, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def url():
    with emulator_thread(FixedRateSource(ttft_s=0.01, tpot_s=0.002), default_max_tokens=7) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_openai_client_chat(client):
    """Chat, not streamed and streamed: text of exactly max_tokens filler tokens, usage exact, OpenAI's shapes."""
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=5)
    assert reply.object == "chat.completion" and reply.choices[0].finish_reason == "length"
    assert reply.choices[0].message.content.split() == ["token"] * 5
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (5, 5, 10)
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_body={"max_completion_tokens": 6}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == ["token"] * 6
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "chat.completion.chunk"


def test_openai_client_completions(client):
    """Completions, not streamed and streamed; the server's default max_tokens applies when none is given."""
    reply = client.completions.create(model=MODEL, prompt="a b c d")
    assert reply.choices[0].text.split() == ["token"] * 7 and reply.usage.prompt_tokens == 4
    chunks = list(client.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=3, stream=True,
                                            stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in chunks if c.choices).split() == ["token"] * 3
    assert chunks[-1].usage.prompt_tokens == 3 and chunks[-1].usage.completion_tokens == 3
    assert [m.id for m in client.models.list()] == [MODEL]


def test_openai_client_sees_errors(client):
    """The client raises its own typed errors from the emulator's error objects."""
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    assert info.value.status_code == 400 and info.value.body["param"] == "max_tokens"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-5", prompt="hi")


def test_input_tokens_counted_as_documented(url):
    """Words of text contents (list parts included); a prompt_token_ids hint overrides them."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "four words right here"},
                                             {"type": "image_url", "image_url": {"url": "x"}}]}]
    status, body = post(url, {"model": MODEL, "messages": messages, "max_tokens": 1})
    assert status == 200 and body["usage"]["prompt_tokens"] == 4
    status, body = post(url, {"model": MODEL, "prompt": "x", "prompt_token_ids": list(range(50)), "max_tokens": 1},
                        "/v1/completions")
    assert status == 200 and body["usage"]["prompt_tokens"] == 50


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("path, body, status, param", [
    ("/v1/chat/completions", b"{not json", 400, None),
    ("/v1/chat/completions", b"\xff\xfe", 400, None),
    ("/v1/chat/completions", [1, 2], 400, None),
    ("/v1/chat/completions", {"messages": CHAT["messages"]}, 400, "model"),
    ("/v1/chat/completions", {**CHAT, "model": 7}, 400, "model"),
    ("/v1/chat/completions", {**CHAT, "model": "other"}, 404, "model"),
    ("/v1/chat/completions", {"model": MODEL}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
    ("/v1/chat/completions", {"model": MODEL, "messages": ["hi"]}, 400, "messages[0]"),
    ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 0}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": -3}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": 2.5}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": "10"}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_tokens": True}, 400, "max_tokens"),
    ("/v1/chat/completions", {**CHAT, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    ("/v1/chat/completions", {**CHAT, "stream": "yes"}, 400, "stream"),
    ("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ("/v1/chat/completions", {**CHAT, "n": 2}, 400, "n"),
    ("/v1/completions", {"model": MODEL}, 400, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": ["a", "b"]}, 400, "prompt"),
    ("/v1/completions", {"model": MODEL, "prompt": "a", "prompt_token_ids": "abc"}, 400, "prompt_token_ids"),
    ("/v1/embeddings", {"model": MODEL, "input": "x"}, 404, None),
])
def test_malformed_requests_get_openai_error_objects(url, path, body, status, param):
    """Every malformed request: a 4xx status and {"error": {message, type, param, code}}, never a 500."""
    got_status, got = post(url, body, path)
    assert got_status == status
    assert set(got) == {"error"} and set(got["error"]) == {"message", "type", "param", "code"}
    assert got["error"]["param"] == param and got["error"]["type"] == "invalid_request_error"
    assert got["error"]["message"]


def test_wrong_method_is_an_openai_error(url):
    """GET on a POST route: 405 with the error object."""
    status, body = post(url, b"", "/v1/chat/completions", method="GET")
    assert status == 405 and body["error"]["type"] == "invalid_request_error"


def test_bounded_queue_answers_429():
    """Beyond max_pending_requests the emulator answers 429 with an OpenAI error object at once."""
    with emulator_thread(FixedRateSource(ttft_s=0.5, tpot_s=0.01), max_pending_requests=2) as url:
        body = {**CHAT, "max_tokens": 2}
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            slow = [pool.submit(post, url, body) for _ in range(2)]
            time.sleep(0.2)
            status, error = post(url, body)
            assert [f.result()[0] for f in slow] == [200, 200]
    assert status == 429 and error["error"]["code"] == "rate_limit_exceeded"


def test_failing_source_ends_streams_with_an_error():
    """A timing source that raises ends open streams with an error chunk and [DONE]; later requests get 500."""
    with emulator_thread(BrokenSource(tokens_per_event=1, gap_s=0.01)) as url:
        request = urllib.request.Request(url + "/v1/completions", method="POST", data=json.dumps(
            {"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            events = [line for line in response.read().decode().split("\n\n") if line]
        status, body = post(url, {**CHAT, "max_tokens": 2})
    assert "blew up" in json.loads(events[0].removeprefix("data: "))["error"]["message"]
    assert events[-1] == "data: [DONE]"
    assert status == 500 and body["error"]["type"] == "server_error"


def test_close_cuts_streams_after_the_grace_period():
    """Streams that outlast shutdown_grace_s are cut, so closing never waits for them."""
    request = {"model": MODEL, "prompt": "hi", "max_tokens": 100, "stream": True}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        with emulator_thread(FixedRateSource(0.01, 0.1), shutdown_grace_s=0.2) as url:
            stream = pool.submit(post_stream, url, request)
            time.sleep(0.1)
            started = time.monotonic()
        assert time.monotonic() - started < 3
        assert "[DONE]" not in stream.result()


def post_stream(url: str, body: dict) -> str:
    """The raw text of a streamed answer, up to where the server stopped sending."""
    request = urllib.request.Request(url + "/v1/completions", method="POST", data=json.dumps(body).encode())
    text = b""
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            while chunk := response.read1(65536):
                text += chunk
    except (OSError, http.client.HTTPException):
        pass
    return text.decode()


def test_sigterm_finishes_in_flight_stream_and_exits_cleanly(tmp_path):
    """run_emulator under SIGTERM: the stream already open runs to [DONE], then the process exits 0, no traceback."""
    script = ("import sys\n"
              "from tokensim.endpoints import FixedRateSource, run_emulator\n"
              "run_emulator(FixedRateSource(0.05, 0.05), port=0, on_ready=lambda u: print(u, flush=True))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(base_url + "/v1/completions", method="POST", data=json.dumps(
            {"model": MODEL, "prompt": "hi", "max_tokens": 10, "stream": True}).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            first = response.readline()
            os.kill(proc.pid, signal.SIGTERM)
            rest = response.read().decode()
        assert first.startswith(b"data: ") and rest.rstrip().endswith("data: [DONE]")
        assert proc.wait(timeout=10) == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
