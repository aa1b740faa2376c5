"""The tiktoken-based tokenizer: tiny hand-built vocabularies, then the real SmolLM2 vocabulary.

Oracles: the Hugging Face ``tokenizers`` library (a different BPE engine) built from the same
vocabulary and merges, when installed; round trips; the ChatML string given in docs/smollm2.md.
"""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest

from casspec_ref.io.tokenizer import (
    DEFAULT_SYSTEM_PROMPT,
    GPT2_PATTERN,
    SMOLLM2_PATTERN,
    Tokenizer,
    bytes_to_unicode,
    read_gguf_metadata,
)

# --------------------------------------------------------------------------- a tiny vocabulary

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Merges in priority order; each merged token gets the next id, so rank = id holds.
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("Ġ", "Ġ")]


def _tiny_vocab(drop_bytes: tuple[int, ...] = ()) -> list[str]:
    table = bytes_to_unicode()
    byte_tokens = [table[b] for b in range(256) if b not in drop_bytes]
    return SPECIALS + byte_tokens + [left + right for left, right in MERGES]


def _tiny(drop_bytes: tuple[int, ...] = ()) -> Tokenizer:
    return Tokenizer(_tiny_vocab(drop_bytes), frozenset({0, 1, 2}), SMOLLM2_PATTERN, 1, 2)


def test_byte_table_is_a_printable_bijection() -> None:
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())
    # Well-known anchors of the GPT-2 table: space is 'Ġ' (U+0120), newline 'Ċ' (U+010A).
    assert table[ord(" ")] == "\u0120" and table[ord("\n")] == "\u010a"
    assert table[ord("a")] == "a"


def test_tiny_merges_and_round_trip() -> None:
    tok = _tiny()
    vocab = {t: i for i, t in enumerate(_tiny_vocab())}
    assert tok.encode("hello world") == [
        vocab["hell"],
        vocab["o"],
        vocab["Ġwor"],
        vocab["l"],
        vocab["d"],
    ]
    # Digits are split one by one; a digit also ends a whitespace run ("ĠĠ" then "Ġ" + "1").
    assert tok.encode("   12") == [vocab["ĠĠ"], vocab["Ġ"], vocab["1"], vocab["2"]]
    for text in ["", "hello", "a\tb\r\n  c", "naïve café 😀", "x = f(3) + 42;  # ok"]:
        assert tok.decode(tok.encode(text)) == text


def test_special_tokens_only_when_allowed() -> None:
    tok = _tiny()
    text = "hi<|im_end|>"
    assert 2 not in tok.encode(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode(text, allow_special=True)[-1] == 2
    assert tok.stop_ids == (0, 2)
    assert (tok.bos_id, tok.eos_id, tok.im_end_id) == (1, 2, 2)


def test_unencodable_bytes_raise_value_error() -> None:
    tok = _tiny(drop_bytes=(0x04, 0xF0))
    assert tok.unencodable_bytes == {0x04, 0xF0}
    with pytest.raises(ValueError, match=r"'\\x04' \(U\+0004\).*0x04"):
        tok.encode("ok\x04")
    # U+1F600 is F0 9F 98 80 in UTF-8: the whole character is named.
    with pytest.raises(ValueError, match=r"U\+1F600.*0xF0"):
        tok.encode("smile 😀")
    assert tok.decode(tok.encode("é")) == "é"  # C3 A9: still fine
    with pytest.raises(ValueError, match="surrogate"):
        tok.encode("\ud800")


def test_bad_inputs() -> None:
    tok = _tiny()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([0, 10_000])
    with pytest.raises(ValueError, match="must be a str"):
        tok.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty list"):
        tok.apply_chat_template([])
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user"}])
    with pytest.raises(ValueError, match="not a byte-level BPE token"):
        Tokenizer(["<s>", "abc€"], frozenset({0}))
    with pytest.raises(ValueError, match="empty"):
        Tokenizer([], frozenset())


def test_chat_template_structure() -> None:
    tok = _tiny()
    messages = [{"role": "user", "content": "hello"}]
    ids = tok.apply_chat_template(messages)
    expected = (
        f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.decode(ids) == expected
    assert ids == tok.encode(expected, allow_special=True)
    assert ids.count(1) == 3 and ids.count(2) == 2
    with_system = [{"role": "system", "content": "Be brief."}, *messages]
    rendered = tok.decode(tok.apply_chat_template(with_system, add_generation_prompt=False))
    assert (
        rendered == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
    )
    # Content cannot forge a turn: its special-token text stays plain text.
    forged = tok.apply_chat_template([{"role": "user", "content": "<|im_end|>"}])
    assert forged.count(2) == 2


# --------------------------------------------------------------------------- tokenizer.json


def _tokenizer_json(
    path: Path, merges: list[tuple[str, str]] = MERGES, pre: dict | None = None
) -> Path:
    vocab = {t: i for i, t in enumerate(_tiny_vocab())}
    spec = {
        "version": "1.0",
        "added_tokens": [
            {
                "id": i,
                "content": t,
                "special": True,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
            }
            for i, t in enumerate(SPECIALS)
        ],
        "normalizer": None,
        "pre_tokenizer": pre
        or {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": True,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [list(m) for m in merges],
        },
    }
    path.write_text(json.dumps(spec))
    return path


def test_from_hf_tokenizer_json_matches_direct_build(tmp_path: Path) -> None:
    tok = Tokenizer.from_hf_tokenizer_json(_tokenizer_json(tmp_path / "tokenizer.json"), 1, 2)
    direct = _tiny()
    for text in ["hello world", "   12 hello", "he ll\n\n  world 3.14"]:
        assert tok.encode(text) == direct.encode(text)
    assert tok.special_tokens == {t: i for i, t in enumerate(SPECIALS)}


def test_from_hf_tokenizer_json_matches_tokenizers_library(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    path = _tokenizer_json(tmp_path / "tokenizer.json")
    ours = Tokenizer.from_hf_tokenizer_json(path)
    reference = tokenizers.Tokenizer.from_file(str(path))
    for text in _random_texts(random.Random(1), 200, bytes_ok=set(range(256))):
        assert ours.encode(text) == reference.encode(text).ids, text


def test_from_hf_tokenizer_json_rejections(tmp_path: Path) -> None:
    swapped = [MERGES[1], MERGES[0], *MERGES[2:]]  # merge order no longer follows the ids
    with pytest.raises(ValueError, match="merge order"):
        Tokenizer.from_hf_tokenizer_json(_tokenizer_json(tmp_path / "a.json", merges=swapped))
    with pytest.raises(ValueError, match="pre_tokenizer"):
        Tokenizer.from_hf_tokenizer_json(
            _tokenizer_json(tmp_path / "b.json", pre={"type": "Whitespace"})
        )
    plain = Tokenizer.from_hf_tokenizer_json(
        _tokenizer_json(tmp_path / "c.json", pre={"type": "ByteLevel", "use_regex": True})
    )
    assert plain._encoding._pat_str == GPT2_PATTERN
    with pytest.raises(FileNotFoundError):
        Tokenizer.from_hf_tokenizer_json(tmp_path / "missing.json")


# --------------------------------------------------------------------------- GGUF metadata


def _tiny_gguf(path: Path) -> None:
    import gguf

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint32("test.u32", 7)
    writer.add_int64("test.i64", -5)
    writer.add_float32("test.f32", 0.5)
    writer.add_float64("test.f64", -2.25)
    writer.add_bool("test.bool", True)
    writer.add_array("test.strings", ["a", "b c", "é"])
    writer.add_array("test.bools", [True, False])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(_tiny_vocab())
    writer.add_token_types([3, 3, 3] + [1] * (len(_tiny_vocab()) - 3))
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_gguf_metadata_reader_agrees_with_gguf_library(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "tok.gguf"
    _tiny_gguf(path)
    ours = read_gguf_metadata(path)
    theirs = {k: f.contents() for k, f in gguf.GGUFReader(path).fields.items()}
    for key, value in ours.items():
        assert value == theirs[key], key
    assert ours["test.strings"] == ["a", "b c", "é"] and ours["test.f64"] == -2.25
    assert set(theirs) - set(ours) <= {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count"}
    tok = Tokenizer.from_gguf(path)
    assert tok.encode("hello world") == _tiny().encode("hello world")
    assert (tok.bos_id, tok.eos_id) == (1, 2)


def test_gguf_metadata_reader_rejects_damage(tmp_path: Path) -> None:
    path = tmp_path / "tok.gguf"
    _tiny_gguf(path)
    blob = path.read_bytes()
    for label, content in {"cut": blob[: len(blob) // 2], "magic": b"GGUX" + blob[4:]}.items():
        bad = tmp_path / f"{label}.gguf"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match="GGUF"):
            Tokenizer.from_gguf(bad)
    with pytest.raises(FileNotFoundError):
        Tokenizer.from_gguf(tmp_path / "missing.gguf")


# --------------------------------------------------------------------------- random text


def _random_texts(rng: random.Random, n: int, bytes_ok: set[int]) -> list[str]:
    """Varied strings: words, contractions, digits, runs of spaces/newlines/tabs, code,
    punctuation, accents, CJK, emoji; characters with a byte outside ``bytes_ok`` are skipped."""
    pieces = [
        "the",
        " cat",
        "Hello",
        " WORLD",
        "don't",
        "we'll",
        "I'm",
        "'s",
        "'ve",
        " 's",
        "0",
        "7",
        "123",
        " 4567",
        "3.14159",
        "1e-5",
        "  ",
        "   ",
        "\n",
        "\n\n",
        "\t",
        " \n ",
        "def f(x):\n    return x ** 2\n",
        '{"a": [1, 2]}',
        "a_b-c",
        "!!",
        "...",
        "?!",
        "$",
        "#",
        "é",
        "naïve",
        "Straße",
        "中文",
        "日本語",
        "😀",
        "🚀 ",
        "Привет",
        "ñ",
        "→",
        "\u00a0",
        "  42",
        "\t\t7",
        " \u3000",
        "x" * 20,
    ]
    texts = []
    while len(texts) < n:
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if rng.random() < 0.3:  # some arbitrary code points too
            text += "".join(chr(rng.randint(0x20, 0x2FFF)) for _ in range(rng.randint(1, 4)))
        text = "".join(ch for ch in text if set(ch.encode("utf-8", "surrogatepass")) <= bytes_ok)
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Cs")
        texts.append(text)
    return texts


# --------------------------------------------------------------------------- the real SmolLM2


@pytest.fixture(scope="module")
def smollm2_path() -> Path:
    from casspec_ref.io.weights import default_model_path

    try:
        return default_model_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> Tokenizer:
    return Tokenizer.from_gguf(smollm2_path)


@pytest.mark.real_model
def test_smollm2_metadata_paths_agree(smollm2: Tokenizer, smollm2_path: Path) -> None:
    """Our metadata parser and gguf.GGUFReader (the weight loader's path) give one tokenizer."""
    import gguf

    via_reader = Tokenizer.from_gguf_reader(gguf.GGUFReader(smollm2_path))
    assert via_reader.tokens == smollm2.tokens
    assert via_reader.special_tokens == smollm2.special_tokens
    assert (via_reader.bos_id, via_reader.eos_id) == (smollm2.bos_id, smollm2.eos_id)


@pytest.mark.real_model
def test_smollm2_facts(smollm2: Tokenizer) -> None:
    assert smollm2.vocab_size == 49152
    assert len(smollm2.special_tokens) == 17
    assert (smollm2.bos_id, smollm2.eos_id, smollm2.im_end_id) == (1, 2, 2)
    assert smollm2.special_tokens["<|endoftext|>"] == 0
    assert smollm2.stop_ids == (0, 2)
    assert sorted(smollm2.unencodable_bytes) == [
        0x04,
        0x06,
        0x13,
        0x14,
        0x16,
        0x1D,
        0xC0,
        0xC1,
        0xF1,
        0xF2,
        *range(0xF5, 0x100),
    ]


@pytest.mark.real_model
def test_smollm2_round_trips(smollm2: Tokenizer) -> None:
    ok = set(range(256)) - smollm2.unencodable_bytes
    texts = _random_texts(random.Random(0), 300, ok) + [
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
        "Phone: +1 (555) 010-9999, 2026-11-29T14:54:04Z",
        "    \n\n\n\t  trailing spaces   ",
        "Ünïcödé ☃ 漢字 🤗 مرحبا",
    ]
    for text in texts:
        ids = smollm2.encode(text)
        assert all(0 <= i < 49152 for i in ids)
        assert smollm2.decode(ids) == text
    # Longer text compresses well below one token per byte (BPE merges are in effect).
    prose = "The quick brown fox jumps over the lazy dog. " * 20
    assert len(smollm2.encode(prose)) < len(prose.encode()) / 3


@pytest.mark.real_model
def test_smollm2_chat_template(smollm2: Tokenizer) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = smollm2.apply_chat_template(messages)
    expected_text = (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert smollm2.decode(ids) == expected_text
    assert ids == smollm2.encode(expected_text, allow_special=True)
    tail = smollm2.encode("assistant\n")
    assert ids[0] == 1 and ids[-len(tail) - 1 :] == [1, *tail] and ids.count(2) == 2


@pytest.mark.real_model
def test_smollm2_rejects_bytes_without_token(smollm2: Tokenizer) -> None:
    with pytest.raises(ValueError, match="U\\+0004"):
        smollm2.encode("a\x04b")
    with pytest.raises(ValueError, match="U\\+40000"):
        smollm2.encode("\U00040000")  # F1 80 80 80: 0xF1 has no token


def _reference_tokenizer(path: Path):  # noqa: ANN202 (tokenizers is optional)
    """The oracle: tokenizers' BPE from the GGUF vocabulary and merges, with
    Digits(individual_digits=True) + ByteLevel(add_prefix_space=False, use_regex=True)."""
    tokenizers = pytest.importorskip("tokenizers")
    metadata = read_gguf_metadata(path)  # checked against gguf.GGUFReader above
    tokens = metadata["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in metadata["tokenizer.ggml.merges"]]
    types = metadata["tokenizer.ggml.token_type"]
    specials = [tokens[i] for i, kind in enumerate(types) if kind == 3]
    model = tokenizers.models.BPE({t: i for i, t in enumerate(tokens)}, merges)
    reference = tokenizers.Tokenizer(model)
    reference.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [
            tokenizers.pre_tokenizers.Digits(individual_digits=True),
            tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    reference.decoder = tokenizers.decoders.ByteLevel()
    reference.add_special_tokens(specials)
    return reference


@pytest.mark.real_model
def test_smollm2_matches_tokenizers_library(smollm2: Tokenizer, smollm2_path: Path) -> None:
    reference = _reference_tokenizer(smollm2_path)
    ok = set(range(256)) - smollm2.unencodable_bytes
    texts = _random_texts(random.Random(2), 400, ok)
    texts += [" " * k + d for k in range(1, 6) for d in ("1", "a", "\n", "!")]
    for text in texts:
        assert smollm2.encode(text) == reference.encode(text, add_special_tokens=False).ids, text
    # The chat template equals the oracle's tokenization of the rendered ChatML string.
    messages = [{"role": "user", "content": "What is the capital of France?  It's 2 + 2 = 4."}]
    rendered = smollm2.decode(smollm2.apply_chat_template(messages))
    assert smollm2.apply_chat_template(messages) == reference.encode(rendered).ids
    # Special tokens in text: both parse them when allowed.
    text = "<|im_start|>user\nhi<|im_end|>"
    assert smollm2.encode(text, allow_special=True) == reference.encode(text).ids
