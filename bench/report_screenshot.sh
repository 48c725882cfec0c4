#!/usr/bin/env bash
# Render analysis/report.py's page in a real headless browser and save a screenshot to look at.
#   bash bench/report_screenshot.sh RESULTS_DIR [SCREENSHOT.png]     (needs Debian's chromium: apt-get install -y chromium)
# Prints the page's size, its number of embedded figures and the screenshot's path.
set -euo pipefail
dir=${1:?usage: bash bench/report_screenshot.sh RESULTS_DIR [SCREENSHOT.png]}
shot=${2:-/tmp/unitta_report.png}
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
out=$(mktemp -d)
page=$("$py" "$here/analysis/report.py" "$dir" --out "$out")
command -v chromium >/dev/null || { echo "chromium not found: apt-get install -y chromium" >&2; exit 2; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$shot" --window-size=1400,3000 \
  "file://$page" 2>/dev/null
echo "page: $page ($(stat -c %s "$page") bytes, $(grep -o 'data:image/png;base64' "$page" | wc -l) embedded figures)"
echo "screenshot: $shot ($(stat -c %s "$shot") bytes)"
