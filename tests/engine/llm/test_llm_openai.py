"""The OpenAI-compatible backend over real HTTP, against a local server speaking the protocol."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("openai")

from engine.llm.backends import (
    ENV_API_KEY,
    ENV_BASE_URL,
    ENV_MODEL,
    OpenAIBackend,
    make_backend,
)
from engine.llm.evaluate import SourceCompiler
from engine.llm.extract import NO_CODE, check_answer
from engine.llm.proposer import LLMProposer
from engine.outcomes import CandidateStatus
from tests.engine.llm_fakes import CHEAT_KERNEL, GOOD_KERNEL, FakeBuilder, fenced, library_passes

MESSAGES = [{"role": "user", "content": "write a kernel"}]


class ChatServer:
    """Answers POST /v1/chat/completions from a queue of replies: (status, body or dict, delay)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, object, float]] = []
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                outer.requests.append(json.loads(self.rfile.read(length)))
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                status, body, delay = outer.replies.pop(0) if outer.replies else (500, "", 0)
                time.sleep(delay)
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, content: str | None, *, status: int = 200, delay: float = 0.0) -> None:
        body = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "tiny-coder",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 45, "total_tokens": 165},
        }
        self.replies.append((status, body, delay))

    def raw(self, status: int, body: object, delay: float = 0.0) -> None:
        self.replies.append((status, body, delay))


@pytest.fixture
def server():
    s = ChatServer()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def env(server):
    return {ENV_BASE_URL: server.url, ENV_MODEL: "tiny-coder", ENV_API_KEY: "sk-test"}


def test_it_reads_url_model_and_key_from_the_environment(server, env):
    server.reply(fenced(GOOD_KERNEL))
    backend = OpenAIBackend(environ=env, max_retries=0)
    completion = backend.complete(MESSAGES)
    assert completion.ok
    assert check_answer(completion.text).ok
    assert server.requests[0]["model"] == "tiny-coder"
    assert server.requests[0]["messages"] == MESSAGES
    assert server.headers[0]["authorization"] == "Bearer sk-test"
    assert (completion.prompt_tokens, completion.completion_tokens) == (120, 45)


def test_tokens_add_up_over_calls(server, env):
    server.reply("one")
    server.reply("two")
    backend = OpenAIBackend(environ=env, max_retries=0)
    backend.complete(MESSAGES)
    backend.complete(MESSAGES)
    assert backend.usage.calls == 2
    assert backend.usage.prompt_tokens == 240
    assert backend.usage.completion_tokens == 90


def test_it_retries_a_server_error_then_succeeds(server, env):
    server.raw(503, {"error": {"message": "overloaded"}})
    server.reply("fine")
    backend = OpenAIBackend(environ=env, max_retries=2)
    completion = backend.complete(MESSAGES)
    assert completion.text == "fine"
    assert len(server.requests) == 2


def test_a_timeout_is_data_not_an_exception(server, env):
    server.reply("too late", delay=1.5)
    backend = OpenAIBackend(environ=env, timeout=0.3, max_retries=0)
    completion = backend.complete(MESSAGES)
    assert not completion.ok
    assert "timed out" in completion.error
    assert backend.usage.failures == 1


@pytest.mark.parametrize(
    "body",
    [
        "this is not json",
        {"choices": []},
        {"id": "x", "object": "chat.completion", "choices": [{"index": 0}]},
    ],
    ids=["not-json", "no-choices", "no-message"],
)
def test_malformed_answers_are_data(server, env, body):
    server.raw(200, body)
    completion = OpenAIBackend(environ=env, max_retries=0).complete(MESSAGES)
    assert not completion.ok
    assert completion.error


def test_a_missing_model_is_a_configuration_error(server):
    with pytest.raises(ValueError, match=ENV_MODEL):
        OpenAIBackend(environ={ENV_BASE_URL: server.url})


def test_make_backend_builds_the_openai_client_from_a_spec(server, monkeypatch):
    monkeypatch.setenv(ENV_API_KEY, "sk-env")
    server.reply("hello")
    backend = make_backend(
        {"kind": "openai", "base_url": server.url, "model": "m", "max_retries": 0}
    )
    assert backend.complete(MESSAGES).text == "hello"
    assert server.headers[0]["authorization"] == "Bearer sk-env"


def test_forbidden_apis_are_rejected_before_compiling_and_sent_back(server, env, tmp_path):
    """Over HTTP: a prose answer (no code), then a cheat, then a clean kernel; only the clean
    one reaches the compiler, and each failure went back to the model as a repair turn."""
    from engine.problem import Problem
    from engine.propose.space import SearchSpace

    server.reply("I would use a 128x128 tile with a 4-stage pipeline.")
    server.reply(fenced(CHEAT_KERNEL))
    server.reply(fenced(GOOD_KERNEL))
    builder = FakeBuilder(tmp_path)
    compiler = SourceCompiler(builder=builder, library_check=library_passes)
    proposer = LLMProposer(OpenAIBackend(environ=env, max_retries=0), compiler=compiler)
    problem = Problem.parse("512x512x512", "tn")
    (proposal,) = proposer.propose(
        problem, SearchSpace(problem, []), 1, history=[], exclude=set(), rng=None
    )
    assert proposal.source == GOOD_KERNEL
    assert proposal.meta["turn"] == 3
    turns = [r["messages"] for r in server.requests]
    assert "no CUDA source" in turns[1][-1]["content"]
    assert "cudaStreamCreate" in turns[2][-1]["content"]
    assert (compiler([proposal.config])[0]).ok
    assert builder.built == [GOOD_KERNEL]


def test_a_cheat_after_the_last_turn_is_recorded_as_a_static_rejection(server, env, tmp_path):
    from engine.problem import Problem
    from engine.propose.space import SearchSpace

    server.reply(fenced(CHEAT_KERNEL))
    server.reply("no code")
    builder = FakeBuilder(tmp_path)
    compiler = SourceCompiler(builder=builder, library_check=library_passes)
    proposer = LLMProposer(
        OpenAIBackend(environ=env, max_retries=0), compiler=compiler, max_turns=2
    )
    problem = Problem.parse("512x512x512", "tn")
    (proposal,) = proposer.propose(
        problem, SearchSpace(problem, []), 1, history=[], exclude=set(), rng=None
    )
    (result,) = compiler([proposal.config])
    assert not result.ok
    assert result.rejected_by == NO_CODE
    assert builder.built == []
    assert CandidateStatus.REJECTED == "rejected"
