"""The embedded SmolLM2-135M-Instruct, end to end: GGUF -> Transformer -> chat -> text.

Greedy decoding is deterministic, so these tests have no false-failure rate from sampling; they
do depend on float32 summation order staying close enough that the argmax path is stable (the
answer's top-1 margins are large for this prompt).
"""

from __future__ import annotations

import pytest
import torch

from casspec_ref.config import smollm2_135m
from casspec_ref.generate import generate_ar
from casspec_ref.io.tokenizer import Tokenizer
from casspec_ref.io.weights import build_model, default_model_path, load_model, permute_qk_for_gguf
from casspec_ref.model import Transformer

pytestmark = pytest.mark.real_model

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smollm2() -> tuple[Transformer, Tokenizer]:
    try:
        path = default_model_path()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    model, tokenizer = load_model(path)
    assert tokenizer is not None
    return model, tokenizer


def _answer(model: Transformer, tokenizer: Tokenizer, max_new_tokens: int = 16) -> str:
    prompt = tokenizer.apply_chat_template(QUESTION)
    result = generate_ar(model, prompt, max_new_tokens, stop_ids=tokenizer.stop_ids)
    return tokenizer.decode(result.tokens)


def test_loaded_config_is_the_preset(smollm2: tuple[Transformer, Tokenizer]) -> None:
    model, _ = smollm2
    assert model.config == smollm2_135m()
    assert not model.training
    assert not any(p.requires_grad for p in model.parameters())
    assert model.tok_emb.weight.dtype == torch.float32


def test_capital_of_france(smollm2: tuple[Transformer, Tokenizer]) -> None:
    model, tokenizer = smollm2
    text = _answer(model, tokenizer)
    assert "Paris" in text, text
    assert text.endswith("<|im_end|>"), text  # it stops by itself on the ChatML stop token


def test_rotate_half_on_raw_gguf_rows_is_garbage(smollm2: tuple[Transformer, Tokenizer]) -> None:
    """Negative control: skipping the Q/K un-permutation (i.e. "rotate half" applied to
    llama.cpp's row order) loses the answer, so the un-permutation is what makes it right."""
    model, tokenizer = smollm2
    state = {name: value.clone() for name, value in model.state_dict().items()}
    config = model.config
    for name in state:
        if name.endswith("attn.q.weight"):
            state[name] = permute_qk_for_gguf(state[name], config.n_heads)
        elif name.endswith("attn.k.weight"):
            state[name] = permute_qk_for_gguf(state[name], config.n_kv_heads)
    wrong = build_model(config, state)
    text = _answer(wrong, tokenizer)
    assert "Paris" not in text, text
    assert text != _answer(model, tokenizer)
