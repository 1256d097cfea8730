"""Print "N passed, N failed, N skipped" over meson's testlog.json and pytest's JUnit XML.

Usage: summary.py TESTLOG_JSON JUNIT_XML...   (used by scripts/test). A missing report adds
nothing: the runner's exit status already failed the run."""

import json
import sys
import xml.etree.ElementTree as ET

n = {"passed": 0, "failed": 0, "skipped": 0}
try:
    with open(sys.argv[1]) as f:
        for line in f:
            r = json.loads(line)["result"]
            n["passed" if r in ("OK", "EXPECTEDFAIL") else "skipped" if r == "SKIP" else "failed"] += 1
except FileNotFoundError:
    pass
for junit in sys.argv[2:]:
    try:
        for case in ET.parse(junit).iter("testcase"):
            tags = {child.tag for child in case}
            n["failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"] += 1
    except FileNotFoundError:
        pass
print(f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped")
