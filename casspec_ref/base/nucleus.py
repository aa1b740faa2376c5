"""Top-p (nucleus) selection, bit for bit as a full sort decides it, without sorting the vocabulary.

The rule `casspec_ref.sampling.target_law` applies: order the probabilities from largest to
smallest, equal ones by increasing token id (a stable sort); a token is kept when the *mass before
it* (the cumulative sum up to and including it, minus itself) is below ``top_p``. Written directly
(`keep_by_full_sort`), that sorts all V = 49,152 float64 probabilities of SmolLM2 per row: a few
milliseconds on a CPU, a quarter of a forward, paid by the naive loop once per token and by a
verify forward once per tree node. Only the head of the order can be kept, so on the CPU
`top_p_keep` sorts a head:

1. ``tau``, the k-th largest probability (``torch.topk``), picks the candidates ``C = {i : p_i >=
   tau}``, ties at ``tau`` included. They are exactly the first ``|C|`` places of the full order,
   and a stable sort of ``C`` (listed by increasing id) puts them in the same order.
2. The CPU's ``torch.cumsum`` adds left to right, so the cumulative sums over ``C`` are the first
   ``|C|`` of the full ones, bit for bit: every candidate gets the same decision.
3. A token after ``C`` has a cumulative sum before it of at least ``c``, the last one over ``C``
   (adding non-negative numbers never rounds down below the running sum); its mass before is
   that minus two roundings of at most half a unit in the last place of a number below 2, so at
   least ``c - 2**-52``. If ``c >= top_p + 2**-50``, the full sort keeps none of them either.
   Otherwise ``k`` grows eightfold; past a quarter of V the full sort runs.

The first head is taken for all rows of a tree at once (`_keep_heads`: one ``topk``, one sort,
one ``cumsum`` over an (N, k) block, whose rows the CPU adds left to right as it adds a single
row): per row, its ten small operations over V cost ~0.5 ms, a quarter of a 16-row verify
forward's time. A row whose head holds a tie at ``tau`` beyond ``k`` tokens, or falls short of
``top_p``, is then done alone by the loop above.

On other devices ``torch.cumsum`` is a parallel scan whose rounding may depend on the length, and
sorting is cheap: the full sort runs there.
"""

from __future__ import annotations

import torch

#: The first head size tried (a nucleus of top-p 0.9 is usually far smaller).
FIRST_HEAD = 256
#: How far the head's cumulative sum must pass top_p before the tail can be ignored (see 3.).
MARGIN = 2.0**-50


def keep_by_full_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The rule itself: a stable descending sort of each row (..., V); bool mask of kept tokens."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # (..., V)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # (..., V)
    keep_sorted = mass_before < top_p
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def _keep_row(row: torch.Tensor, top_p: float, k: int) -> torch.Tensor:
    """`keep_by_full_sort` of one CPU row (V,), sorting a head of ``k`` or more of it."""
    while k * 4 <= row.shape[0]:  # a head of over a quarter of V: sort it all
        tau = torch.topk(row, k, sorted=False).values.min()
        ids = torch.nonzero(row >= tau).squeeze(-1)  # (|C|,) increasing ids
        head, order = torch.sort(row[ids], descending=True, stable=True)  # (|C|,)
        cumulative = torch.cumsum(head, dim=0)  # (|C|,)
        if float(cumulative[-1]) >= top_p + MARGIN:
            keep = torch.zeros(row.shape, dtype=torch.bool)
            keep[ids[order]] = (cumulative - head) < top_p
            return keep
        k *= 8
    return keep_by_full_sort(row, top_p)


def _keep_heads(rows: torch.Tensor, top_p: float, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`_keep_row`'s first step for all rows (N, V) at once: the keep mask of every row its top
    ``k`` decide, and which rows those are (N,) (none when ``k`` is over a quarter of V)."""
    n, v = rows.shape
    if k * 4 > v:
        return torch.zeros(rows.shape, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
    values, ids = torch.topk(rows, k, dim=-1, sorted=False)  # (N, k)
    tau = values.min(dim=-1, keepdim=True).values  # (N, 1)
    untied = (rows >= tau).sum(dim=-1) == k  # (N,): the head is all of C, no tie beyond it
    ids = ids.sort(dim=-1).values  # (N, k) increasing ids, as `nonzero` lists C
    head, order = torch.sort(rows.gather(-1, ids), dim=-1, descending=True, stable=True)
    cumulative = torch.cumsum(head, dim=-1)  # (N, k), each row left to right
    decided = untied & (cumulative[:, -1] >= top_p + MARGIN)  # (N,)
    keep = torch.zeros(rows.shape, dtype=torch.bool)
    keep.scatter_(-1, ids.gather(-1, order), (cumulative - head) < top_p)
    return keep, decided


def top_p_keep(probs: torch.Tensor, top_p: float, first_head: int = FIRST_HEAD) -> torch.Tensor:
    """Which tokens top-p keeps, per row of ``probs`` (..., V) (float64, rows summing to ~1):
    a bool tensor of the same shape, equal to `keep_by_full_sort`'s bit for bit. ``first_head``:
    the first head size tried (the module docstring)."""
    if probs.device.type != "cpu" or probs.numel() == 0:
        return keep_by_full_sort(probs, top_p)
    rows = probs.reshape(-1, probs.shape[-1])  # (N, V)
    keep, decided = _keep_heads(rows, top_p, first_head)
    for r in torch.nonzero(~decided).flatten().tolist():  # rows the first head cannot decide
        keep[r] = _keep_row(rows[r], top_p, first_head)
    return keep.reshape(probs.shape)
