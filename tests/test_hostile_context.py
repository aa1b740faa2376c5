"""Every decoding method at the edge of the context: prompt + max_new_tokens == max_seq_len.

Each drafting path must cap its proposal to the cache room it was given. The repetitive prompt
makes prompt lookup propose long continuations, which a vertical cascade without the cap would
review in one draft forward past the end of the cache ("KV cache overflow" on a valid request).
Model seeds 1 and 5 reproduce that overflow without the cap, greedy and sampled.
"""

from __future__ import annotations

import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.model import Transformer
from casspec_ref.speculative import METHODS, generate_speculative

CONTEXT = 64
PROMPT = [(i % 5) + 1 for i in range(60)]


def _model(seed: int) -> Transformer:
    torch.manual_seed(seed)
    config = tiny_llama(vocab_size=32, max_seq_len=CONTEXT)
    return random_init_(Transformer(config), seed=seed).eval()


@pytest.mark.parametrize("seed", [1, 5])
@pytest.mark.parametrize("new_tokens", [1, 4])
def test_every_method_fills_the_context_greedy(seed: int, new_tokens: int) -> None:
    model = _model(seed)
    prompt = PROMPT[: CONTEXT - new_tokens]
    expected = generate_ar(model, prompt, new_tokens).tokens
    for method in METHODS:
        result = generate_speculative(model, prompt, new_tokens, method=method)
        assert result.tokens == expected, method  # greedy: lossless means identical tokens


@pytest.mark.parametrize("seed", [1, 5])
def test_every_method_fills_the_context_sampled(seed: int) -> None:
    model = _model(seed)
    prompt = PROMPT[: CONTEXT - 4]
    for method in METHODS:
        for draw_seed in (1, 2):
            result = generate_speculative(
                model, prompt, 4, method=method, temperature=0.9, seed=draw_seed
            )
            assert len(result.tokens) == 4, method
            assert all(0 <= t < 32 for t in result.tokens), method


def test_one_more_token_than_the_context_is_a_clear_error() -> None:
    model = _model(1)
    for method in METHODS:
        with pytest.raises(ValueError, match="exceeds the model context max_seq_len=64"):
            generate_speculative(model, PROMPT, 5, method=method)
