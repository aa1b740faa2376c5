# Hand mutants of stop 19's change (run from the repository root: bash docs/bench/s19/scratch/hand_mutants.sh):
# each replaces one fragment, runs the DyTC, drafter, replay and schedule tests, restores the file.
run() {  # file, python-replace-from, python-replace-to, tests
  cp "$1" /tmp/mut_backup
  python3 - "$1" "$2" "$3" <<'PY'
import sys
p, a, b = sys.argv[1:4]
s = open(p).read()
assert s.count(a) == 1, (a, s.count(a))
open(p, "w").write(s.replace(a, b))
PY
  if timeout 300 .venv/bin/python -m pytest -q -x -p no:cacheprovider $4 > /tmp/mut_out 2>&1; then echo "SURVIVED: $2 -> $3"; else echo "killed:   $2 -> $3 ($(grep -m1 -o 'FAILED [^ ]*' /tmp/mut_out))"; fi
  cp /tmp/mut_backup "$1"
}
T="tests/test_dytc.py tests/test_draft.py tests/test_replay.py tests/test_schedules.py"
run casspec_ref/dytc.py 'bisect.bisect(MARGINS, margin)' 'bisect.bisect_left(MARGINS, margin)' "$T"
run casspec_ref/dytc.py 'if draft not in FREE_DRAFTS and margin is not None:' 'if margin is not None:' "$T"
run casspec_ref/dytc.py 'tested = [*tested, *((pooled(name), ok) for name, ok in tested if pooled(name) != name)]' 'tested = list(tested)' "$T"
run casspec_ref/dytc.py 'return any(self.alpha[n].count > 0 for n in margin_names(draft) if n in self.alpha)' 'return False' "$T"
run casspec_ref/dytc.py 'elif confidence is None or margin is not None:' 'elif confidence is None:' "$T"
run casspec_ref/dytc.py 'warmup = 0 if draft in FREE_DRAFTS else cfg.warmup' 'warmup = cfg.warmup' "$T"
run casspec_ref/dytc.py 'k = 1 if self.margins_known(choice.draft) else choice.k' 'k = choice.k' "$T"
run casspec_ref/draft.py 'self._margins[node] = float(p - (first if p < first else second))' 'self._margins[node] = float(p - second)' "$T"
run casspec_ref/draft.py 'return self._margins.get(node)' 'return None' "$T"
run casspec_ref/schedules.py 'd.match(p), d.margin(n)), n in on_path)' 'd.match(p)), n in on_path)' "$T tests/test_speculative.py"
run casspec_ref/base/dytc_checks.py 'if "#" in name or "@" in name or name.endswith("+"):' 'if "#" in name or name.endswith("+"):' "$T"
run casspec_ref/tools/replay.py 'self._margins[added[0][0]] = probs[0] - probs[1]' 'pass' "$T"
