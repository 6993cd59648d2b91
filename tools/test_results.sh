#!/usr/bin/env bash
# Verdicts from GoogleTest XML reports, shared by tools/test.sh and tools/gpu_check.sh (source
# it). A test target whose report lists any skipped test case (GTEST_SKIP: no GPU, too few
# ranks) is "skipped", never "passed": only a target all of whose cases ran and passed passes.
#
#   xml_verdict FILE   prints "passed", "failed" or "skipped", then the number of cases run,
#                      skipped and failed, e.g. "skipped 2 30 0". A missing or unreadable report
#                      prints "passed 0 0 0" (the caller's exit status decides; non-gtest tests
#                      have none).
#   xml_skip_reason FILE  prints the first skip message in the report (one line), or nothing.
#   count_results LOG TESTLOGS  adds bazel's per-target result lines in LOG (bazel test output)
#                      to the counters passed, failed and skipped, reading each PASSED target's
#                      TESTLOGS/<package>/<name>/test.xml; skipped targets are appended to the
#                      array skipped_list as "//target (S of N cases skipped: reason)".

passed=${passed:-0}
failed=${failed:-0}
skipped=${skipped:-0}
skipped_list=()

xml_verdict() {
  local f="$1" run=0 skipped=0 failed=0
  if [ -r "$f" ]; then
    # gtest writes one <testcase ...> per case, with result="skipped" (or a <skipped> child) for
    # skipped cases and <failure> children for failed ones; bazel's own reports for non-gtest
    # tests have one testcase and no result attribute.
    run=$(grep -c '<testcase ' "$f" || true)
    skipped=$(grep -c '<testcase [^>]*result="skipped"' "$f" || true)
    failed=$(grep -c '<failure' "$f" || true)
  fi
  local verdict=passed
  if [ "$failed" -gt 0 ]; then
    verdict=failed
  elif [ "$skipped" -gt 0 ]; then
    verdict=skipped
  fi
  echo "$verdict $run $skipped $failed"
}

xml_skip_reason() {
  [ -r "$1" ] || return 0
  grep -o '<skipped message="[^"]*"' "$1" | head -1 | sed -e 's/^<skipped message="//' \
    -e 's/"$//' -e 's/&#x0A;/ /g' -e 's/&quot;/"/g' -e "s/&apos;/'/g" | cut -c1-160
}

count_results() {  # $1: bazel's output; $2: its testlogs folder. Parses the per-target lines.
  local line target verdict run sk fl path
  while read -r line; do
    target=${line%% *}
    if echo "$line" | grep -qE '^//[^ ]+ +(\(cached\) )?PASSED'; then
      path="$2/$(echo "${target#//}" | tr ':' '/')/test.xml"
      read -r verdict run sk fl < <(xml_verdict "$path")
      if [ "$verdict" = skipped ]; then
        skipped=$((skipped + 1))
        skipped_list+=("$target ($sk of $run cases skipped: $(xml_skip_reason "$path"))")
      else
        passed=$((passed + 1))
      fi
    elif echo "$line" | grep -qE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)'; then
      failed=$((failed + 1))
    fi
  done < <(grep -E '^//[^ ]+ +' "$1" || true)
}
