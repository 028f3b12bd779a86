"""kvstash: bit-exact, fingerprinted, forkable LLM states, from Python.

    import kvstash
    model = kvstash.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf", threads=2)
    state = model.prefill("The capital of France is")     # a State: tokens + KV + logits
    branch = state.fork()                                  # O(1), copy-on-write
    print(model.generate(branch, " Paris", max_tokens=16, temperature=0))
    for piece in model.generate(state, " Lyon", max_tokens=16, stream=True):
        print(piece, end="", flush=True)
    state.save("prefix.kvs")                              # load in any process: State.load(model, path)

See docs/python.md for the whole API, what may be shared across threads, and the Hugging Face interop
(kvstash.interop).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import errors
from ._core import Adapters, Completion, State, file_info
from ._core import Model as _Model
from ._core import Session as _Session
from ._stream import TextStream, TokenCallback
from .errors import (
    AdapterMismatch,
    BadInputFile,
    ContextOverflow,
    Error,
    FileError,
    InternalError,
    InvalidArgument,
    ModelMismatch,
    OutputError,
    Unsupported,
)

if _TYPE_CHECKING:  # names for annotations only: `import kvstash` exposes just the API below
    from typing import List, Optional, Sequence, Tuple, Union

    Prompt = Union[str, Sequence[int], None]

__all__ = [
    "Model",
    "State",
    "Session",
    "Adapters",
    "Completion",
    "TextStream",
    "TokenCallback",
    "file_info",
    "errors",
    "Error",
    "InvalidArgument",
    "ModelMismatch",
    "AdapterMismatch",
    "FileError",
    "OutputError",
    "BadInputFile",
    "Unsupported",
    "ContextOverflow",
    "InternalError",
]
__version__ = "0.1.0"


class Model(_Model):
    """A GGUF model, loaded once, shared by any number of States and threads.

    ``Model(path, threads=0, cache_ram=None, cache_dir=None)``: threads = compute threads per call
    (0: all hardware threads); cache_ram (bytes) and/or cache_dir turn the prefix cache on.
    """

    def generate(
        self,
        state: State,
        prompt: "Prompt" = None,
        max_tokens: int = 256,
        *,
        stream: bool = False,
        callback: "Optional[TokenCallback]" = None,
        **sampling: object,
    ) -> "Union[str, TextStream]":
        """Appends `prompt` to `state` and generates up to `max_tokens` tokens into it.

        Sampling keywords: temperature (<= 0: greedy), top_p, top_k, min_p, seed (None: continue the
        State's random sequence), stop (list of strings), repeat_penalty, repeat_last_n,
        presence_penalty, frequency_penalty, logit_bias [(id, bias)], stop_at_eog.
        callback(token, text) gets each piece of text; returning False stops generation.
        Returns the text, or with stream=True a TextStream iterating over the pieces as they come.
        """
        if stream:
            return TextStream(
                lambda on_text: self.complete(state, prompt, max_tokens, callback=on_text, **sampling), callback
            )
        return self.complete(state, prompt, max_tokens, callback=callback, **sampling).text

    def generate_batch(
        self, prompts: "Sequence[Union[str, Sequence[int], State]]", max_tokens: int = 256, **sampling: object
    ) -> "List[str]":
        """Generates for several prompts at once, decoded together through the evaluator's batching (one
        batched pass per token for all of them, not threads). Each item is a prompt (str or token ids: a
        new State) or a State to continue (e.g. forks of one prefix; it then holds the result). Sampling
        keywords as generate(). Each text is bitwise what generate() gives for that item alone; see
        complete_batch() for the Completions.
        """
        states = [p if isinstance(p, State) else State(self) for p in prompts]
        appended = [None if isinstance(p, State) else p for p in prompts]
        return [c.text for c in self.complete_batch(states, appended, max_tokens, **sampling)]

    def generate_iter(self, state: State, prompt: "Prompt" = None, max_tokens: int = 256, **kwargs: object) -> TextStream:
        """The same as generate(..., stream=True)."""
        return self.generate(state, prompt, max_tokens, stream=True, **kwargs)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"<kvstash.Model {self.path!r} arch={self.info['architecture']} threads={self.threads}>"


class Session:
    """A multi-turn chat: the system prompt is evaluated once, each turn only its new tokens.

    ``Session(model, system_prompt="", template=None, n_ctx=0, kv_type="f16", use_cache=True, adapters=None)``:
    template names a chat template ("chatml", "llama3", "gemma", ...; None: the model's own);
    use_cache takes the system prompt from (and offers it to) the model's prefix cache; adapters: a
    :class:`Adapters` (LoRA / control vectors) the conversation is computed under (see set_adapters).
    ``Session.open(model, path)`` resumes one saved with :meth:`save`, bit-exactly.
    Use a Session from one thread at a time.
    """

    def __init__(
        self,
        model: Model,
        system_prompt: str = "",
        template: "Optional[str]" = None,
        n_ctx: int = 0,
        kv_type: str = "f16",
        use_cache: bool = True,
        adapters: "Optional[Adapters]" = None,
        *,
        _core: "Optional[_Session]" = None,
    ):
        self.model = model
        self._core = (
            _core
            if _core is not None
            else _Session(model, system_prompt, template, n_ctx, kv_type, use_cache, adapters)
        )

    @classmethod
    def open(
        cls,
        model: Model,
        path: str,
        template: "Optional[str]" = None,
        use_cache: bool = True,
        adapters: "Optional[Adapters]" = None,
    ) -> "Session":
        """A session saved by save(), resumed. Raises ModelMismatch for a file of another model,
        AdapterMismatch for one saved under other adapters."""
        return cls(model, _core=_Session.open(model, path, template, use_cache, adapters))

    def reply(
        self,
        message: str,
        max_tokens: int = 256,
        *,
        stream: bool = False,
        callback: "Optional[TokenCallback]" = None,
        **sampling: object,
    ) -> "Union[str, TextStream]":
        """Adds the user's message and generates the assistant's reply (text, or a TextStream).

        Sampling keywords: temperature, top_p, top_k, min_p, seed (None: continue the session's random
        sequence), stop, repeat_penalty. callback(token, text) returning False stops the reply.
        speculative="lookup" (prompt lookup over the conversation) or "draft" (with draft_model=Model(...)
        of the same vocabulary), spec_max guesses at most a round: decodes speculatively, with a reply
        bitwise that of plain decoding (docs/speculative.md); complete() reports drafted / accepted.
        """
        if stream:
            return TextStream(
                lambda on_text: self._core._reply(message, max_tokens, callback=on_text, **sampling), callback
            )
        return self._core._reply(message, max_tokens, callback=callback, **sampling).text

    def complete(self, message: str, max_tokens: int = 256, **kwargs: object) -> Completion:
        """As reply(), returning the Completion (token ids, stop reason, timing)."""
        return self._core._reply(message, max_tokens, **kwargs)

    def undo(self) -> bool:
        """Drops the last user + assistant exchange (no recomputation); False when there is none."""
        return self._core.undo()

    def reset(self) -> None:
        """Back to the system prompt alone (nothing recomputed)."""
        self._core.reset()

    def save(self, path: str, compress: bool = False) -> None:
        """One state file: the State and the messages (also a plain state file for State.load)."""
        self._core.save(path, compress)

    def load(self, path: str) -> None:
        """Replaces this conversation with the one saved in `path` (unchanged on error)."""
        self._core.load(path)

    @property
    def messages(self) -> "List[Tuple[str, str]]":
        """[(role, content), ...] of the conversation."""
        return self._core.messages

    def set_adapters(self, adapters: "Optional[Adapters]") -> None:
        """Continues under other adapters (None: the model alone); the conversation's tokens are computed
        again under them (bitwise a cold evaluation)."""
        self._core.set_adapters(adapters)

    @property
    def adapters(self) -> str:
        """What the conversation is computed under ("no adapters" when none)."""
        return self._core.adapters

    @property
    def state(self) -> State:
        """A fork of the session's State (O(1))."""
        return self._core.state

    @property
    def system_tokens(self) -> int:
        """Tokens of the system block, computed once."""
        return self._core.system_tokens

    @property
    def template(self) -> str:
        return self._core.template

    @property
    def last_turn(self) -> dict:
        """What the last reply did with the prompt: prompt_tokens, computed, reused, appended."""
        return self._core.last_turn


def _kv(self: State, layout: str = "native") -> list:
    from .interop import kv_layers

    return kv_layers(self, layout)


State.kv = _kv  # type: ignore[attr-defined]
_kv.__doc__ = """Per attention layer, (K, V) as float32 NumPy arrays [n_tokens, n_head_kv, head_dim].

layout="native": K as kvstash stores it (GGUF RoPE layout); layout="hf": K in Hugging Face's layout
(llama GGUF q/k are permuted relative to HF: adjacent-pair vs half rotation)."""
