"""What the stop-18 (a copy of stop 17's) scratch harnesses share: a replay record and a machine's costs."""
import json

from casspec_ref.tools.replay import Costs, Recorded


def load(record_path, costs_path=None):
    """(records, costs, level names) of a `dytc_replay.py record` file; `costs_path`: another
    record (or a costs_*.json) whose costs to use instead of the record's own."""
    with open(record_path) as f:
        data = json.load(f)
    records = [Recorded(**r) for r in data["records"]]
    raw = data["costs"]
    if costs_path:
        with open(costs_path) as f:
            raw = json.load(f)["costs"]
    return records, Costs.from_json(raw), list(records[0].drafts)
