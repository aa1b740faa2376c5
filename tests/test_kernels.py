"""The exact matmul forms and the kernel table every forward reads.

Nothing here times anything: tables are built by hand (the measuring side is
tests/test_kernel_table.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

import casspec_ref.model as model_module
from casspec_ref.accel.kernel_table import model_shapes
from casspec_ref.base import kernels
from casspec_ref.base.kernels import Form, KernelTable
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.speculative import generate_speculative


@pytest.fixture(autouse=True)
def restore_table() -> Iterator[None]:
    previous = kernels.use_table(None)
    yield
    kernels.use_table(previous)


def all_forms(rows: int, dtype: torch.dtype) -> list[Form]:
    """Every base form this machine can run in ``dtype``, plain and padded past ``rows``."""
    bases = kernels.base_forms(dtype)
    pads = sorted({min(rows + 1, kernels.MAX_ROWS), kernels.MAX_ROWS} - {rows})
    return bases + [Form(f.base, k) for f in bases for k in pads if k > rows]


needs_packed = pytest.mark.skipif(
    not kernels.packed_available(torch.float32), reason="this torch build has no oneDNN"
)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_every_form_is_exact_on_integer_data(bias: bool, dtype: torch.dtype) -> None:
    """Small integers make every partial sum an integer the dtype holds exactly (below 2^24 in
    float32 and float64, below 2^8 in bfloat16), so each form, padded or not, must give the
    integer product bit for bit (a wrong transpose, pad, slice or packed layout cannot hide in
    rounding)."""
    gen = torch.Generator().manual_seed(1)
    top = 3 if dtype == torch.bfloat16 else 9  # bfloat16: |sum| <= 24 * 2 * 2 + 2 < 2^8
    w = torch.randint(1 - top, top, (40, 24), generator=gen)
    b = torch.randint(1 - top, top, (40,), generator=gen) if bias else None
    for rows in range(1, kernels.MAX_ROWS + 1):
        x = torch.randint(1 - top, top, (1, rows, 24), generator=gen)
        want = (x @ w.T + (b if b is not None else 0)).to(dtype)  # exact in int64
        for form in all_forms(rows, dtype):
            bd = None if b is None else b.to(dtype)
            got = kernels.run_form(form, x.to(dtype), w.to(dtype), bd)
            assert got.shape == (1, rows, 40), form
            assert torch.equal(got, want), (rows, form)


def test_float32_forms_agree_within_rounding() -> None:
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(96, 64, generator=gen)
    for rows in (1, 2, 3, 7, 16):
        x = torch.randn(rows, 64, generator=gen)
        ref = x.double() @ w.double().T
        for form in all_forms(rows, torch.float32):
            out = kernels.run_form(form, x, w, None)
            assert out.dtype == torch.float32
            torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-4)


def test_row_counts_above_the_table_share_an_entry_per_class() -> None:
    assert [kernels.table_rows(r) for r in (1, 16)] == [1, 16]
    assert [kernels.table_rows(r) for r in (17, 32, 33, 128, 129, 512, 4096)] == [
        32,
        32,
        128,
        128,
        512,
        512,
        512,
    ]
    assert kernels.ROW_CLASSES[0] > kernels.MAX_ROWS


def test_exact_linear_reads_the_active_table(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[tuple[str, int]] = []
    real_run_form = kernels.run_form

    def spy(form: Form, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        used.append((str(form), x.numel() // x.shape[-1]))
        return real_run_form(form, x, w, b)

    monkeypatch.setattr(kernels, "run_form", spy)
    kernels.use_table(KernelTable({(40, 24, torch.float32, 3): Form("wxt", 4)}))
    w = torch.randn(40, 24)
    kernels.exact_linear(torch.randn(1, 3, 24), w, None)
    kernels.exact_linear(torch.randn(1, 2, 24), w, None)  # no entry: plain F.linear
    kernels.exact_linear(torch.randn(3, 24, dtype=torch.float64), w.double(), None)  # other dtype
    assert used == [("wxt@4", 3)]
    # Off the CPU (here the meta device) an entry-less product is one F.linear, bf16 included.
    meta = torch.empty(1, 1, 24, dtype=torch.bfloat16, device="meta")
    kernels.exact_linear(meta, torch.empty(40, 24, dtype=torch.bfloat16, device="meta"), None)
    assert used == [("wxt@4", 3)]
    kernels.exact_linear(torch.randn(1, 1, 24).bfloat16(), torch.randn(40, 24).bfloat16(), None)
    assert used == [("wxt@4", 3), ("wxt@2", 1)]  # on the CPU: the measured bf16 default
    kernels.use_table(KernelTable({(40, 24, torch.float32, 128): Form("split")}))
    kernels.exact_linear(torch.randn(100, 24), w, None)  # 100 rows: the class of 33..128
    assert used[-1] == ("split", 100)
    assert kernels.active_table().form_for(40, 24, torch.float32, 2) == Form("linear")
    assert kernels.active_table().form_for(40, 24, torch.bfloat16, 1) == Form("wxt", 2)


def test_a_shape_without_a_checked_tile_runs_row_by_row_whatever_the_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked for shape invariance, a product without an invariant entry runs one row per call
    (`ROW_BY_ROW`, the dtype's one-row form) at every row count, not the per-row table entries
    (which may round by row count), so a row's bits do not depend on it; not asked, it runs the
    table's."""
    calls = spy_on_run_form(monkeypatch)
    entries = {(40, 24, torch.bfloat16, n): Form("linear", 1) for n in range(1, 17)}
    kernels.use_table(KernelTable(entries))
    w = torch.randn(40, 24).bfloat16()
    x = torch.randn(12, 24).bfloat16()
    together = kernels.exact_linear(x, w, None, shape_invariant=True)  # (12, 40)
    alone = [kernels.exact_linear(x[i : i + 1], w, None, shape_invariant=True) for i in range(12)]
    assert calls == [str(kernels.default_form(torch.bfloat16, 1))] * 24
    assert all(torch.equal(together[i : i + 1], alone[i]) for i in range(12))
    calls.clear()
    kernels.exact_linear(x, w, None)
    assert calls == ["linear@1"]


def test_an_invariant_tile_serves_every_row_count_in_calls_of_one_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A shape's `KernelTable.invariant` tile runs at every row count when shape invariance is
    asked for, every call of its R rows (the last zero-padded); the per-row entries otherwise."""
    shapes: list[tuple[int, ...]] = []
    real = kernels.apply_form

    def spy(form: Form, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        shapes.append((str(form), *x.shape))
        return real(form, x, w, b)

    monkeypatch.setattr(kernels, "apply_form", spy)
    table = KernelTable({(40, 24, torch.float32, 3): Form("linear", 4)})
    table.invariant[(40, 24, torch.float32)] = Form("wxt", 4)
    kernels.use_table(table)
    w, x = torch.randn(40, 24), torch.randn(9, 24)
    tiled = kernels.exact_linear(x, w, None, shape_invariant=True)
    assert shapes == [("wxt", 4, 24)] * 3
    shapes.clear()
    kernels.exact_linear(x[:1], w, None, shape_invariant=True)
    assert shapes == [("wxt", 4, 24)]
    shapes.clear()
    kernels.exact_linear(x[:3], w, None)
    assert shapes == [("linear@4", 3, 24)]
    assert torch.allclose(tiled, x @ w.T, atol=1e-5)  # tiles and padding change no value


def test_tiled_linear_keeps_each_rows_bits_whatever_the_row_count() -> None:
    """Rows of a 1..20-row tiled product, with a bias and extra leading axes, equal the same
    rows in a 20-row product, bit for bit, and the values are the product's."""
    gen = torch.Generator().manual_seed(3)
    w, b = torch.randn(48, 40, generator=gen), torch.randn(48, generator=gen)
    x = torch.randn(1, 20, 40, generator=gen)
    tile = Form("linear", 4)
    whole = kernels.tiled_linear(tile, x, w, b)  # (1, 20, 48)
    assert whole.shape == (1, 20, 48)
    assert torch.allclose(whole, x @ w.T + b, atol=1e-5)
    for n in range(1, 21):
        start = 20 - n
        part = kernels.tiled_linear(tile, x[:, start:], w, b)
        assert torch.equal(part, whole[:, start:])
    row_by_row = kernels.tiled_linear(kernels.ROW_BY_ROW, x, w, b)
    assert torch.allclose(row_by_row, whole, atol=1e-5)


def spy_on_run_form(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the form of every call of `run_form` (which still answers)."""
    calls: list[str] = []
    real = kernels.run_form

    def spy(form: Form, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        calls.append(str(form))
        return real(form, x, w, b)

    monkeypatch.setattr(kernels, "run_form", spy)
    return calls


def test_one_row_split_shortcut_gives_run_forms_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """`exact_linear` runs a one-row ``split`` without `run_form`; it must give `run_form`'s
    exact bits (random float32, so any other operand layout or order shows in the rounding),
    leave padded and many-row products to `run_form`, and still refuse an odd output count."""
    gen = torch.Generator().manual_seed(5)
    w, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    kernels.use_table(KernelTable({(96, 64, torch.float32, r): Form("split") for r in (1, 2)}))
    for shape in ((64,), (1, 64), (1, 1, 64)):
        x = torch.randn(shape, generator=gen)
        for bias in (None, b):
            want = kernels.run_form(Form("split"), x, w, bias)
            got = kernels.exact_linear(x, w, bias)
            assert got.shape == want.shape == (*shape[:-1], 96)
            assert torch.equal(got, want), (shape, bias is None)
    wide = torch.randn(1, 1, 128, generator=gen)[..., ::2]  # one row, not contiguous
    real_run_form = kernels.run_form
    calls = spy_on_run_form(monkeypatch)
    kernels.exact_linear(torch.randn(1, 1, 64), w, None)
    assert calls == []  # the shortcut
    assert torch.equal(
        kernels.exact_linear(wide, w, None), real_run_form(Form("split"), wide, w, None)
    )
    kernels.exact_linear(torch.randn(1, 2, 64), w, None)
    assert calls == ["split", "split"]  # a strided row and two rows go through run_form
    kernels.use_table(KernelTable({(41, 64, torch.float32, 1): Form("split")}))
    with pytest.raises(ValueError, match="'split' needs an even number of outputs, got 41"):
        kernels.exact_linear(torch.randn(1, 64), torch.randn(41, 64), None)


@needs_packed
def test_packed_shortcut_gives_run_forms_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """`exact_linear` runs an unpadded ``packed`` product on an already packed, unchanged weight
    without `run_form`; it must give `run_form`'s exact bits, with and without bias, for any
    leading shape and a strided input, and hand back to `run_form` when the weight is not packed
    yet, was changed in place, or the input is in another dtype (which `run_form` refuses)."""
    gen = torch.Generator().manual_seed(6)
    w, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    rows = range(1, 6)
    kernels.use_table(KernelTable({(96, 64, torch.float32, r): Form("packed") for r in rows}))
    real_run_form = kernels.run_form
    calls = spy_on_run_form(monkeypatch)
    kernels.exact_linear(torch.randn(2, 64, generator=gen), w, None)
    assert calls == ["packed"]  # the first call packs the weight
    wide = torch.randn(1, 3, 128, generator=gen)[..., ::2]  # three rows, not contiguous
    for x in (torch.randn(4, 64, generator=gen), torch.randn(1, 5, 64, generator=gen), wide):
        for bias in (None, b):
            want = real_run_form(Form("packed"), x, w, bias)
            got = kernels.exact_linear(x, w, bias)
            assert got.shape == want.shape == (*x.shape[:-1], 96)
            assert torch.equal(got, want), (tuple(x.shape), bias is None)
    assert calls == ["packed"]  # the shortcut, every time
    w.mul_(-1)  # changed in place: packed again, by run_form
    x = torch.randn(3, 64, generator=gen)
    torch.testing.assert_close(kernels.exact_linear(x, w, None), x @ w.T)
    assert calls == ["packed", "packed"]
    kernels.use_table(KernelTable({(96, 64, torch.float64, 3): Form("packed")}))
    with pytest.raises(ValueError, match="'packed' needs a CPU build .* got torch.float64 on cpu"):
        kernels.exact_linear(x.double(), w, None)


def test_bad_forms_are_refused() -> None:
    for text in ("gemv", "wxt@1", "linear@17", "wxt@x", "@4", "split@0"):
        with pytest.raises(ValueError, match="kernel form"):
            Form.parse(text)
    with pytest.raises(ValueError, match="'split' needs an even number of outputs, got 41"):
        kernels.run_form(Form("split"), torch.randn(2, 24), torch.randn(41, 24), None)
    assert Form.parse("wxt@16") == Form("wxt", 16) and str(Form("linear", 3)) == "linear@3"
    assert Form.parse("packed@4") == Form("packed", 4)
    with pytest.raises(ValueError, match="'packed' needs a CPU build .* got torch.float64 on cpu"):
        kernels.run_form(Form("packed"), torch.randn(2, 24).double(), torch.randn(40, 24), None)
    meta = torch.empty(2, 24, device="meta")
    with pytest.raises(ValueError, match="'packed' needs .* got torch.float32 on meta"):
        kernels.run_form(Form("packed"), meta, torch.empty(40, 24, device="meta"), None)
    assert not kernels.packed_available(torch.float16)


@needs_packed
def test_packed_weight_is_made_once_and_follows_its_weight() -> None:
    """The packed copy is reused while its weight is unchanged, re-made after the weight is
    changed in place or replaced, and forgotten when the weight is freed."""
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(40, 24, generator=gen)
    x = torch.randn(3, 24, generator=gen)
    first = kernels.packed_weight(w)
    assert kernels.packed_weight(w) is first
    torch.testing.assert_close(kernels.run_form(Form("packed"), x, w, None), x @ w.T)
    w.mul_(2)  # in place: the version counter moves
    assert kernels.packed_weight(w) is not first
    torch.testing.assert_close(kernels.run_form(Form("packed"), x, w, None), x @ w.T)
    w.data = torch.randn(40, 24, generator=gen)  # replaced: the storage moves
    torch.testing.assert_close(kernels.run_form(Form("packed"), x, w, None), x @ w.T)
    key = id(w)
    assert key in kernels._PACKED
    del w
    assert key not in kernels._PACKED
    with torch.inference_mode():  # an inference tensor has no version counter to read
        frozen = torch.randn(40, 24, generator=gen)
    torch.testing.assert_close(kernels.run_form(Form("packed"), x, frozen, None), x @ frozen.T)


@needs_packed
def test_packed_rows_do_not_depend_on_their_neighbours() -> None:
    """Padding rows and the other rows of a tree change nothing in a row's result: the same
    row count gives the same row bit for bit whatever sits beside it."""
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(96, 64, generator=gen)
    for rows in (2, 5, 8):
        x = torch.randn(rows, 64, generator=gen)
        y = x.clone()
        y[1:] = torch.randn(rows - 1, 64, generator=gen)
        a = kernels.run_form(Form("packed"), x, w, None)
        b = kernels.run_form(Form("packed"), y, w, None)
        assert torch.equal(a[0], b[0]), rows


def _tiny_model() -> Transformer:
    model = Transformer(tiny_llama(vocab_size=32, max_seq_len=128))
    return random_init_(model.to(torch.float64), seed=3)


def _forcing_table(model: Transformer) -> KernelTable:
    """Non-default forms for every shape and row count: transposed, padded, or both."""
    table = KernelTable()
    for o, i in model_shapes(model):
        for r in range(1, kernels.MAX_ROWS + 1):
            base = "wxt" if r % 2 else "linear"
            pad = min(kernels.MAX_ROWS, r + 1 + r % 3) if r % 4 != 0 else 0
            table.forms[(o, i, torch.float64, r)] = Form(base, pad if pad > r else 0)
    return table


class _RecordingForms(dict):  # type: ignore[type-arg]
    def __init__(self, forms: dict) -> None:  # type: ignore[type-arg]
        super().__init__(forms)
        self.asked: set[tuple[int, int, torch.dtype, int]] = set()

    def get(self, key, default=None):  # type: ignore[no-untyped-def, override]
        self.asked.add(key)
        return super().get(key, default)


def test_naive_loop_drafts_and_verification_share_the_table() -> None:
    """Under a table of non-default forms, every plain forward of the naive loop, the drafts
    and the verifier asks the table (1 row and tree sizes), and greedy decoding still equals AR
    (float64: the forms' rounding differences are far below any margin here). The target's
    shape-invariant forwards ask the table's tiles instead (`test_an_invariant_tile_...`)."""
    model = _tiny_model()
    model.shape_invariant = False
    shapes = model_shapes(model)
    c = model.config
    kv = c.n_kv_heads * c.head_dim
    # q/o, k/v, gate/up, down, and the tied head (vocab x d_model)
    assert shapes == {
        (c.d_model,) * 2,
        (kv, c.d_model),
        (c.d_ff, c.d_model),
        (c.d_model, c.d_ff),
        (c.vocab_size, c.d_model),
    }
    table = _forcing_table(model)
    recording = _RecordingForms(table.forms)
    kernels.use_table(KernelTable(recording))
    prompt = [3, 5, 7, 9, 3, 5, 7, 11, 3, 5]
    want = generate_ar(model, prompt, 24).tokens
    ar_rows = {r for _, _, _, r in recording.asked}
    assert 1 in ar_rows and {(o, i) for o, i, _, _ in recording.asked} == shapes
    recording.asked.clear()
    n = model.config.n_layers
    drafts = (ExecutionPlan(exit_after=n - 1, name="exit"),)
    for method in ("pld", "cas-spec"):
        got = generate_speculative(model, prompt, 24, method=method, drafts=drafts).tokens
        assert got == want, method
    assert any(r > 1 for _, _, _, r in recording.asked)  # verify forwards of several rows


def test_hot_path_weights_are_the_parameters_collected_once() -> None:
    model = _tiny_model()
    w = model.weights_in(torch.float64)
    assert model.weights_in(torch.float64) is w
    assert w.norm.weight is model.norm.weight  # no copy in the model's own dtype
    assert w.layers[1].attn.q.weight is model.layers[1].attn.q.weight
    model.to(torch.float32)  # .to() drops the collected weights
    w32 = model.weights_in(torch.float32)
    assert w32 is not w and w32.norm.weight.dtype == torch.float32


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_greedy_equals_ar_under_non_default_forms() -> None:
    """SmolLM2-135M, float32: with a fixed table of transposed, padded and (past 4 rows)
    packed forms (the kind the calibration picks on CPUs with a slow few-row ``F.linear``),
    the speculative methods still equal the naive loop token for token on 4 prompts x 32
    tokens (deterministic; it depends on the greedy path's top-1 margins, like
    tests/test_speculative.py's real-model test)."""
    from casspec_ref.io.weights import load_model

    if os.environ.get("CASSPEC_SKIP_REAL") == "1":
        pytest.skip("CASSPEC_SKIP_REAL=1")
    try:
        model, tokenizer = load_model()
    except FileNotFoundError as err:
        pytest.skip(str(err))
    assert tokenizer is not None
    table = KernelTable()
    for o, i in model_shapes(model):
        for r in range(1, kernels.MAX_ROWS + 1):
            pad = {1: 2, 3: 4, 7: 8}.get(r, 0)
            packed = r > 4 and kernels.packed_available(torch.float32)
            table.forms[(o, i, torch.float32, r)] = Form("packed" if packed else "wxt", pad)
    kernels.use_table(table)
    questions = [
        "What is the capital of France?",
        "Summarize: The cat sat on the mat. The cat was happy. The mat was red.",
        "Write a Python function that adds two numbers.",
        "Count from 1 to 10.",
    ]
    for i, question in enumerate(questions):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}])
        want = generate_ar(model, prompt, 32).tokens
        method = ("cas-spec", "pld")[i % 2]
        assert generate_speculative(model, prompt, 32, method=method).tokens == want, question


def test_a_target_forward_pads_its_rows_once_not_in_every_product(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With tiles of 4 rows, a one-row target forward pads its rows once (`row_multiple`): every
    body product is one whole tile, and only the LM head, which runs the real rows, pads its
    own. Every call is of 4 rows. A plain forward pads nothing. The logits are the same bits as
    a forward that pads in every product."""
    model = random_init_(Transformer(tiny_llama(max_seq_len=64)), seed=2)
    table = KernelTable()
    for o, i in model_shapes(model):
        table.invariant[(o, i, torch.float32)] = Form("linear", 4)
    kernels.use_table(table)
    assert kernels.row_multiple(torch.float32) == 4 and kernels.row_multiple(torch.bfloat16) == 1
    table.invariant[(1, 2, torch.float32)] = Form("wxt", 8)  # a larger tile pads its own
    assert kernels.row_multiple(torch.float32) == 4
    padded, rows = [], []
    real_zeros, real_apply = kernels._zeros, kernels.apply_form
    monkeypatch.setattr(kernels, "_zeros", lambda *a: padded.append(a) or real_zeros(*a))
    monkeypatch.setattr(
        kernels, "apply_form", lambda f, x, w, b: rows.append(x.shape[0]) or real_apply(f, x, w, b)
    )
    token = torch.tensor([[5]])
    once = model(token)
    assert len(padded) == 1 and set(rows) == {4}
    padded.clear()
    model.shape_invariant = False
    model(token)
    assert padded == []
    model.shape_invariant = True
    monkeypatch.setattr(model_module, "row_multiple", lambda dtype: 1)  # pad in every product
    every_product = model(token)
    assert len(padded) == 1 + 7 * model.config.n_layers
    assert torch.equal(once, every_product)
