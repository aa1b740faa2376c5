"""What the stop-18 scratch harnesses share: stop 17's loader of a replay record and a costs file
(`docs/bench/s17/scratch/common.py`, loaded from there), and SmolLM2 with 256 cached tokens."""
import importlib.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "s17_common", os.path.join(_HERE, "..", "..", "s17", "scratch", "common.py"))
_s17 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_s17)
load = _s17.load


def target_after_context(n_new=8, context=256):
    """(model, tokenizer, cache holding `context` random tokens, `n_new` more to feed): the
    setting of a forward over a few new tokens after a context, as the cost curve measures it."""
    os.environ.setdefault("CASSPEC_KERNELS", "auto")
    import torch
    from casspec_ref.io.weights import load_model
    from casspec_ref.kv_cache import KVCache
    model, tok = load_model()
    c = model.config
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, c.vocab_size, (1, context), generator=gen)
    cache = KVCache(c, context + 44, torch.float32)
    model(ctx, cache=cache, last_only=True)
    return model, tok, cache, torch.randint(0, c.vocab_size, (1, n_new), generator=gen)
