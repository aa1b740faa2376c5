"""A DyTC that corrects its own forecast (not shipped; scratch): per free draft (lookup, recycled
tokens) it keeps decayed sums of the accepted nodes it predicted (its reach probabilities, before
correction) and of those accepted, and scales the estimate of a chain's first token by
f = (accepted + 5) / (predicted + 5), kept in [0.5, 1.5] (a chain's every node then scales by f
once: a continuing token's estimate is calibrated already). `CalibratedPolicy` replaces
`DyTCPolicy` where a harness makes one. Usage: python calibrated.py replay ARGS... (runs
benchmarks/dytc_replay.py with it), or import it."""
import runpy, sys
from casspec_ref import dytc
from casspec_ref.dytc import FREE_DRAFTS, DyTCPolicy, outcome_name, pooled

DECAY, PSEUDO, LOW, HIGH = 0.99, 5.0, 0.5, 1.5


class CalibratedPolicy(DyTCPolicy):
    def __post_init__(self):
        super().__post_init__()
        self.sums = {d: [0.0, 0.0] for d in FREE_DRAFTS}  # predicted (uncorrected), accepted
        self._pred = {}

    def factor(self, draft):
        if draft not in FREE_DRAFTS:
            return 1.0
        p, a = self.sums[draft]
        return min(HIGH, max(LOW, (a + PSEUDO) / (p + PSEUDO)))

    def chain_tokens(self, draft, k, below="", match=0):
        tokens = super().chain_tokens(draft, k, below, match)
        entry = outcome_name(draft, below, match) != outcome_name(draft, draft)
        return tokens * (self.factor(draft) if entry else 1.0)

    def _record(self, tree, draft, added, drafter):
        start = len(tree.parents)
        super()._record(tree, draft, added, drafter)
        f = self.factor(draft)
        if f != 1.0:
            for node, parent, _ in added:
                if tree.drafts[parent] != draft:  # a chain's first node: scale its estimate
                    tree.accept[node] *= f

    def grow(self, drafter, drafts):
        reach = super().grow(drafter, drafts)
        src = (lambda n: drafter.info[n].source) if hasattr(drafter, "info") else (lambda n: drafter.source[n])
        pred = {d: 0.0 for d in FREE_DRAFTS}
        for n, r in reach.items():
            if n > 0 and src(n) in pred:
                pred[src(n)] += r
        self._pred = {d: v / self.factor(d) for d, v in pred.items()}  # before the correction
        return reach

    def observe_step(self, tested, verify_tokens, verify_seconds, draft_timings):
        accepted = {d: 0 for d in FREE_DRAFTS}
        for name, ok in tested:
            d = pooled(name).rstrip("+")
            if ok and d in accepted:
                accepted[d] += 1
        for d in FREE_DRAFTS:
            s = self.sums[d]
            s[0] = DECAY * s[0] + self._pred.get(d, 0.0)
            s[1] = DECAY * s[1] + accepted[d]
        self._pred = {}
        super().observe_step(tested, verify_tokens, verify_seconds, draft_timings)


if __name__ == "__main__":
    dytc.DyTCPolicy = CalibratedPolicy
    import casspec_ref.tools.replay as replay
    replay.DyTCPolicy = CalibratedPolicy
    sys.argv = ["dytc_replay.py", *sys.argv[1:]]
    runpy.run_path("benchmarks/dytc_replay.py", run_name="__main__")
