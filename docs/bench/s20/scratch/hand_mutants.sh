# Hand mutants of stop 20's change (run from the repository root: bash docs/bench/s20/scratch/hand_mutants.sh):
# each replaces one fragment, runs the kernel, nucleus, sampling and drafter tests, restores the file.
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
K="tests/test_kernels.py"
N="tests/test_nucleus.py tests/test_sampling.py"
D="tests/test_draft.py"
run casspec_ref/base/kernels.py 'if hit is None or hit[0] != tensor_stamp(weight) or not x.is_cpu' 'if hit is None or not x.is_cpu' "$K"
run casspec_ref/base/kernels.py 'or x.dtype != weight.dtype:' ':' "$K"
run casspec_ref/base/kernels.py 'out = out if bias is None else out + bias
    return out.view' 'return out.view' "$K"
run casspec_ref/base/kernels.py '    if form.base == "packed":
        return _packed_rows(x, weight, bias)' '    if form.base == "packed":
        return run_form(form, x, weight, bias)' "$K"
run casspec_ref/base/nucleus.py 'untied = (rows >= tau).sum(dim=-1) == k' 'untied = (rows >= tau).sum(dim=-1) >= k' "$N"
run casspec_ref/base/nucleus.py 'decided = untied & (cumulative[:, -1] >= top_p + MARGIN)' 'decided = untied & (cumulative[:, -1] >= top_p)' "$N"
run casspec_ref/base/nucleus.py 'ids = ids.sort(dim=-1).values' 'ids = ids' "$N"
run casspec_ref/base/nucleus.py 'keep.scatter_(-1, ids.gather(-1, order), (cumulative - head) < top_p)' 'keep.scatter_(-1, ids.gather(-1, order), cumulative < top_p)' "$N"
run casspec_ref/base/nucleus.py 'if k * 4 > v:' 'if k * 4 > v * 4:' "$N"
run casspec_ref/base/nucleus.py 'keep[r] = _keep_row(rows[r], top_p, first_head)' 'pass' "$N"
run casspec_ref/draft.py 'first, second = confidence[best], np.delete(confidence, best).max(initial=-np.inf)' 'first, second = confidence[best], np.sort(confidence)[-1]' "$D"
run casspec_ref/draft.py 'first, second = confidence[best], np.delete' 'first, second = np.sort(confidence)[-2], np.delete' "$D"
