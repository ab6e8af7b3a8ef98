"""Model backends: one ``complete(messages)`` call, a :class:`Completion` back, tokens counted.

* :class:`OpenAIBackend` — any OpenAI-compatible chat-completions server (vLLM, SGLang, Ollama,
  hosted APIs) through the ``openai`` client. Base URL, model and key come from the arguments or
  the environment (:data:`ENV_BASE_URL`, :data:`ENV_MODEL`, :data:`ENV_API_KEY`). The client
  retries connection errors, timeouts, 408/409/429 and 5xx answers with backoff (``max_retries``)
  and gives up after ``timeout`` seconds per attempt.
* :class:`TransformersBackend` — a local causal LM (a path or hub id, or a LoRA checkpoint saved by
  ``python -m engine train-llm``), with its generation settings and device.

A failed call is data (``Completion.error``), never an exception: the proposer records it as the
candidate's failure reason. Configuration errors (no model named) raise ValueError.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.llm.prompt import Message, prompt_text

ENV_BASE_URL = "GEMMFORGE_LLM_BASE_URL"
ENV_MODEL = "GEMMFORGE_LLM_MODEL"
ENV_API_KEY = "GEMMFORGE_LLM_API_KEY"
CHECKPOINT_META = "gemmforge_llm.json"  # written beside a train-llm checkpoint


@dataclass(frozen=True)
class Completion:
    text: str | None  # None when the call failed
    error: str | None = None  # why, when it failed
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    model: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None


@dataclass
class TokenUsage:
    """Running totals over a backend's life (thread-safe through the backend's lock)."""

    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def add(self, completion: Completion) -> None:
        self.calls += 1
        self.failures += 0 if completion.ok else 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.seconds += completion.seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    name: str
    usage: TokenUsage

    def complete(self, messages: Sequence[Message]) -> Completion: ...


@dataclass(frozen=True)
class GenerationSettings:
    max_new_tokens: int = 4096
    temperature: float = 0.7
    top_p: float = 0.95
    seed: int | None = None


class OpenAIBackend:
    """Chat completions over HTTP with the ``openai`` client."""

    def __init__(
        self,
        *,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 3,
        generation: GenerationSettings = GenerationSettings(),
        extra_body: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        import openai

        env = os.environ if environ is None else environ
        self.base_url = base_url or env.get(ENV_BASE_URL) or None  # None: api.openai.com
        self.model = model or env.get(ENV_MODEL) or ""
        if not self.model:
            raise ValueError(f"name a model (argument or {ENV_MODEL})")
        # Local servers take any key; the client insists on one.
        key = api_key or env.get(ENV_API_KEY) or "EMPTY"
        self.generation = generation
        self.extra_body = dict(extra_body or {})
        self.client = openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=timeout, max_retries=max_retries
        )
        self.name = f"openai:{self.model}"
        self.usage = TokenUsage()
        self._lock = threading.Lock()

    def complete(self, messages: Sequence[Message]) -> Completion:
        import openai

        g = self.generation
        started = time.monotonic()
        try:
            response = self.client.chat.completions.create(
                model=self.model,
                messages=[dict(m) for m in messages],  # type: ignore[misc]
                max_tokens=g.max_new_tokens,
                temperature=g.temperature,
                top_p=g.top_p,
                seed=g.seed,
                extra_body=self.extra_body or None,
            )
            choice = response.choices[0]
            text = choice.message.content
            usage = response.usage
            completion = Completion(
                text=text,
                error=None if text else "the answer has no message content",
                finish_reason=choice.finish_reason,
                prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
                seconds=time.monotonic() - started,
                model=getattr(response, "model", "") or self.model,
            )
        except openai.APITimeoutError:
            completion = self._failed(f"timed out after {self.client.timeout} s", started)
        except openai.APIStatusError as exc:
            completion = self._failed(f"HTTP {exc.status_code}: {_short(str(exc))}", started)
        except openai.APIConnectionError as exc:
            completion = self._failed(f"connection failed: {_short(str(exc))}", started)
        except (
            openai.OpenAIError,
            AttributeError,
            IndexError,
            KeyError,
            TypeError,
            ValueError,
        ) as exc:
            completion = self._failed(f"malformed answer: {type(exc).__name__}: {exc}", started)
        with self._lock:
            self.usage.add(completion)
        return completion

    def _failed(self, error: str, started: float) -> Completion:
        return Completion(None, error, seconds=time.monotonic() - started, model=self.model)


class TransformersBackend:
    """A local causal LM. ``TransformersBackend.load`` reads a path, a hub id or a checkpoint."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        generation: GenerationSettings = GenerationSettings(),
        name: str = "local",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.generation = generation
        self.name = name
        self.usage = TokenUsage()
        self._lock = threading.Lock()  # one generate at a time per model

    @classmethod
    def load(
        cls,
        model: str | Path,
        *,
        adapter: str | Path | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        generation: GenerationSettings = GenerationSettings(),
    ) -> TransformersBackend:
        """``model``: a path or hub id, or a train-llm checkpoint (a LoRA adapter folder, whose
        base model is read from it); ``adapter``: a LoRA adapter to apply on ``model``."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        base, adapter = resolve_checkpoint(model, adapter)
        kwargs: dict[str, Any] = {}
        if dtype:
            kwargs["dtype"] = getattr(torch, dtype)
        net = AutoModelForCausalLM.from_pretrained(str(base), **kwargs)
        tokenizer_from = adapter if adapter and _has_tokenizer(Path(adapter)) else base
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_from))
        if adapter:
            from peft import PeftModel

            net = PeftModel.from_pretrained(net, str(adapter))
        net.to(device)
        net.eval()
        label = f"local:{model}" + (f"+{adapter}" if adapter and str(adapter) != str(model) else "")
        return cls(net, tokenizer, generation=generation, name=label)

    def render(self, messages: Sequence[Message]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return str(
                self.tokenizer.apply_chat_template(
                    list(messages), tokenize=False, add_generation_prompt=True
                )
            )
        return prompt_text(messages)

    def complete(self, messages: Sequence[Message]) -> Completion:
        import torch

        g = self.generation
        started = time.monotonic()
        try:
            inputs = self.tokenizer(self.render(messages), return_tensors="pt")
            inputs.pop("token_type_ids", None)
            device = next(self.model.parameters()).device
            inputs = {k: v.to(device) for k, v in inputs.items()}
            if g.seed is not None:
                torch.manual_seed(g.seed)
            pad = self.tokenizer.pad_token_id
            if pad is None:
                pad = self.tokenizer.eos_token_id
            with self._lock, torch.no_grad():
                out = self.model.generate(
                    **inputs,
                    max_new_tokens=g.max_new_tokens,
                    do_sample=g.temperature > 0,
                    temperature=g.temperature if g.temperature > 0 else None,
                    top_p=g.top_p if g.temperature > 0 else None,
                    pad_token_id=pad,
                )
            prompt_len = inputs["input_ids"].shape[1]
            new = out[0, prompt_len:]
            text = self.tokenizer.decode(new, skip_special_tokens=True)
            eos = self.tokenizer.eos_token_id
            finished = eos is not None and len(new) > 0 and int(new[-1]) == eos
            completion = Completion(
                text=text,
                finish_reason="stop" if finished or len(new) < g.max_new_tokens else "length",
                prompt_tokens=int(prompt_len),
                completion_tokens=len(new),
                seconds=time.monotonic() - started,
                model=self.name,
            )
        except (RuntimeError, ValueError) as exc:  # out of memory, a bad prompt, …
            completion = Completion(
                None, f"{type(exc).__name__}: {exc}", seconds=time.monotonic() - started
            )
        with self._lock:
            self.usage.add(completion)
        return completion


def resolve_checkpoint(
    model: str | Path, adapter: str | Path | None = None
) -> tuple[str, str | None]:
    """(base model, adapter): a folder with adapter_config.json is an adapter on its base."""
    path = Path(model)
    if adapter is None and (path / "adapter_config.json").is_file():
        meta_file = path / CHECKPOINT_META
        base = None
        if meta_file.is_file():
            base = json.loads(meta_file.read_text()).get("base_model")
        if not base:
            base = json.loads((path / "adapter_config.json").read_text()).get(
                "base_model_name_or_path"
            )
        if not base:
            raise ValueError(f"{path}: an adapter without a base model")
        return str(base), str(path)
    return str(model), str(adapter) if adapter else None


def _has_tokenizer(path: Path) -> bool:
    return (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()


@dataclass(frozen=True)
class BackendSpec:
    """A backend as a campaign names it (JSON-ready, for the launch form and Celery tasks)."""

    kind: str  # "openai" or "local"
    model: str = ""  # openai: model name; local: path, hub id or checkpoint
    base_url: str = ""
    adapter: str = ""
    device: str = "cpu"
    dtype: str = ""
    timeout: float = 600.0
    max_retries: int = 3
    generation: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BackendSpec:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["generation"] = dict(self.generation)
        return out


def make_backend(spec: BackendSpec | Mapping[str, Any]) -> Backend:
    """Build the backend a spec names (the API key only ever comes from the environment)."""
    if not isinstance(spec, BackendSpec):
        spec = BackendSpec.from_dict(spec)
    generation = GenerationSettings(**dict(spec.generation))
    if spec.kind == "openai":
        return OpenAIBackend(
            base_url=spec.base_url or None,
            model=spec.model or None,
            timeout=spec.timeout,
            max_retries=spec.max_retries,
            generation=generation,
        )
    if spec.kind == "local":
        if not spec.model:
            raise ValueError("a local backend needs a model path, hub id or checkpoint")
        return TransformersBackend.load(
            spec.model,
            adapter=spec.adapter or None,
            device=spec.device,
            dtype=spec.dtype or None,
            generation=generation,
        )
    raise ValueError(f"unknown backend kind {spec.kind!r}: expected openai or local")


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
