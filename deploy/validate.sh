#!/usr/bin/env bash
# Validates the Kubernetes manifests against the Kubernetes JSON schemas, offline (the schemas
# ship inside the kubernetes-validate wheel that scripts/python-env.sh installs).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${DUET_VENV:-$HOME/.cache/duet-venv}"
"$venv/bin/kubernetes-validate" --strict deploy/k8s/*.yaml
# The alert rules inside their ConfigMap, and the Grafana dashboard: well-formed, every rule and
# panel complete (which metrics they read is checked against the server by
# server/tests/observations.rs).
"$venv/bin/python" - <<'PY'
import json, sys, yaml
config = yaml.safe_load(open("deploy/k8s/prometheus-rules.yaml"))
rules = yaml.safe_load(config["data"]["duet-alerts.yaml"])
for group in rules["groups"]:
    assert group["name"] and group["rules"], group
    for rule in group["rules"]:
        missing = {"alert", "expr", "for", "labels", "annotations"} - rule.keys()
        assert not missing, f"rule {rule.get('alert')}: missing {missing}"
        assert rule["labels"].get("severity"), rule["alert"]
dashboard = json.load(open("deploy/grafana/duet.json"))
ids = [p["id"] for p in dashboard["panels"]]
assert len(ids) == len(set(ids)), "panel ids repeat"
for panel in dashboard["panels"]:
    assert panel["title"] and panel["targets"], panel.get("title")
    assert all(t["expr"] for t in panel["targets"]), panel["title"]
print(f"deploy: {sum(len(g['rules']) for g in rules['groups'])} alert rules, "
      f"{len(ids)} dashboard panels well-formed", file=sys.stderr)
PY
