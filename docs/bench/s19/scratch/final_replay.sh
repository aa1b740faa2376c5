#!/bin/sh
# Stop 19's replay table (docs/bench/s19/noisy_replay.txt): stop 18's DyTC (a worktree of 54d632a
# at $OLD) and this stop's, with and without its parts, on stop 17's records, 12 noise seeds.
# Usage (from this directory): OLD=/tmp/old19 sh final_replay.sh
PY=../../../../.venv/bin/python
for set in heldout bundled; do for mode in usual fast; do
  echo "== $set $mode: stop 18 (54d632a)"
  PYTHONPATH=$OLD $PY ../../s18/scratch/noisy_replay.py ../../s17/replay_$set.json ../../s17/costs_$mode.json shipped
  echo "== $set $mode: this stop (package), and the package less one part"
  $PY variants19.py ../../s17/replay_$set.json ../../s17/costs_$mode.json shipped free_warmup free_warmup_no_receding no_receding no_recycle
done; done
