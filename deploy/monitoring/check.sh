#!/usr/bin/env bash
# Checks deploy/monitoring: the Prometheus rules (promtool check rules), their unit tests
# (promtool test rules), and with python3 the rules' and the Grafana dashboard's structure
# and that every PromQL expression uses only metric names docs/monitoring.md lists (or
# recording rules of bulwark-rules.yaml). Exits non-zero with a message on any failure.
#
#   deploy/monitoring/check.sh            # from anywhere; PROMTOOL=/path/to/promtool to override
#
# Needs promtool (Debian: apt-get install prometheus) and python3 with PyYAML (python3-yaml).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
promtool="${PROMTOOL:-promtool}"

fail() { echo "check.sh: FAILED: $*" >&2; exit 1; }

command -v "$promtool" >/dev/null 2>&1 ||
  fail "promtool not found (Debian: apt-get install prometheus; or set PROMTOOL)"
command -v python3 >/dev/null 2>&1 || fail "python3 not found"
python3 -c 'import yaml' 2>/dev/null || fail "python3 has no PyYAML (Debian: apt-get install python3-yaml)"
[[ -f "$root/docs/monitoring.md" ]] || fail "$root/docs/monitoring.md not found (the metric list)"

echo "== promtool check rules"
"$promtool" check rules "$here/bulwark-rules.yaml" || fail "promtool check rules bulwark-rules.yaml"

echo "== promtool test rules"
(cd "$here" && "$promtool" test rules bulwark-rules.test.yaml) || fail "promtool test rules bulwark-rules.test.yaml"

echo "== structure and metric names (rules, tests, dashboard)"
python3 - "$root/docs/monitoring.md" "$here" <<'PY' || fail "structure / metric-name check (see above)"
import json
import re
import sys

import yaml

docs_path, here = sys.argv[1], sys.argv[2]
errors = []


def err(msg):
    errors.append(msg)


# ---------------------------------------------------------------- the contract
# Metric names are taken from the table rows of docs/monitoring.md; a histogram's name
# stands for its _bucket, _sum and _count series (the bare name selects nothing).
documented = set()
name_re = re.compile(r"`((?:bulwark_|DCGM_FI_)[A-Za-z0-9_]+)")
for line in open(docs_path, encoding="utf-8"):
    if not line.startswith("|"):
        continue
    names = name_re.findall(line)
    documented.update(names)
    if re.search(r"\|\s*histogram\s*\|", line):
        for n in names:
            documented.discard(n)
            documented.update({n + "_bucket", n + "_sum", n + "_count"})
if len(documented) < 40:
    err(f"{docs_path}: found only {len(documented)} metric names in its tables; is it the right file?")

rules_doc = yaml.safe_load(open(f"{here}/bulwark-rules.yaml", encoding="utf-8"))
tests_doc = yaml.safe_load(open(f"{here}/bulwark-rules.test.yaml", encoding="utf-8"))
recorded = {r["record"] for g in rules_doc["groups"] for r in g["rules"] if "record" in r}
known = documented | recorded

# ---------------------------------------------------------------- PromQL metric names
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan", "atan2",
    # aggregation operators (may be followed by `by (...)` rather than `(`)
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile",
}


def metric_names(expr):
    """The metric names an expression selects (without running a PromQL parser)."""
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)  # strings
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ", e)
    e = re.sub(r"\$\{?[A-Za-z0-9_]+(?::[a-z]+)?\}?", " ", e)  # Grafana variables
    names = set()
    for m in re.finditer(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        tok = m.group(0)
        if e[m.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if tok.lower() in KEYWORDS:
            continue
        names.add(tok)
    return names


def check_expr(where, expr):
    if not isinstance(expr, str) or not expr.strip():
        err(f"{where}: empty expression")
        return set()
    names = metric_names(expr)
    if not names:
        err(f"{where}: no metric name found in {expr!r}")
    for n in sorted(names - known):
        err(f"{where}: metric {n!r} is neither in docs/monitoring.md nor a recording rule "
            f"(expr: {' '.join(expr.split())})")
    return names


# ---------------------------------------------------------------- rules
REQUIRED_ALERTS = {
    "BulwarkNanLoss", "BulwarkLossSpike", "BulwarkLossDiverging", "BulwarkTrainingStalled",
    "BulwarkStraggler", "BulwarkDataLoaderStarvation", "BulwarkEttrBelowTarget", "BulwarkGpuXid",
    "BulwarkGpuDoubleBitEcc", "BulwarkGpuThermalThrottle", "BulwarkCheckpointBehind",
    "BulwarkThroughputCollapse",
}
REQUIRED_RECORDS = {"bulwark:ettr:ratio_rate1h", "bulwark:lost_seconds:rate1h"}
groups = {g["name"]: g for g in rules_doc["groups"]}
if set(groups) != {"bulwark", "bulwark-recording"}:
    err(f"rules: groups are {sorted(groups)}, want bulwark and bulwark-recording")
alerts = set()
for gname, g in groups.items():
    for r in g["rules"]:
        where = f"rules {gname}/{r.get('alert') or r.get('record')}"
        check_expr(where, r["expr"])
        if "alert" in r:
            if gname != "bulwark":
                err(f"{where}: alerts belong in the group bulwark")
            alerts.add(r["alert"])
            sev = r.get("labels", {}).get("severity")
            if sev not in ("critical", "warning", "info"):
                err(f"{where}: severity {sev!r}, want critical, warning or info")
            ann = r.get("annotations", {})
            for key in ("summary", "description"):
                if not ann.get(key):
                    err(f"{where}: no annotation {key}")
            if "$labels.job" not in ann.get("description", ""):
                err(f"{where}: the description does not name the job")
            # queries made by the annotations' templates
            for text in ann.values():
                for q in re.findall(r'printf\s+"((?:\\.|[^"\\])*)"[^}]*\|\s*query', text):
                    check_expr(f"{where} (annotation query)", q.replace('\\"', '"').replace("%q", '""'))
        elif gname != "bulwark-recording":
            err(f"{where}: recording rules belong in the group bulwark-recording")
for a in sorted(REQUIRED_ALERTS - alerts):
    err(f"rules: alert {a} missing")
for a in sorted(alerts - REQUIRED_ALERTS):
    err(f"rules: alert {a} is not one of the agreed names")
for r in sorted(REQUIRED_RECORDS - recorded):
    err(f"rules: recording rule {r} missing")

# ---------------------------------------------------------------- unit tests
fires, quiet, tested_records = set(), set(), set()
for t in tests_doc.get("tests", []):
    tname = t.get("name", "?")
    for s in t.get("input_series", []):
        n = s["series"].split("{", 1)[0].strip()
        if n not in documented:
            err(f"test {tname!r}: input series {n!r} is not in docs/monitoring.md")
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
    for p in t.get("promql_expr_test", []):
        tested_records |= check_expr(f"test {tname!r} promql_expr_test", p["expr"]) & recorded
for a in sorted(alerts):
    if a not in fires:
        err(f"tests: no case where {a} fires")
    if a not in quiet:
        err(f"tests: no case where {a} must not fire")
for r in sorted(recorded - tested_records):
    err(f"tests: no promql_expr_test for the recording rule {r}")

# ---------------------------------------------------------------- dashboard
path = f"{here}/grafana-dashboard.json"
try:
    dash = json.load(open(path, encoding="utf-8"))
except ValueError as e:
    print(f"{path}: not valid JSON: {e}", file=sys.stderr)
    sys.exit(1)
if dash.get("schemaVersion") != 39:
    err(f"dashboard: schemaVersion {dash.get('schemaVersion')!r}, want 39")
variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    err("dashboard: no template variable `datasource` of type datasource for prometheus")
job = variables.get("job")
job_query = json.dumps(job.get("query")) + json.dumps(job.get("definition")) if job else ""
if not job or job.get("type") != "query" or "label_values(bulwark_job_running, job)" not in job_query:
    err("dashboard: no query variable `job` from label_values(bulwark_job_running, job)")

all_panels = []
for p in dash.get("panels", []):
    all_panels.append(p)
    all_panels.extend(p.get("panels", []))  # a collapsed row's panels
ids = [p.get("id") for p in all_panels]
for i in sorted({i for i in ids if ids.count(i) > 1}, key=str):
    err(f"dashboard: panel id {i!r} used more than once")
if any(not isinstance(i, int) for i in ids):
    err("dashboard: a panel without an integer id")
cells = {}
used = set()
for p in all_panels:
    where = f"dashboard panel {p.get('id')} {p.get('title')!r}"
    g = p.get("gridPos")
    if not isinstance(g, dict) or not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")):
        err(f"{where}: gridPos with integer h, w, x, y missing")
        continue
    if g["x"] < 0 or g["w"] <= 0 or g["h"] <= 0 or g["x"] + g["w"] > 24:
        err(f"{where}: gridPos {g} outside the 24 columns")
    for x in range(g["x"], g["x"] + g["w"]):
        for y in range(g["y"], g["y"] + g["h"]):
            if (x, y) in cells:
                err(f"{where}: overlaps panel {cells[(x, y)]}")
                break
            cells[(x, y)] = p.get("id")
        else:
            continue
        break
    if p.get("type") == "row":
        continue
    targets = p.get("targets") or []
    if not targets:
        err(f"{where}: no targets")
    for t in targets:
        used |= check_expr(f"{where} target {t.get('refId')}", t.get("expr"))
        if (t.get("datasource") or p.get("datasource") or {}).get("uid") != "${datasource}":
            err(f"{where}: target {t.get('refId')} does not use the $datasource variable")
for a in dash.get("annotations", {}).get("list", []):
    if "expr" in a:
        check_expr(f"dashboard annotation {a.get('name')!r}", a["expr"])
for v in variables.values():
    if v.get("type") == "query":
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*[A-Za-z_]+\)\s*", q or "")
        check_expr(f"dashboard variable {v.get('name')!r}", m.group(1) if m else q)

REQUIRED_ON_DASHBOARD = {
    "bulwark_productive_seconds_total", "bulwark_wall_seconds_total", "bulwark_ettr_ratio",
    "bulwark_ettr_target_ratio", "bulwark_lost_seconds_total", "bulwark_loss",
    "bulwark_tokens_per_second", "bulwark_mfu_ratio", "bulwark_cost_dollars_total",
    "bulwark_cost_per_productive_gpu_hour_dollars", "bulwark_cost_per_million_tokens_dollars",
    "bulwark_incidents_total", "bulwark_restarts_total", "bulwark_step_duration_seconds_bucket",
    "bulwark_straggler_score", "bulwark_data_wait_ratio", "bulwark_checkpoint_bytes_total",
    "bulwark_checkpoint_last_commit_timestamp_seconds", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS", "bulwark_gpu_throttled",
}
for n in sorted(REQUIRED_ON_DASHBOARD - used):
    err(f"dashboard: no panel shows {n}")

if errors:
    for e in errors:
        print(e, file=sys.stderr)
    print(f"{len(errors)} problem(s)", file=sys.stderr)
    sys.exit(1)
print(f"  OK: {len(alerts)} alerts ({sum(len(g['rules']) for g in rules_doc['groups'])} rules), "
      f"{len(recorded)} recording rules, {len(tests_doc['tests'])} test cases; dashboard: "
      f"{len(all_panels)} panels, {len(used)} metric names, all in docs/monitoring.md "
      f"({len(documented)} names) or recorded")
PY

echo "check.sh: all checks passed"
