"""Chain speculative sampling from scratch, in one file, with an exact check of its output law.

Lecture 0 of the tutorials (read it with 00_speculative_sampling_in_one_file.ipynb). Nothing here
imports casspec_ref: the "models" are two tables of next-token laws over a 3-token vocabulary (a
bigram model: the law of the next token depends on the last token only), written as exact
fractions so that "the same law" can be checked with ``==``.

- `speculative_generate`: the draft proposes k tokens from q, the target scores all k + 1
  positions at once (in a real model: one forward), each drafted token x is kept with probability
  min(1, p(x)/q(x)); at the first rejection a token is drawn from the residual norm(max(p - q, 0));
  if all k are kept, a bonus token is drawn from p (Leviathan et al. 2023; Chen et al. 2023).
- `exact_law`: runs a sampler once per outcome of its random draws (depth-first), multiplying
  their probabilities, so it returns the law of the output exactly, with no sampling noise.
- `ar_law`: the law of plain autoregressive sampling, computed directly. Lossless means
  ``exact_law(speculative) == ar_law``.
- ``bug="bonus_from_q"``: one deliberate bug (the bonus token drawn from the draft's law).
- `expected_tokens`: the mean number of tokens a step commits when acceptance does not depend on
  the context, (1 - a^(k+1)) / (1 - a) with a = 1 - TV(p, q), checked by enumeration below.
- `sharpen` and `greedy`: the tables at temperature 1/m, and their limit m -> infinity (argmax),
  where speculative sampling becomes greedy speculative decoding.
"""

from __future__ import annotations

import random
from fractions import Fraction as F

VOCAB = 3


def table(rows):
    """Integer weights -> a table of exact next-token laws (one row per previous token)."""
    return [[F(w, sum(row)) for w in row] for row in rows]


TARGET = table([[5, 3, 2], [1, 6, 3], [4, 1, 5]])  # p(next | last)
# q(next | last): a rougher version of p. In every row p exceeds q at two tokens, by different
# amounts, so the residual's normalization matters (a one-hot residual is wrong).
DRAFT = table([[2, 2, 6], [1, 8, 11], [5, 1, 14]])


class Coins:
    """Random draws from Python's seeded generator (what a real run uses)."""

    def __init__(self, seed):
        self.gen = random.Random(seed)

    def categorical(self, law):
        u, total = self.gen.random(), 0
        for token, prob in enumerate(law):
            total += prob
            if u < total:
                return token
        return max(t for t, prob in enumerate(law) if prob > 0)  # u rounded past the last bin


def bernoulli(coins, prob):
    """True with probability ``prob``, drawn through the one categorical primitive."""
    return coins.categorical([1 - prob, prob]) == 1


def residual(p, q):
    """The law of the replacement after a rejection: norm(max(p - q, 0))."""
    excess = [max(pi - qi, 0) for pi, qi in zip(p, q, strict=True)]
    mass = sum(excess)  # = 1 - sum(min(p, q)) = the probability of a rejection
    return [e / mass for e in excess]


def speculative_step(last, k, coins, residual=residual, bug=None, target=TARGET, draft=DRAFT):
    """One speculative step after token ``last``: returns the tokens it commits (1 to k + 1)."""
    drafted, qs, context = [], [], last
    for _ in range(k):  # the draft proposes k tokens, one after another, from its own law q
        q = draft[context]
        x = coins.categorical(q)
        drafted.append(x)
        qs.append(q)
        context = x
    # The target's law at each of the k + 1 positions: a real model gets all of them in one
    # forward over [last, *drafted], which is where the speed comes from.
    ps = [target[t] for t in [last, *drafted]]
    out = []
    for i, x in enumerate(drafted):
        p, q = ps[i], qs[i]
        if bernoulli(coins, min(F(1), p[x] / q[x])):
            out.append(x)  # accepted: keep it and test the next drafted token
        else:
            return out + [coins.categorical(residual(p, q))]  # rejected: replace, stop
    bonus_law = ps[k]  # all k kept: the target's law after them gives one more token for free
    if bug == "bonus_from_q":
        bonus_law = draft[drafted[-1]]  # BUG: the draft's law after the last token, not p's
    return out + [coins.categorical(bonus_law)]


def speculative_generate(prompt_last, n, k, coins, **step_options):
    """n tokens after ``prompt_last`` by repeated speculative steps (the last step truncated:
    a bonus token beyond position n is never emitted, so a bug in it shows only if n >= k + 1)."""
    out = []
    while len(out) < n:
        last = out[-1] if out else prompt_last
        out += speculative_step(last, k, coins, **step_options)
    return tuple(out[:n])


def ar_generate(prompt_last, n, coins):
    """Plain autoregressive sampling from the target: the law speculative sampling must keep."""
    out = [prompt_last]
    for _ in range(n):
        out.append(coins.categorical(TARGET[out[-1]]))
    return tuple(out[1:])


class Replay:
    """Coins that replay a script of outcomes, then take the first possible outcome and note the
    others as branches still to explore. ``prob`` is the probability of the path taken."""

    def __init__(self, script):
        self.script, self.used, self.prob, self.branches = script, [], F(1), []

    def categorical(self, law):
        if len(self.used) < len(self.script):
            token = self.script[len(self.used)]
        else:
            possible = [t for t, prob in enumerate(law) if prob > 0]
            token = possible[0]
            self.branches += [[*self.used, other] for other in possible[1:]]
        self.used.append(token)
        self.prob *= law[token]
        return token


def exact_law(sampler):
    """{output: probability} of ``sampler(coins)`` over every outcome of its draws, exactly."""
    law, todo = {}, [[]]
    while todo:
        coins = Replay(todo.pop())
        output = sampler(coins)
        law[output] = law.get(output, F(0)) + coins.prob
        todo += coins.branches
    return law


def ar_law(prompt_last, n, target=TARGET):
    """The law of n plain AR tokens, computed directly (a product of table entries)."""
    law = {(): F(1)}
    for _ in range(n):
        law = {
            seq + (y,): prob * target[seq[-1] if seq else prompt_last][y]
            for seq, prob in law.items()
            for y in range(VOCAB)
        }
    return law


def total_variation(a, b):
    """Half the L1 distance between two laws given as {outcome: probability}."""
    return sum(abs(a.get(key, 0) - b.get(key, 0)) for key in set(a) | set(b)) / 2


def acceptance(p, q):
    """P(a token drafted from q is kept) = sum_x min(p(x), q(x)) = 1 - TV(p, q)."""
    return sum(min(pi, qi) for pi, qi in zip(p, q, strict=True))


def expected_tokens(a, k):
    """Mean tokens per step with k drafted tokens, each kept with probability a independently:
    sum_{i=0..k} a^i (the i-th term: the first i drafts were all kept)."""
    return k + 1 if a == 1 else (1 - a ** (k + 1)) / (1 - a)


def sharpen(tab, m):
    """The table at temperature 1/m: each row raised to the power m, renormalized (exact)."""
    return table([[w**m for w in row] for row in tab])


def greedy(tab):
    """The temperature -> 0 limit of a table: all mass on each row's most likely token."""
    return [[F(int(t == row.index(max(row)))) for t in range(len(row))] for row in tab]


if __name__ == "__main__":
    n, k = 3, 2
    want = ar_law(0, n)
    got = exact_law(lambda coins: speculative_generate(0, n, k, coins))
    print(f"{len(want)} outputs of {n} tokens; speculative law == AR law: {got == want}")
    for n_bug, k_bug in [(3, 2), (2, 1), (2, 2), (1, 2), (1, 1)]:
        buggy = exact_law(
            lambda coins, n=n_bug, k=k_bug: speculative_generate(0, n, k, coins, bug="bonus_from_q")
        )
        tv = total_variation(buggy, ar_law(0, n_bug))
        print(f"bonus from q, (n, k) = ({n_bug}, {k_bug}): total variation {float(tv):.4f}")
        assert (tv > 0) == (n_bug >= k_bug + 1)  # a bonus token needs room to be emitted
    # When acceptance does not depend on the context (every row the same), the mean number of
    # tokens per step is (1 - a^(k+1)) / (1 - a), with a = 1 - TV(p, q).
    p_row, q_row = TARGET[0], DRAFT[0]
    a = acceptance(p_row, q_row)
    for k_mean in (1, 2, 3):
        lengths = exact_law(
            lambda coins, k=k_mean: len(
                speculative_step(0, k, coins, target=[p_row] * 3, draft=[q_row] * 3)
            )
        )
        mean = sum(length * prob for length, prob in lengths.items())
        print(f"a = {a}, k = {k_mean}: mean tokens per step {mean} (enumerated)")
        assert mean == expected_tokens(a, k_mean)
    # Greedy decoding is the temperature -> 0 limit: one output, the target's argmax chain.
    greedy_law = exact_law(
        lambda coins: speculative_generate(
            0, n, k, coins, target=greedy(TARGET), draft=greedy(DRAFT)
        )
    )
    greedy_ar = {out: prob for out, prob in ar_law(0, n, greedy(TARGET)).items() if prob}
    print(f"greedy: speculative outputs {list(greedy_law)}, AR outputs {list(greedy_ar)}")
    assert greedy_law == greedy_ar
    assert got == want
