#!/usr/bin/env python3
"""Summarise `terraform show -json` output by action, listing replacements."""
import json
import sys
from collections import defaultdict


def action_name(actions):
    if actions == ["no-op"]:
        return None
    if "delete" in actions and "create" in actions:
        return "replace"
    return actions[0]


def main(path):
    plan = json.load(open(path, encoding="utf-8"))
    groups = defaultdict(list)
    for rc in plan.get("resource_changes", []):
        name = action_name(rc["change"]["actions"])
        if name:
            groups[name].append(rc)
    for name in ("delete", "replace", "update", "create", "read"):
        items = groups.get(name, [])
        if not items:
            continue
        print(f"== {name} ({len(items)})")
        for rc in items:
            line = f"  {rc['address']}"
            forced = rc["change"].get("replace_paths")
            if forced:
                line += "  forced by: " + ", ".join(".".join(map(str, p)) for p in forced)
            print(line)
    drift = plan.get("resource_drift", [])
    if drift:
        print(f"== drift detected ({len(drift)})")
        for rc in drift:
            print(f"  {rc['address']}")


if __name__ == "__main__":
    main(sys.argv[1])
