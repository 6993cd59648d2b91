# Sourced by the ckpt command-line tests: `expect` and `fail` over the binary in $CKPT, counting
# failures in $failures.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN -- ARGS...: runs ckpt ARGS, checks the exit code and that stdout+stderr
# (newlines read as spaces) match the extended regular expression PATTERN.
expect() {
  local want=$1 pattern=$2
  shift 3
  local out rc
  out=$("$CKPT" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ]; then
    fail "ckpt $* exited $rc, expected $want; output:"; echo "$out" | head -20
  elif ! tr '\n' ' ' <<<"$out" | grep -qE -- "$pattern"; then
    fail "ckpt $* output does not match /$pattern/:"; echo "$out" | head -20
  else
    echo "ok: ckpt $* -> $rc"
  fi
}
