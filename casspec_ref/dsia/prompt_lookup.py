"""Prompt lookup decoding (PLD, docs/method.md §2), the near-free bottom draft: find an earlier
occurrence of the context's last ``n`` tokens (n = ``max_ngram`` down to ``min_ngram``) and
propose the tokens that followed it, a deterministic chain. See docs/dsia.md."""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from casspec_ref.base.dsia_checks import check_lookup_config, check_token, proposal_limit


@dataclass(frozen=True)
class PromptLookupConfig:
    """PLD parameters (defaults as in Spec-Bench: n = 3 down to 1, up to 10 proposed tokens)."""

    max_ngram: int = 3
    min_ngram: int = 1
    max_proposal: int = 10
    prefer: Literal["recent", "first"] = "recent"  # which earlier occurrence to copy from

    def __post_init__(self) -> None:
        check_lookup_config(self.min_ngram, self.max_ngram, self.max_proposal, self.prefer)


@dataclass(frozen=True)
class PromptLookupMatch:
    """One PLD proposal with its evidence."""

    tokens: tuple[int, ...]  # the proposed continuation (empty when no n-gram matched)
    ngram: int  # the length of the matched suffix (0 when nothing matched)
    source_start: int  # where the copied continuation starts in the context (-1 if none)


class PromptLookup:
    """Incrementally indexed n-gram lookup over prompt + committed tokens (appends only)."""

    def __init__(
        self, tokens: Iterable[int] = (), config: PromptLookupConfig | None = None
    ) -> None:
        self.config = config if config is not None else PromptLookupConfig()
        self.tokens: list[int] = []  # the indexed context; grows through `append` only
        # _index[n][gram] = start of the continuation of an occurrence of `gram` (length n).
        self._index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(self.config.min_ngram, self.config.max_ngram + 1)
        }
        for token in tokens:
            self.append(int(token) if not isinstance(token, int) else token)

    def append(self, token: int) -> None:
        """Add one committed token and register the n-grams that it continues."""
        check_token(token)
        i = len(self.tokens)  # the new token's index: the continuation of grams ending at i - 1
        for n, table in self._index.items():
            if i >= n:
                gram = tuple(self.tokens[i - n : i])
                if self.config.prefer == "recent" or gram not in table:  # "first" keeps the first
                    table[gram] = i
        self.tokens.append(token)

    def match(self, max_tokens: int | None = None, extra: Sequence[int] = ()) -> PromptLookupMatch:
        """The proposal for the context plus ``extra`` (a tree path, which the index leaves out)."""
        limit = proposal_limit(max_tokens, self.config.max_proposal)
        committed, path = self.tokens, list(extra)
        size = len(committed) + len(path)

        def at(i: int) -> int:
            return committed[i] if i < len(committed) else path[i - len(committed)]

        # Longest first; the last n tokens can only occur earlier if n < size.
        for n in range(min(self.config.max_ngram, size - 1), self.config.min_ngram - 1, -1):
            gram = tuple(at(i) for i in range(size - n, size))
            found = self._index[n].get(gram)
            # The index does not know continuations that start on the path: search those here.
            # They come after every committed one: "recent" prefers them, "first" the index's.
            if path and (found is None or self.config.prefer == "recent"):
                starts = range(max(len(committed), n), size)
                if self.config.prefer == "recent":
                    starts = starts[::-1]
                hits = (c for c in starts if all(at(c - n + j) == gram[j] for j in range(n)))
                found = next(hits, found)
            if found is not None:
                tokens = tuple(at(i) for i in range(found, min(found + limit, size)))
                return PromptLookupMatch(tokens, n, found)
        return PromptLookupMatch((), 0, -1)

    def propose(self, max_tokens: int | None = None) -> list[int]:
        """The proposed draft tokens (possibly empty), at most ``max_tokens`` (default: config)."""
        return list(self.match(max_tokens).tokens)

    def propose_after(self, extra: Sequence[int], max_tokens: int | None = None) -> list[int]:
        """`propose` for the context followed by ``extra``, without changing the index."""
        return list(self.match(max_tokens, extra).tokens)
