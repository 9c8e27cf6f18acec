#!/usr/bin/env bash
# The Markdown table of the last libFuzzer campaign of every target (from the logs that
# scripts/fuzz.sh --engine libfuzzer leaves in fuzz/target/TARGET.log): executions, seconds,
# executions per second, the size of the working corpus, and the findings saved.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "| target | executions | seconds | executions / s | working corpus (entries) | findings saved |"
echo "|---|---|---|---|---|---|"
for log in fuzz/target/*.log; do
  t=$(basename "$log" .log)
  runs=$(grep -oE "stat::number_of_executed_units: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+$" || echo 0)
  rate=$(grep -oE "stat::average_exec_per_sec: +[0-9]+" "$log" | tail -1 | grep -oE "[0-9]+$" || echo 0)
  secs=$(grep -oE "Done [0-9]+ runs in [0-9]+ second" "$log" | tail -1 | grep -oE "in [0-9]+" | grep -oE "[0-9]+" || echo "")
  if [ -z "$secs" ]; then secs="stopped by a finding"; fi
  corpus=$(ls "fuzz/target/corpus/$t" 2>/dev/null | wc -l)
  found=$(ls "fuzz/artifacts/$t" 2>/dev/null | wc -l)
  echo "| \`$t\` | $runs | $secs | $rate | $corpus | $found |"
done
