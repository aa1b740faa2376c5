"""Replay (scratch, stop 17): DyTC with prompt lookup's 1-token matches off (min_ngram 2)."""
from common import load
import sys
from casspec_ref.tools import replay as R
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTCPolicy
recs, costs, levels = load(sys.argv[1], sys.argv[2])
ar = R.replay(recs, costs)
for name, look in [("cas-spec", None), ("cas-spec, lookup min_ngram 2", PromptLookupConfig(min_ngram=2)), ("cas-spec, lookup min_ngram 3", PromptLookupConfig(min_ngram=3))]:
    pol = DyTCPolicy(levels)
    r = R.replay(recs, costs, policy=pol, lookup=look)
    print(f"{name:32s} {sum(ar.seconds.values()) / sum(r.seconds.values()):.3f}", flush=True)
