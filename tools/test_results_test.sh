#!/usr/bin/env bash
# tools/test_results.sh: skipped gtest cases make a target "skipped", never "passed".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/test_results.sh"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -p "$tmp/logs/pkg/all_run" "$tmp/logs/pkg/some_skipped" "$tmp/logs/pkg/sh"
cat > "$tmp/logs/pkg/all_run/test.xml" <<'X'
<testsuites tests="2"><testsuite name="A">
<testcase name="one" status="run" result="completed" classname="A" />
<testcase name="two" status="run" result="completed" classname="A" />
</testsuite></testsuites>
X
cat > "$tmp/logs/pkg/some_skipped/test.xml" <<'X'
<testsuites tests="3"><testsuite name="G">
<testcase name="cpu" status="run" result="completed" classname="G" />
<testcase name="gpu1" status="run" result="skipped" classname="G">
<skipped message="g.cc:12&#x0A;no CUDA device visible"><![CDATA[g.cc:12
no CUDA device visible]]></skipped>
</testcase>
<testcase name="gpu2" status="run" result="skipped" classname="G">
<skipped message="g.cc:12&#x0A;no CUDA device visible"></skipped>
</testcase>
</testsuite></testsuites>
X
cat > "$tmp/logs/pkg/sh/test.xml" <<'X'
<testsuites><testsuite name="pkg/sh" tests="1" failures="0" errors="0">
<testcase name="pkg/sh" status="run" duration="1" time="1"></testcase>
</testsuite></testsuites>
X

[ "$(xml_verdict "$tmp/logs/pkg/all_run/test.xml")" = "passed 2 0 0" ] || fail "all_run"
[ "$(xml_verdict "$tmp/logs/pkg/some_skipped/test.xml")" = "skipped 3 2 0" ] || fail "some_skipped"
[ "$(xml_verdict "$tmp/logs/pkg/sh/test.xml")" = "passed 1 0 0" ] || fail "sh"
[ "$(xml_verdict "$tmp/logs/pkg/missing/test.xml")" = "passed 0 0 0" ] || fail "missing"
[ "$(xml_skip_reason "$tmp/logs/pkg/some_skipped/test.xml")" = "g.cc:12 no CUDA device visible" ] \
  || fail "reason: $(xml_skip_reason "$tmp/logs/pkg/some_skipped/test.xml")"

cat > "$tmp/bazel.log" <<'X'
INFO: Build completed successfully
//pkg:all_run                                                   PASSED in 0.2s
//pkg:some_skipped                                     (cached) PASSED in 0.1s
//pkg:sh                                                        PASSED in 1.0s
//pkg:broken                                                    FAILED in 0.3s
//pkg:hung                                                     TIMEOUT in 60.0s
Executed 5 out of 5 tests: 3 tests pass and 2 fail locally.
X
count_results "$tmp/bazel.log" "$tmp/logs"
[ "$passed $failed $skipped" = "2 2 1" ] || fail "counts: $passed passed, $failed failed, $skipped skipped"
[ "${skipped_list[0]}" = "//pkg:some_skipped (2 of 3 cases skipped: g.cc:12 no CUDA device visible)" ] \
  || fail "list: ${skipped_list[0]}"
echo "PASS"
