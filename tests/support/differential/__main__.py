"""python -m tests.support.differential --seed N --count M --report FILE"""

import argparse
import sys

from . import run, servers

parser = argparse.ArgumentParser(
    prog="python -m tests.support.differential",
    description="Sends the same bytes to zigcorn and to reference servers (uvicorn with h11 and with httptools, "
                "hypercorn, gunicorn, granian, nginx) and classifies every disagreement.",
    epilog="CI runs the fixed corpus and a few generated inputs (tests/differential/test_differential.py). "
           "Release days: a long run, e.g. --seed $(date +%%Y%%m%%d) --count 20000 --report /tmp/report.md "
           "--json /tmp/outcomes.json (about 10 minutes per 1000 inputs on two cores), then read its "
           "UNEXPLAINED classes.")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--count", type=int, default=200, help="generated inputs, after the fixed corpus")
parser.add_argument("--report", help="write the Markdown report here")
parser.add_argument("--json", help="write every input with every server's outcome here")
parser.add_argument("--refs", default=",".join(servers.REFERENCES), help="comma-separated references")
args = parser.parse_args()
rows = run.main(args.seed, args.count, args.report, args.refs.split(","), args.json)
bad = [r for r in rows if r["verdict"].split(":")[0] in ("looser", "reads-differently") and not r["reason"]]
print(f"{len(rows)} inputs, {sum(r['verdict'] != 'agree' for r in rows)} disagreements, {len(bad)} unexplained")
sys.exit(1 if bad else 0)
