"""A scripted LLM on a loopback HTTP server speaking the Ollama and OpenAI protocols.

Stands in for a real model where one cannot run (the pipeline benchmark, tests): memlane's
real providers talk to it over real HTTP. ``POST /api/generate`` (Ollama: ``{"response"}``) and
``POST /v1/chat/completions`` (OpenAI: ``choices[0].message.content``) both call
``script(prompt) -> Reply | str``; ``GET /api/tags`` and ``GET /v1/models`` answer 200.

:func:`instant_pipeline_reply` is the benchmark's script: valid extraction JSON (two facts and
one triple derived from the input) and a valid decision (ADD) at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memlane.pipeline.prompts import CONTRADICTION_MARKER, DECISION_MARKER, EXTRACTION_MARKER


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer: the model text, an HTTP status, a delay before answering (seconds),
    or ``raw`` bytes sent as the body instead of the protocol's JSON envelope."""

    text: str = ""
    status: int = 200
    delay_s: float = 0.0
    raw: bytes | None = None


Script = Callable[[str], "Reply | str"]


class ScriptedLlmServer:
    """A ThreadingHTTPServer on 127.0.0.1 (port chosen by the OS) answering with ``script``.

    Attributes:
        url: ``http://127.0.0.1:{port}`` (Ollama base URL; OpenAI base URL is ``url + "/v1"``).
        prompts: every prompt received, in order (thread-safe append).
    """

    def __init__(self, script: Script) -> None:
        self.script = script
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout)

            def do_GET(self) -> None:
                self._send(200, b'{"models": [], "data": []}')

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    payload = json.loads(raw or b"{}")
                except ValueError:
                    payload = {}
                openai = self.path.rstrip("/").endswith("/chat/completions")
                if openai:
                    msgs = payload.get("messages") or [{}]
                    prompt = str(msgs[-1].get("content", ""))
                else:
                    prompt = str(payload.get("prompt", ""))
                with server._lock:
                    server.prompts.append(prompt)
                reply = server.script(prompt)
                reply = Reply(reply) if isinstance(reply, str) else reply
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.raw is not None:
                    body = reply.raw
                elif openai:
                    body = json.dumps(
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant", "content": reply.text},
                                    "finish_reason": "stop",
                                }
                            ],
                        }
                    ).encode()
                else:
                    body = json.dumps(
                        {"model": payload.get("model", "m"), "response": reply.text, "done": True}
                    ).encode()
                self._send(reply.status, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True
        )

    def start(self) -> ScriptedLlmServer:
        """Start serving (returns self)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLlmServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def count(self, marker: str) -> int:
        """Prompts received that contain ``marker`` (e.g. a prompt marker of memlane.pipeline.prompts)."""
        with self._lock:
            return sum(marker in p for p in self.prompts)


def prompt_input(prompt: str) -> str:
    """The memory text inside an extraction prompt (after the last ``Input:``, before ``Output:``)."""
    start = prompt.rfind("\nInput: ")
    if start < 0:
        return ""
    body = prompt[start + len("\nInput: ") :]
    end = body.rfind("\nOutput:")
    return (body[:end] if end >= 0 else body).strip()


def instant_pipeline_reply(prompt: str) -> str:
    """The benchmark script: two ~12-word facts + one triple per memory, ADD for every decision."""
    if EXTRACTION_MARKER in prompt:
        # One-sentence facts of about a dozen words, like a model's (the input's words, so the
        # decision stage finds the source's neighbours as candidates).
        words = prompt_input(prompt).split() or ["empty", "input"]
        first, second = " ".join(words[:12]), " ".join(words[12:24]) or " ".join(words[:6])
        return json.dumps(
            {
                "facts": [
                    {"content": f"Stated fact: {first}", "type": "fact", "confidence": 0.9},
                    {"content": f"Preference noted: {second}", "type": "preference", "confidence": 0.8},
                ],
                "entities": [
                    {
                        "source": words[0].strip(":"),
                        "relationship": "said",
                        "target": " ".join(words[1:4]),
                        "confidence": 0.8,
                    }
                ],
            }
        )
    if DECISION_MARKER in prompt:
        return '{"action": "ADD", "confidence": 0.9, "reason": "new information"}'
    if CONTRADICTION_MARKER in prompt:
        return '{"contradicts": false, "confidence": 0.5, "reasoning": "compatible"}'
    return "{}"


def main() -> None:  # pragma: no cover - exercised by the benchmark as a subprocess
    """``python -m benchmarks.scripted_llm``: serve :func:`instant_pipeline_reply` until stdin
    closes, printing the base URL as the first stdout line (a separate process: the benchmark
    measures memlane, not this server competing for memlane's GIL)."""
    import sys

    with ScriptedLlmServer(instant_pipeline_reply) as server:
        print(server.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":  # pragma: no cover
    main()
