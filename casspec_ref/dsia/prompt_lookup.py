"""Prompt lookup decoding (PLD): the near-free bottom draft of the cascade.

Scope: docs/method.md §2 ("PLD"). Given everything seen so far (prompt + committed tokens), take the
last ``n`` tokens, find an earlier occurrence of that n-gram, and propose the tokens that followed
it; try ``n = max_ngram`` first and fall back down to ``min_ngram``. Proposals are deterministic
(a `ChildRule.DETERMINISTIC` chain for the verifier).

Notable choices:
- Defaults follow Spec-Bench's PLD baseline: ``max_ngram = 3`` and up to 10 proposed tokens.
- Which earlier occurrence: docs/method.md says the *most recent* one (``prefer="recent"``, our
  default); the public PLD code used by Spec-Bench and by Hugging Face ``transformers`` scans
  from the start and takes the *first* one (``prefer="first"``). Both are one parameter away.
- Incremental index: one dict per n maps an n-gram to where its continuation starts. Appending a
  token registers the ``max_ngram - min_ngram + 1`` n-grams that end just before it, so an
  append costs O(max_ngram) and a proposal O(max_ngram + proposal length) whatever the context
  length (the public code rescans the whole context with ``unfold`` every step: O(context)).
- An n-gram is registered only once a token follows it, so the current suffix never matches
  itself; a match whose continuation runs into the end of the context proposes fewer tokens.
- Only appends are supported (the speculative loop only ever appends committed tokens); after a
  rollback, build a new `PromptLookup` from the kept tokens.
- Below the root of a draft tree the context is the committed tokens *followed by the path* to
  a node, which is not committed: `propose_after(path)` answers for that context without
  changing the index, searching only the few positions the index cannot know (those whose
  continuation lies on the path) directly. One implementation serves the root and every node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Prefer = Literal["recent", "first"]


@dataclass(frozen=True)
class PromptLookupConfig:
    """PLD parameters (defaults as in Spec-Bench: n = 3 down to 1, up to 10 proposed tokens)."""

    max_ngram: int = 3
    min_ngram: int = 1
    max_proposal: int = 10
    prefer: Prefer = "recent"

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(
                f"PromptLookupConfig needs 1 <= min_ngram <= max_ngram, got "
                f"min_ngram={self.min_ngram}, max_ngram={self.max_ngram}"
            )
        if self.max_proposal < 1:
            raise ValueError(
                f"PromptLookupConfig.max_proposal must be >= 1, got {self.max_proposal}"
            )
        if self.prefer not in ("recent", "first"):
            raise ValueError(
                f"PromptLookupConfig.prefer must be 'recent' or 'first', got {self.prefer!r}"
            )


@dataclass(frozen=True)
class PromptLookupMatch:
    """One PLD proposal with its evidence.

    Attributes:
        tokens: the proposed continuation (empty when no n-gram matched).
        ngram: the length of the matched suffix (0 when nothing matched); DyTC can use it as
            match evidence (a longer match is more likely to continue).
        source_start: index in the context where the copied continuation starts (-1 if none).
    """

    tokens: tuple[int, ...]
    ngram: int
    source_start: int


class PromptLookup:
    """Incrementally indexed n-gram lookup over prompt + committed tokens.

    >>> pld = PromptLookup([5, 6, 7, 8, 5, 6])
    >>> pld.propose()
    [7, 8, 5, 6]
    """

    def __init__(
        self, tokens: Iterable[int] = (), config: PromptLookupConfig | None = None
    ) -> None:
        self.config = config if config is not None else PromptLookupConfig()
        self._tokens: list[int] = []
        # _index[n][gram] = start of the continuation of an occurrence of `gram` (length n).
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(self.config.min_ngram, self.config.max_ngram + 1)
        }
        self.extend(tokens)

    @property
    def tokens(self) -> Sequence[int]:
        """The indexed context (read-only view semantics: do not mutate)."""
        return self._tokens

    def __len__(self) -> int:
        return len(self._tokens)

    def append(self, token: int) -> None:
        """Add one committed token and register the n-grams that it continues."""
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise ValueError(f"PromptLookup tokens must be non-negative ints, got {token!r}")
        i = len(self._tokens)  # the new token's index: the continuation of grams ending at i - 1
        for n, table in self._index.items():
            if i >= n:
                gram = tuple(self._tokens[i - n : i])
                if self.config.prefer == "recent":
                    table[gram] = i
                else:
                    table.setdefault(gram, i)
        self._tokens.append(token)

    def extend(self, tokens: Iterable[int]) -> None:
        """Add several committed tokens in order."""
        for token in tokens:
            self.append(int(token) if not isinstance(token, int) else token)

    def match(self, max_tokens: int | None = None) -> PromptLookupMatch:
        """The proposal for the current context, longest n-gram first."""
        limit = self.config.max_proposal if max_tokens is None else max_tokens
        if limit < 0:
            raise ValueError(f"max_tokens must be >= 0 or None, got {max_tokens}")
        size = len(self._tokens)
        for n in range(self.config.max_ngram, self.config.min_ngram - 1, -1):
            if size < n:
                continue
            start = self._index[n].get(tuple(self._tokens[size - n :]))
            if start is not None:
                return PromptLookupMatch(tuple(self._tokens[start : start + limit]), n, start)
        return PromptLookupMatch((), 0, -1)

    def propose(self, max_tokens: int | None = None) -> list[int]:
        """The proposed draft tokens (possibly empty), at most ``max_tokens`` (default: config)."""
        return list(self.match(max_tokens).tokens)

    def propose_after(self, extra: Sequence[int], max_tokens: int | None = None) -> list[int]:
        """The proposal for the context followed by `extra` (uncommitted tokens), as if they
        had been appended, without changing the index."""
        limit = self.config.max_proposal if max_tokens is None else max_tokens
        if limit < 0:
            raise ValueError(f"max_tokens must be >= 0 or None, got {max_tokens}")
        if not extra:
            return self.propose(limit)
        committed, path = self._tokens, list(extra)
        size = len(committed) + len(path)

        def at(i: int) -> int:
            return committed[i] if i < len(committed) else path[i - len(committed)]

        for n in range(self.config.max_ngram, self.config.min_ngram - 1, -1):
            if size <= n:
                continue
            gram = [at(i) for i in range(size - n, size)]
            # Continuations that start on the path are unknown to the index: search them here,
            # most recent first (or first first), then ask the index for the committed ones.
            direct = range(size - 1, max(len(committed), n) - 1, -1)
            if self.config.prefer == "first":
                direct = range(max(len(committed), n), size)
            found = next(
                (c for c in direct if all(at(c - n + j) == gram[j] for j in range(n))), None
            )
            indexed = self._index[n].get(tuple(gram))
            if self.config.prefer == "first" and indexed is not None:
                found = indexed
            elif found is None:
                found = indexed
            if found is not None:
                return [at(i) for i in range(found, min(found + limit, size))]
        return []
