#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs, builds (with the device code, GPU or not),
# runs every meson test, and
# ends with the line 'N passed, N failed, N skipped'. Exit status non-zero on any failure.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/tools/setup.sh" || exit 1
"$root/tools/build.sh" --gpu || exit 1  # the device code too, so that a GPU run never meets a compile error
export PATH="$root/.venv/bin:$PATH"
meson test -C build --print-errorlogs --num-processes 2 "$@"
rc=$?
python3 - build/meson-logs/testlog.json <<'PY'
import json, sys
counts = {"passed": 0, "failed": 0, "skipped": 0}
for line in open(sys.argv[1]):
    result = json.loads(line)["result"]
    key = {"OK": "passed", "EXPECTEDFAIL": "passed", "SKIP": "skipped"}.get(result, "failed")
    counts[key] += 1
print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
PY
exit $rc
