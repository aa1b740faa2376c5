"""The tokenizer: a tiktoken ``Encoding`` built from the checkpoint's own vocabulary, plus ChatML.

Scope: text <-> token ids for byte-level BPE checkpoints (SmolLM2, GPT-2), and the chat template
of SmolLM2-Instruct. Not part of the paper: speculative decoding works on ids, but the real-model
tests and the CLI need text in and out. Nothing is downloaded: the vocabulary and merges come
from the GGUF file (``tokenizer.ggml.*``) or from a Hugging Face ``tokenizer.json``.

How the tiktoken ``Encoding`` is built, and why it is exact for SmolLM2:
- tiktoken's BPE repeatedly merges the adjacent pair whose concatenation has the lowest *rank*
  and emits the rank as the token id. Hugging Face BPE merges the pair that comes first in the
  merge list. The two agree when "rank = token id" orders merge results like the merge list,
  which holds for SmolLM2 (ids of merge results increase along the merge list; checked for
  ``tokenizer.json`` input, stated in docs/smollm2.md for the GGUF and checked against the
  ``tokenizers`` library in ``tests/test_tokenizer.py``).
- Byte-level BPE stores each byte as a printable unicode character (the GPT-2 byte<->unicode
  table, rebuilt in :func:`bytes_to_unicode`); tiktoken wants raw bytes, so every token string
  is mapped back through the inverse table.
- Special tokens are those with GGUF ``token_type == 3`` (CONTROL), or ``special: true`` in
  ``tokenizer.json``. They never come out of BPE; :meth:`Tokenizer.encode` only produces them
  when ``allow_special=True``.
- Pre-tokenization: SmolLM2 splits digits one by one and a digit also ends a whitespace run;
  :data:`SMOLLM2_PATTERN` reproduces ``Digits(individual_digits=True) + ByteLevel(use_regex)``
  (docs/smollm2.md: matched token for token on 5000 random strings and 417 files). GPT-2 uses
  :data:`GPT2_PATTERN`.

Decisions and deviations:
- Bytes without a token. 21 byte values (0x04, 0x06, ..., 0xF5-0xFF) have no single-byte token
  in SmolLM2's vocabulary; tiktoken panics (a ``BaseException``) on them and the ``tokenizers``
  library silently drops them. We *reject* such text with a ``ValueError`` naming the character,
  checked before tiktoken is called: silently changing the user's text is worse for a reference.
- ``encode(text)`` treats special-token strings inside ``text`` as plain text (tiktoken's
  ``encode_ordinary``); pass ``allow_special=True`` to parse them. ``apply_chat_template`` inserts
  the ChatML special ids itself and encodes roles and contents as plain text, so a message
  containing ``<|im_end|>`` cannot forge a turn. For ordinary messages the ids are identical to
  rendering the template to a string and tokenizing it (the text between special tokens is
  tokenized on its own either way).
- ``stop_ids`` = eos, ``<|im_end|>`` and ``<|endoftext|>`` when the vocabulary has them.
- ``from_gguf`` reads the GGUF key/value section with :func:`read_gguf_metadata`, the project's
  own bounds-checked parser (:mod:`casspec_ref.io.gguf`, also used by the weight loader).
  ``from_gguf_reader`` accepts an open ``gguf.GGUFReader`` instead; the tests check both paths
  give the same tokenizer.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from casspec_ref.io.gguf import read_gguf_metadata

# Pre-tokenizer of SmolLM2 (tokenizer.ggml.pre = "smollm"); see the module docstring.
SMOLLM2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])|\s+"
# Pre-tokenizer of GPT-2 (the regex of its ``encoder.py``; also ByteLevel(use_regex=True)).
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

# GGUF ``tokenizer.ggml.pre`` value -> pattern.
PRETOKENIZER_PATTERNS: dict[str, str] = {"smollm": SMOLLM2_PATTERN, "gpt-2": GPT2_PATTERN}

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

_GGUF_CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte -> printable character table used by byte-level BPE vocabularies.

    Bytes that are already printable, non-space Latin-1 characters stand for themselves; the
    other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) are given the code points 256, 257, ...
    in byte order, so that every token string is printable and whitespace-free.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    table = {b: chr(b) for b in printable}
    next_code = 256
    for b in range(256):
        if b not in table:
            table[b] = chr(next_code)
            next_code += 1
    return table


def _token_bytes(token: str, unicode_to_byte: Mapping[str, int]) -> bytes:
    try:
        return bytes(unicode_to_byte[ch] for ch in token)
    except KeyError as err:
        raise ValueError(
            f"token {token!r} is not a byte-level BPE token: character {err.args[0]!r} is not "
            "in the GPT-2 byte<->unicode table"
        ) from None


class Tokenizer:
    """Byte-level BPE tokenizer (tiktoken engine) with the ChatML chat template.

    Build it with :meth:`from_gguf`, :meth:`from_hf_tokenizer_json`, or directly from a token
    list (index = id) and the set of special ids.
    """

    def __init__(
        self,
        tokens: Sequence[str],
        special_ids: set[int] | frozenset[int],
        pattern: str = SMOLLM2_PATTERN,
        bos_id: int | None = None,
        eos_id: int | None = None,
        name: str = "casspec_bpe",
    ) -> None:
        if not tokens:
            raise ValueError("the vocabulary is empty")
        unicode_to_byte = {ch: b for b, ch in bytes_to_unicode().items()}
        mergeable_ranks: dict[bytes, int] = {}
        special_tokens: dict[str, int] = {}
        for token_id, token in enumerate(tokens):
            if token_id in special_ids:
                special_tokens[token] = token_id
                continue
            raw = _token_bytes(token, unicode_to_byte)
            if raw in mergeable_ranks:
                raise ValueError(
                    f"tokens {mergeable_ranks[raw]} and {token_id} decode to the same bytes {raw!r}"
                )
            mergeable_ranks[raw] = token_id
        for special_id in (bos_id, eos_id):
            if special_id is not None and not 0 <= special_id < len(tokens):
                raise ValueError(
                    f"special id {special_id} is outside the vocabulary [0, {len(tokens)})"
                )

        self.vocab_size = len(tokens)
        self.tokens: tuple[str, ...] = tuple(tokens)
        self.special_tokens: dict[str, int] = special_tokens
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.im_start_id = special_tokens.get("<|im_start|>")
        self.im_end_id = special_tokens.get("<|im_end|>")
        self.endoftext_id = special_tokens.get("<|endoftext|>")
        # tiktoken panics (BaseException) on a byte with no token: remember which bytes have one
        # so that encode() can reject the text first. ``bytes.translate(None, delete)`` removes
        # the encodable bytes in C, leaving only the offending ones.
        single = bytes(sorted(raw[0] for raw in mergeable_ranks if len(raw) == 1))
        self._encodable_bytes = single
        self.unencodable_bytes = frozenset(set(range(256)) - set(single))
        self._encoding = tiktoken.Encoding(
            name,
            pat_str=pattern,
            mergeable_ranks=mergeable_ranks,
            special_tokens=special_tokens,
        )

    # ----------------------------------------------------------------------------- builders

    @classmethod
    def from_gguf(cls, path: str | Path) -> Tokenizer:
        """Build the tokenizer from a GGUF file's ``tokenizer.ggml.*`` metadata.

        Reads only the metadata section (our parser, :func:`read_gguf_metadata`).
        """
        path = Path(path)
        return cls.from_gguf_metadata(read_gguf_metadata(path), name=path.name)

    @classmethod
    def from_gguf_reader(cls, reader: Any, name: str = "gguf") -> Tokenizer:
        """Build the tokenizer from an open ``gguf.GGUFReader`` (the ``gguf`` package's)."""
        metadata = {
            key: field.contents()
            for key, field in reader.fields.items()
            if key.startswith("tokenizer.ggml.")
        }
        return cls.from_gguf_metadata(metadata, name)

    @classmethod
    def from_gguf_metadata(cls, metadata: Mapping[str, Any], name: str = "gguf") -> Tokenizer:
        """Build the tokenizer from GGUF metadata given as a ``{key: value}`` mapping."""
        model = metadata.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(
                f"{name}: tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is "
                "supported"
            )
        pre = metadata.get("tokenizer.ggml.pre") or "gpt-2"
        if not isinstance(pre, str) or pre not in PRETOKENIZER_PATTERNS:
            raise ValueError(
                f"{name}: unknown pre-tokenizer {str(pre)[:60]!r}; supported: "
                f"{sorted(PRETOKENIZER_PATTERNS)}"
            )
        tokens = metadata.get("tokenizer.ggml.tokens")
        types = metadata.get("tokenizer.ggml.token_type")
        if not (
            isinstance(tokens, list)
            and isinstance(types, list)
            and len(tokens) == len(types)
            and all(isinstance(t, str) for t in tokens)
            and all(isinstance(k, int) and not isinstance(k, bool) for k in types)
        ):
            raise ValueError(
                f"{name}: tokenizer.ggml.tokens (strings) and tokenizer.ggml.token_type "
                "(integers) must be present and of the same length"
            )
        special = frozenset(i for i, kind in enumerate(types) if kind == _GGUF_CONTROL)
        bos = metadata.get("tokenizer.ggml.bos_token_id")
        eos = metadata.get("tokenizer.ggml.eos_token_id")
        for key, value in (("bos_token_id", bos), ("eos_token_id", eos)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                shown = str(value)[:40]
                raise ValueError(f"{name}: tokenizer.ggml.{key}={shown!r}: not an integer")
        return cls(
            list(tokens),
            special,
            pattern=PRETOKENIZER_PATTERNS[str(pre)],
            bos_id=None if bos is None else int(bos),
            eos_id=None if eos is None else int(eos),
            name=f"gguf:{name}",
        )

    @classmethod
    def from_hf_tokenizer_json(
        cls, path: str | Path, bos_id: int | None = None, eos_id: int | None = None
    ) -> Tokenizer:
        """Build the tokenizer from a Hugging Face ``tokenizer.json`` (byte-level BPE only).

        Accepted pre-tokenizers: ``ByteLevel(use_regex=True)`` (GPT-2) and
        ``Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]`` (SmolLM2).
        Raises ``ValueError`` for anything else, and when the merge list is not ordered like the
        ids of the merged tokens (tiktoken's rank = id would then merge in another order).
        ``tokenizer.json`` does not say which tokens are bos/eos: pass them (``load_model``
        takes them from ``config.json``).
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer.json not found: {path}")
        try:
            spec = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        model = spec.get("model") or {}
        if model.get("type") != "BPE":
            raise ValueError(f"{path}: model type {model.get('type')!r}; only 'BPE' is supported")
        pattern = _hf_pattern(spec.get("pre_tokenizer"))
        if pattern is None:
            raise ValueError(
                f"{path}: pre_tokenizer {json.dumps(spec.get('pre_tokenizer'))[:200]} is not "
                "supported; allowed: ByteLevel(use_regex=True), or Digits(individual_digits=True) "
                "followed by ByteLevel"
            )
        vocab: dict[str, int] = dict(model.get("vocab") or {})
        specials: set[int] = set()
        for added in spec.get("added_tokens") or []:
            vocab.setdefault(added["content"], added["id"])
            if added.get("special"):
                specials.add(int(added["id"]))
        if sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError(f"{path}: token ids are not the contiguous range 0..{len(vocab) - 1}")
        tokens = [""] * len(vocab)
        for token, token_id in vocab.items():
            tokens[token_id] = token
        _check_merge_order(path, model.get("merges") or [], vocab)
        return cls(tokens, frozenset(specials), pattern, bos_id, eos_id, name=f"hf:{path.name}")

    # ----------------------------------------------------------------------------- encode

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Token ids of ``text`` (no BOS is added: SmolLM2 does not add one).

        ``allow_special=False`` (default) encodes special-token strings as plain text.
        Raises ``ValueError`` when ``text`` contains a byte that has no token.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        self._check_encodable(text)
        if allow_special:
            return self._encoding.encode(text, allowed_special="all")
        return self._encoding.encode_ordinary(text)

    def _check_encodable(self, text: str) -> None:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as err:
            code = ord(text[err.start])
            if 0xDC80 <= code <= 0xDCFF:  # how Python carries an undecodable input byte
                raise ValueError(
                    f"text holds the byte 0x{code - 0xDC00:02X} (at index {err.start}), which is "
                    "not valid UTF-8: give the text in UTF-8"
                ) from None
            raise ValueError(
                f"text is not encodable as UTF-8 (lone surrogate U+{code:04X} at index {err.start})"
            ) from None
        leftover = data.translate(None, self._encodable_bytes)
        if not leftover:
            return
        bad_byte = leftover[0]
        listed = sorted(self.unencodable_bytes)
        missing = ", ".join(f"0x{b:02X}" for b in listed[:24]) + (
            f", ... ({len(listed)} in all)" if len(listed) > 24 else ""
        )
        for ch in text:
            if bad_byte in ch.encode("utf-8"):
                raise ValueError(
                    f"character {ch!r} (U+{ord(ch):04X}) contains byte 0x{bad_byte:02X}, which "
                    f"has no token in this vocabulary; bytes without a token: {missing}"
                )
        raise AssertionError("unreachable: the offending byte must belong to a character")

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (invalid UTF-8, e.g. a cut multi-byte character, becomes U+FFFD)."""
        return self._encoding.decode(self._checked_ids(ids), errors="replace")

    def decode_bytes(self, ids: Sequence[int]) -> bytes:
        """Raw bytes of ``ids`` (useful when streaming: a character may span two tokens)."""
        return self._encoding.decode_bytes(self._checked_ids(ids))

    def _checked_ids(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as ints in the vocabulary, or a ValueError naming the first bad one."""
        if isinstance(ids, str | bytes):
            raise ValueError(f"ids must be a sequence of token ids, got {type(ids).__name__}")
        checked = []
        for token_id in ids:
            try:
                if isinstance(token_id, bool | float):
                    raise TypeError
                value = operator.index(token_id)
            except TypeError:
                raise ValueError(
                    f"token id {str(token_id)[:40]!r} is not an integer "
                    f"(a {type(token_id).__name__})"
                ) from None
            if not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"token id {value} is outside the vocabulary [0, {self.vocab_size})"
                )
            checked.append(value)
        return checked

    # ----------------------------------------------------------------------------- chat

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a generation: eos, ``<|im_end|>``, ``<|endoftext|>`` (those present)."""
        found = {self.eos_id, self.im_end_id, self.endoftext_id} - {None}
        return tuple(sorted(i for i in found if i is not None))

    def apply_chat_template(
        self,
        messages: list[dict[str, str]],
        add_generation_prompt: bool = True,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    ) -> list[int]:
        """ChatML ids of ``messages`` as SmolLM2-Instruct's template renders them.

        ``<|im_start|>system\\n{system_prompt}<|im_end|>\\n`` first when the first message is not
        a system message, then ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then
        ``<|im_start|>assistant\\n`` when ``add_generation_prompt``.
        """
        if self.im_start_id is None or self.im_end_id is None:
            raise ValueError("this vocabulary has no <|im_start|>/<|im_end|>: no ChatML template")
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
        for index, message in enumerate(messages):
            if not (
                isinstance(message, dict)
                and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)
                and message["role"]
            ):
                raise ValueError(
                    f"messages[{index}] must be a dict with a non-empty str 'role' and a str "
                    f"'content', got {message!r}"
                )
        turns = [(m["role"], m["content"]) for m in messages]
        if turns[0][0] != "system":
            turns.insert(0, ("system", system_prompt))
        newline = self.encode("\n")
        ids: list[int] = []
        for role, content in turns:
            ids += [self.im_start_id, *self.encode(f"{role}\n{content}"), self.im_end_id, *newline]
        if add_generation_prompt:
            ids += [self.im_start_id, *self.encode("assistant\n")]
        return ids


def _hf_pattern(pre_tokenizer: object) -> str | None:
    """Our tiktoken pattern for a ``tokenizer.json`` pre-tokenizer, or None if unsupported."""
    if not isinstance(pre_tokenizer, dict):
        return None
    kind = pre_tokenizer.get("type")
    if kind == "ByteLevel" and pre_tokenizer.get("use_regex", True):
        if pre_tokenizer.get("add_prefix_space"):
            return None  # a prefix space changes the text: not modelled
        return GPT2_PATTERN
    if kind == "Sequence":
        steps = pre_tokenizer.get("pretokenizers") or []
        if (
            len(steps) == 2
            and steps[0].get("type") == "Digits"
            and steps[0].get("individual_digits")
            and _hf_pattern(steps[1]) == GPT2_PATTERN
        ):
            return SMOLLM2_PATTERN
    return None


def _check_merge_order(path: Path, merges: list[object], vocab: Mapping[str, int]) -> None:
    # tiktoken emits ranks as ids, so "rank = id" must sort merge results like the merge list.
    previous = -1
    for index, merge in enumerate(merges):
        pair = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError(f"{path}: merge {index} is {merge!r}, not 'left right' or a pair")
        left, right = str(pair[0]), str(pair[1])
        merged = vocab.get(left + right)
        if merged is None:
            raise ValueError(f"{path}: merge {index} ({left!r}, {right!r}) has no merged token")
        if merged <= previous:
            raise ValueError(
                f"{path}: merge {index} yields id {merged} after id {previous}; rank = id would "
                "not reproduce this merge order, which this tokenizer requires"
            )
        previous = merged
