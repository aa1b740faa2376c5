"""Stop-19 variants of DyTC, replayed with timing noise through stop 18's harness
(`../../s18/scratch/noisy_replay.py`). Usage: variants19.py RECORD COSTS [variant ...]."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
import noisy_replay as NR
from casspec_ref.dytc import DyTCPolicy, FREE_DRAFTS, Expansion

def receding(policy):
    """Plan a model chain of k tokens by the EWIF, draft only its first, then plan again with
    that token's confidence known (the next plan sees the leaf's reach)."""
    orig = DyTCPolicy.plan
    def plan(self, drafter, tree, drafts):
        best = orig(self, drafter, tree, drafts)
        if best is not None and best.draft not in FREE_DRAFTS and best.k > 1:
            best = Expansion(best.leaf, best.draft, 1, best.width, best.predicted_ewif)
        return best
    DyTCPolicy.plan = plan
    return lambda: setattr(DyTCPolicy, "plan", orig)

NR.VARIANTS["receding"] = receding
import dataclasses
def with_config(**kw):
    def patch(policy):
        policy.config = dataclasses.replace(policy.config, **kw)
        return lambda: None
    return patch
for w in (0.0, 0.25, 0.75):
    NR.VARIANTS[f"w{w}"] = with_config(confidence_weight=w)
def main():
    import statistics
    recs, costs, levels = NR.load(sys.argv[1], sys.argv[2])
    # STEP_OVERHEAD / DRAFT_OVERHEAD (seconds) replace the replay's defaults (3 ms, 1 ms).
    costs.step_overhead = float(os.environ.get("STEP_OVERHEAD", costs.step_overhead))
    costs.draft_overhead = float(os.environ.get("DRAFT_OVERHEAD", costs.draft_overhead))
    ar = sum(NR.R.replay(recs, costs).seconds.values())
    for variant in sys.argv[3:] or ["shipped"]:
        sp = []
        for seed in [-1, *range(NR.SEEDS)]:
            r, _ = NR.run(recs, costs, levels, seed, variant)
            sp.append(ar / sum(r.seconds.values()))
        n = sp[1:]
        print(f"{variant:14s} noiseless {sp[0]:.3f} | noisy median {statistics.median(n):.3f} "
              f"min {min(n):.3f} max {max(n):.3f}", flush=True)

from casspec_ref.tools.replay import ReplayDrafter
from casspec_ref.dytc import outcome_name, AcceptanceEstimator, PLD, RECYCLE
BINS = (0.3, 0.5, 0.7, 0.9)
def _bin(p):
    return sum(p >= b for b in BINS)
MBINS = (0.02, 0.05, 0.1, 0.2)
FEATURE = {"conf": lambda ids, probs, j: sum(probs[j] >= b for b in BINS),
           "margin": lambda ids, probs, j: sum(probs[0] - probs[1] >= b for b in MBINS)}
def calibrated(policy, feature="conf", recycle_bins=False):
    """A model-drafted chain node's estimate is its draft's estimate for the confidence bin of
    its token (learned online, one estimator per draft and bin), not w conf + (1 - w) alpha."""
    o_prop, o_ver, o_rec, o_obs, o_exp = (ReplayDrafter.propose_children, ReplayDrafter.verify,
                                   DyTCPolicy._record, DyTCPolicy.observe_step, ReplayDrafter.expand)
    def expand(self, node, draft, k, width):
        out = o_exp(self, node, draft, k, width)
        if recycle_bins and draft == RECYCLE:
            conf = self.__dict__.setdefault("_conf", {})
            for child, _, p in out:
                conf[child] = "c%d" % _bin(p if p is not None else 1.0)
            BIN_OF.update(conf)
        return out
    def propose_children(self, level, node, count):
        out = o_prop(self, level, node, count)
        conf = self.__dict__.setdefault("_conf", {})
        ids, probs = self.rec.drafts[level][0][min(self.index[node] + 1, len(self.rec.drafts[level][0]) - 1)], self.rec.drafts[level][1][min(self.index[node] + 1, len(self.rec.drafts[level][1]) - 1)]
        for j, (child, p) in enumerate(out):
            conf[child] = FEATURE[feature](ids, probs, j)
        BIN_OF.update(conf)
        return out
    def verify(self):
        acc, tested = o_ver(self)
        conf = self.__dict__.get("_conf", {})
        # rename: walk the same order as o_ver to attach nodes; recompute
        answer, node, out = self.rec.answer, 0, []
        while True:
            nxt = None
            for child in self.children[node]:
                i = self.index[child]
                ok = i < len(answer) and self.tokens[child] == answer[i]
                if self.primary[child]:
                    name = outcome_name(self.source[child], self.source[node], self.match(node))
                    if child in conf and (name == self.source[child] and name not in FREE_DRAFTS or recycle_bins and self.source[child] == RECYCLE):
                        name = f"{name}@{conf[child]}"
                    out.append((name, ok))
                nxt = child if ok and nxt is None else nxt
            if nxt is None:
                break
            node = nxt
        return acc, out
    def est(self, name):
        if name not in self.alpha:
            cfg = self.config
            self.alpha[name] = AcceptanceEstimator(cfg.prior_alpha, weight=cfg.ema_weight, window=cfg.window, warmup=cfg.warmup)
        return self.alpha[name]
    def _record(self, tree, draft, added, match=0):
        has_child = set()
        for node, parent, confidence in added:
            name = outcome_name(draft, tree.drafts[parent], match)
            alpha = self.alpha[name].alpha
            if parent in has_child:
                per_token = (confidence if confidence is not None else 1.0) * alpha
            elif confidence is None or (name != draft or draft in FREE_DRAFTS) and not (recycle_bins and draft == RECYCLE):
                per_token = alpha
            else:
                per_token = est(self, f"{draft}@{BIN_OF[node]}").alpha
            has_child.add(parent)
            tree.add(node, parent, per_token, draft)
    def observe_step(self, tested, tokens, seconds, timings):
        for name, _ in tested:
            if "@" in name:
                est(self, name)
        tested = [*tested, *((n.split("@")[0], ok) for n, ok in tested if "@" in n)]
        return o_obs(self, tested, tokens, seconds, timings)
    ReplayDrafter.propose_children, ReplayDrafter.verify, ReplayDrafter.expand = propose_children, verify, expand
    DyTCPolicy._record, DyTCPolicy.observe_step = _record, observe_step
    def undo():
        ReplayDrafter.propose_children, ReplayDrafter.verify, ReplayDrafter.expand = o_prop, o_ver, o_exp
        DyTCPolicy._record, DyTCPolicy.observe_step = o_rec, o_obs
    return undo
BIN_OF = {}
NR.VARIANTS["calibrated"] = calibrated
NR.VARIANTS["margin"] = lambda p: calibrated(p, "margin")
NR.VARIANTS["margin+receding"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding)(p)

def _mr(**kw):
    return lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, with_config(**kw))(p)
NR.VARIANTS["mr_sib1"] = _mr(siblings=1)
NR.VARIANTS["mr_tree16"] = _mr(max_tree_size=16)
NR.VARIANTS["mr_gain1.02"] = _mr(min_gain=1.02)
NR.VARIANTS["sib1"] = with_config(siblings=1)
NR.VARIANTS["tree16"] = with_config(max_tree_size=16)
NR.VARIANTS["receding_tree16"] = lambda p: NR.both(receding, with_config(max_tree_size=16))(p)
NR.VARIANTS["margin_tree16"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), with_config(max_tree_size=16))(p)
def only(*names):
    """DyTC offered only `names` (patches grow's draft list)."""
    def patch(policy):
        orig = DyTCPolicy.grow
        def grow(self, drafter, drafts):
            return orig(self, drafter, [d for d in drafts if d in names])
        DyTCPolicy.grow = grow
        return lambda: setattr(DyTCPolicy, "grow", orig)
    return patch
NR.VARIANTS["int8+pld"] = only("w8a8-fast", "pld")
NR.VARIANTS["mr_int8+pld"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, only("w8a8-fast", "pld"))(p)
NR.VARIANTS["mr_int8+pld+rec"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, only("w8a8-fast", "pld", "recycle"))(p)
def recycle_last(policy):
    """Grow without recycled tokens first; they may extend the finished tree's leaves only."""
    orig = DyTCPolicy.plan
    def plan(self, drafter, tree, drafts):
        first = orig(self, drafter, tree, [d for d in drafts if d != RECYCLE])
        return first if first is not None or RECYCLE not in drafts else orig(self, drafter, tree, drafts)
    DyTCPolicy.plan = plan
    return lambda: setattr(DyTCPolicy, "plan", orig)
NR.VARIANTS["recycle_last"] = recycle_last
NR.VARIANTS["mr_recycle_last"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, recycle_last)(p)
NR.VARIANTS["mr_no_search"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, only("w8a8-fast", "pld", "recycle"))(p)
NR.VARIANTS["mr_rl_no_search"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, recycle_last, only("w8a8-fast", "pld", "recycle"))(p)

NR.VARIANTS["mr_recbins"] = lambda p: NR.both(lambda q: calibrated(q, "margin", True), receding)(p)
NR.VARIANTS["mr_recbins_no_search"] = lambda p: NR.both(lambda q: calibrated(q, "margin", True), receding, only("w8a8-fast", "pld", "recycle"))(p)

NR.VARIANTS["no_recycle"] = only("w8a8-fast", "search-0.3+w8a8-fast", "pld")
NR.VARIANTS["no_search"] = only("w8a8-fast", "pld", "recycle")
NR.VARIANTS["mr_no_recycle"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), receding, only("w8a8-fast", "search-0.3+w8a8-fast", "pld"))(p)

NR.VARIANTS["m_no_recycle"] = lambda p: NR.both(lambda q: calibrated(q, "margin"), only("w8a8-fast", "search-0.3+w8a8-fast", "pld"))(p)
NR.VARIANTS["r_no_recycle"] = lambda p: NR.both(receding, only("w8a8-fast", "search-0.3+w8a8-fast", "pld"))(p)

def recycle_not_below_model(policy):
    """Recycled tokens may not extend a model-drafted leaf (that chain is the model's)."""
    orig = ReplayDrafter.offers
    def offers(self, node, draft):
        if draft == RECYCLE and self.source[node] not in ("root", PLD, RECYCLE):
            return 0
        return orig(self, node, draft)
    ReplayDrafter.offers = offers
    return lambda: setattr(ReplayDrafter, "offers", orig)
NR.VARIANTS["rec_not_below_model"] = recycle_not_below_model

def free_no_warmup(policy):
    """Free drafts' estimates start at their priors, without warm-up optimism."""
    cfg = policy.config
    for name, e in list(policy.alpha.items()):
        if NR_pooled(name) in FREE_DRAFTS or name in ("pld+", "recycle+"):
            policy.alpha[name] = AcceptanceEstimator(e.prior, weight=cfg.ema_weight, window=cfg.window, warmup=0)
    return lambda: None
def NR_pooled(name):
    return name.split("#")[0].split("@")[0]
NR.VARIANTS["free_no_warmup"] = free_no_warmup
NR.VARIANTS["free_no_warmup_no_recycle"] = lambda p: NR.both(free_no_warmup, only("w8a8-fast", "search-0.3+w8a8-fast", "pld"))(p)

import casspec_ref.dytc as DY
def no_tsk_cap(policy):
    """k up to the room for model drafts too: the EWIF alone picks k (no T(S,k) cap)."""
    orig = DY.best_k
    DY.best_k = lambda a, c, ap, cp, cv: len(cv)
    def undo():
        DY.best_k = orig
    return undo
NR.VARIANTS["no_tsk_cap"] = no_tsk_cap

def free_warmup(policy):
    """Stop 18's priors for free drafts: warm-up optimism like a model draft's (to isolate the
    margin estimates in the final package code)."""
    cfg = policy.config
    for name, e in list(policy.alpha.items()):
        if NR_pooled(name).rstrip("+") in FREE_DRAFTS:
            policy.alpha[name] = AcceptanceEstimator(e.prior, weight=cfg.ema_weight, window=cfg.window, warmup=cfg.warmup)
    return lambda: None
NR.VARIANTS["free_warmup"] = free_warmup
NR.VARIANTS["free_warmup_no_receding"] = lambda p: NR.both(free_warmup, lambda q: _no_receding(q))(p)
def _no_receding(policy):
    orig = DyTCPolicy.margins_known
    DyTCPolicy.margins_known = lambda self, d: False
    return lambda: setattr(DyTCPolicy, "margins_known", orig)
NR.VARIANTS["no_receding"] = _no_receding

def mixture(policy):
    """A model draft's next (undrafted) token valued by its margin bins' estimates, weighted by
    how often each bin was seen, instead of the pooled 20-outcome EMA (once margins are known)."""
    orig = DyTCPolicy.chain_tokens
    def mix(self, draft):
        bins = [self.alpha[f"{draft}@{b}"] for b in range(5)]
        n = sum(e.count for e in bins)
        return sum(e.count * e.alpha for e in bins) / n
    def chain_tokens(self, draft, k, below="", match=0):
        if draft in FREE_DRAFTS or not self.margins_known(draft):
            return orig(self, draft, k, below, match)
        a = mix(self, draft)
        return a * (1.0 + DY.geometric_tokens(a, k - 1))
    DyTCPolicy.chain_tokens = chain_tokens
    return lambda: setattr(DyTCPolicy, "chain_tokens", orig)
NR.VARIANTS["mixture"] = mixture

if __name__ == "__main__":
    main()
