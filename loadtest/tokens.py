"""How many tokens a prompt is for the served model: the tokenizer, the server, or a calibration.

Prompts must be built to an exact token count (``prompts.build_prompts``), so the harness needs the
target's token count of a text. Three sources, best first (``token_counter_for`` picks):

1. ``LocalTokenizer``: the model's own ``tokenizer.json`` through the ``tokenizers`` library
   (``Target.tokenizer``; the console fills it from the catalog version's files). Exact and fast.
2. ``EndpointTokenizer``: the engine's ``POST /tokenize`` (vLLM serves it; so does the simulated
   ``engines.server``). Exact: the server counts with the tokenizer it serves, chat template included.
3. ``UsageCalibration``: neither is there, so a few probe requests (``max_tokens = 1``) read the
   server's ``usage.prompt_tokens`` for texts of known word counts and fit ``tokens = a + b * words``.
   Close, not exact; the report's requested-vs-actual lengths say how close.

Every source counts what the server counts for a completion: special tokens (BOS) included.
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from .client import API_CHAT, Target

SOURCE_TOKENIZER = "tokenizer"
SOURCE_ENDPOINT = "tokenize_endpoint"
SOURCE_USAGE = "usage_calibration"
SOURCE_WORDS = "words"


class TokenCountError(RuntimeError):
    """The target's token counts could not be learned at all."""


class TokenCounter:
    """Counts tokens of texts; ``exact`` says whether counts are the server's own."""

    source = SOURCE_WORDS
    exact = False
    max_model_len: int | None = None
    _prompt_vocab = None  # the prompt builder's word list for this counter, learned once (prompts._Vocab)

    def count(self, text: str) -> int:
        return len(text.split())

    def count_many(self, texts: list[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def describe(self) -> str:
        return "one token per word (no tokenizer, endpoint or usage to learn from)"


class LocalTokenizer(TokenCounter):
    """The model's ``tokenizer.json`` (a file, or a directory holding one)."""

    source = SOURCE_TOKENIZER
    exact = True

    def __init__(self, path: str | Path) -> None:
        from tokenizers import Tokenizer

        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        if not p.is_file():
            raise TokenCountError(f"no tokenizer.json at {path}")
        self.path = p
        self._tok = Tokenizer.from_file(str(p))
        config = p.parent / "config.json"
        if config.is_file():
            try:
                self.max_model_len = int(json.loads(config.read_text())["max_position_embeddings"])
            except (KeyError, TypeError, ValueError):
                self.max_model_len = None

    def count(self, text: str) -> int:
        return len(self._tok.encode(text).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(texts)]

    def describe(self) -> str:
        return f"the model's tokenizer ({self.path})"


def _root_url(target: Target) -> str:
    base = target.base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


class _Http:
    """One keep-alive connection for many small JSON POSTs."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float) -> None:
        parts = urlsplit(url)
        self.https = parts.scheme == "https"
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.headers = {k: v for k, v in headers.items() if k.lower() != "accept"}
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        for attempt in (0, 1):  # a kept-alive connection the server closed is retried once
            if self._conn is None:
                cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
                self._conn = cls(self.host, self.port, timeout=self.timeout_s)
            try:
                self._conn.request("POST", self.prefix + path, body=data, headers=self.headers)
                resp = self._conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class EndpointTokenizer(TokenCounter):
    """The server's ``POST /tokenize`` (vLLM's body: model + prompt, or model + messages for chat)."""

    source = SOURCE_ENDPOINT
    exact = True

    def __init__(self, target: Target) -> None:
        self.target = target
        self._http = _Http(_root_url(target), target.headers(), target.connect_timeout_s + 20)

    def _body(self, text: str) -> dict:
        if self.target.api == API_CHAT:
            return {"model": self.target.model, "messages": [{"role": "user", "content": text}]}
        return {"model": self.target.model, "prompt": text}

    def probe(self) -> bool:
        """Whether the server answers ``/tokenize``; also learns its ``max_model_len``."""
        try:
            status, raw = self._http.post("/tokenize", self._body("hello"))
        except (OSError, http.client.HTTPException):
            return False
        if status != 200:
            return False
        try:
            data = json.loads(raw)
        except ValueError:
            return False
        if not isinstance(data.get("count"), int):
            return False
        if isinstance(data.get("max_model_len"), int):
            self.max_model_len = data["max_model_len"]
        return True

    def count(self, text: str) -> int:
        status, raw = self._http.post("/tokenize", self._body(text))
        if status != 200:
            raise TokenCountError(f"/tokenize answered {status}: {raw[:200]!r}")
        return int(json.loads(raw)["count"])

    def describe(self) -> str:
        return f"the server's /tokenize endpoint ({_root_url(self.target)}/tokenize)"


def usage_prompt_tokens(target: Target, text: str) -> int:
    """The server's ``usage.prompt_tokens`` for ``text``: one streamed request of one output token."""
    http_ = _Http(target.base_url, target.headers(), target.request_timeout_s)
    try:
        body = json.loads(target.body(prompt=text, max_tokens=1))
        body["min_tokens"] = 0
        path = "/chat/completions" if target.api == API_CHAT else "/completions"
        status, raw = http_.post(path, body)
    finally:
        http_.close()
    if status != 200:
        raise TokenCountError(f"probe request answered {status}: {raw[:200]!r}")
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data:") and '"usage"' in line:
            payload = line[5:].strip()
            try:
                usage = json.loads(payload).get("usage")
            except ValueError:
                continue
            if usage and isinstance(usage.get("prompt_tokens"), int):
                return int(usage["prompt_tokens"])
    raise TokenCountError("the server sent no usage.prompt_tokens")


class UsageCalibration(TokenCounter):
    """``tokens = a + b * words`` fitted on the server's usage for probe texts (close, not exact)."""

    source = SOURCE_USAGE
    exact = False

    def __init__(self, a: float, b: float, probes: list[tuple[int, int]]) -> None:
        self.a, self.b, self.probes = a, b, probes

    @classmethod
    def fit(cls, target: Target, texts: list[str]) -> UsageCalibration:
        probes = [(len(t.split()), usage_prompt_tokens(target, t)) for t in texts]
        words = np.array([p[0] for p in probes], dtype=float)
        tokens = np.array([p[1] for p in probes], dtype=float)
        b, a = np.polyfit(words, tokens, 1)
        if not b > 0:
            raise TokenCountError(f"usage did not grow with the prompt: {probes}")
        return cls(float(a), float(b), probes)

    def count(self, text: str) -> int:
        return int(round(self.a + self.b * len(text.split())))

    def describe(self) -> str:
        return f"calibrated on the server's usage: tokens ≈ {self.a:.2f} + {self.b:.3f} × words"


def token_counter_for(target: Target, *, probe_texts: list[str] | None = None) -> TokenCounter:
    """The best token counter this target offers (see the module docstring for the order)."""
    if target.tokenizer and target.api != API_CHAT:
        return LocalTokenizer(target.tokenizer)
    endpoint = EndpointTokenizer(target)
    if endpoint.probe():
        return endpoint
    endpoint._http.close()
    if probe_texts:
        try:
            return UsageCalibration.fit(target, probe_texts)
        except (OSError, http.client.HTTPException, TokenCountError, ValueError):
            pass
    return TokenCounter()
