# The shared pieces of the GPT drivers bench/gpu_gpt_bench.sh and bench/gpt_autocast_parity.sh
# (source it from beside them: the source tree, the runfiles, peer/bench/ in a gpu_check package).
# The driver sets gpt_driver (its name: messages and the work folder) before sourcing it; the
# functions read and set the driver's variables (train, peer, device, the shape, work, ...).
# shellcheck disable=SC2034,SC2154  # the driver's variables, set and read on both sides

# root: the repository (the source tree; under `bazel run`, the workspace), or peer/ in a
# gpu_check package: the folder above this file's.
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"

die() { echo "$gpt_driver: $*" >&2; exit 2; }
why() {  # $1: exit status, $2: the time limit -> ", timeout N s" for a timeout
  [ "$1" = 124 ] && echo ", timeout $2 s"
}

# gpt_parse_flags "FLAG[:VAR] ..." ARGS...: each "--FLAG VALUE" of ARGS into the variable VAR
# (default: FLAG with "_" for "-"); exits 2 (die) on a flag without a value or not in the list.
gpt_parse_flags() {
  local gpt_spec="$1" gpt_entry gpt_var
  shift
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || die "$1 needs a value"
    gpt_var=""
    for gpt_entry in $gpt_spec; do
      if [ "--${gpt_entry%%:*}" = "$1" ]; then
        gpt_var="${gpt_entry#*:}"
        gpt_var="${gpt_var//-/_}"
        break
      fi
    done
    [ -n "$gpt_var" ] || die "unknown flag $1"
    printf -v "$gpt_var" '%s' "$2"
    shift 2
  done
}

# gpt_require KIND VAR...: each VAR's value a positive integer (KIND positive), an integer >= 0
# (count) or a number (number); exits 2 naming the first that is not (as --VAR, "-" for "_").
gpt_require() {
  local kind="$1" v re what
  case "$kind" in
    positive) re='^[1-9][0-9]*$' what="a positive integer" ;;
    count) re='^[0-9]+$' what="an integer >= 0" ;;
    number) re='^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$' what="a number" ;;
  esac
  shift
  for v in "$@"; do
    [[ "${!v}" =~ $re ]] || die "--${v//_/-} '${!v}': $what"
  done
}

# The model shape and the device: vocab (uint16 tokens), n_embd divisible by n_head, cuda or cpu.
gpt_check_shape() {
  [ "$vocab" -le 65536 ] || die "--vocab-size $vocab: the token file is uint16 (<= 65536)"
  [ $((n_embd % n_head)) = 0 ] || die "--n-embd $n_embd is not divisible by --n-head $n_head"
  case "$device" in cuda | cpu) ;; *) die "--device '$device': cuda or cpu" ;; esac
}

# train (default: the repository's bazel-bin/examples/train_gpt, built, with --config=cuda for
# --device cuda, when missing) and peer must exist; sets python ($PYTHON, the peer's, default
# python3) and tool_python ($BENCH_PYTHON, the plumbing's: the standard library only).
gpt_find_tools() {
  if [ -z "$train" ]; then
    train="$root/bazel-bin/examples/train_gpt"
    if [ ! -x "$train" ] && [ -f "$root/WORKSPACE" ]; then
      local cfg=()
      [ "$device" = cuda ] && cfg=(--config=cuda)
      (cd "$root" && bazel build "${cfg[@]}" //examples:train_gpt >&2) || die "the build failed"
    fi
  fi
  [ -x "$train" ] || die "no train_gpt at $train (--train-gpt)"
  [ -f "$peer" ] || die "no peer at $peer (--peer)"
  python="${PYTHON:-python3}"
  export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ beside the peer and the modules it imports
  tool_python="${BENCH_PYTHON:-python3}"
}

# work: a new temporary folder, removed when the driver exits.
gpt_work_dir() {
  work="$(mktemp -d "${TMPDIR:-/tmp}/$gpt_driver.XXXXXX")" || die "mktemp"
  trap 'rm -rf "$work"' EXIT
}

# gpt_tokens KIND STEPS SEED: $work/tokens.bin, (batch x STEPS + 1) x block + 1 uint16 tokens
# (nanoGPT's raw .bin) for STEPS steps of fresh tokens, and $work/eval.bin, block + 1 tokens,
# from random.Random(SEED); the first token of each is 0, so a file never reads as an llm.c
# shard. KIND random: the others uniform in [0, vocab); markov: a Markov chain over 96 "words"
# of 3 to 8 tokens in [1, vocab), each followed by one of 3 others (so a model can learn it).
gpt_tokens() {
  "$tool_python" - "$1" "$work" "$vocab" "$batch" "$block" "$2" "$3" <<'PY' || die "tokens"
import array, random, sys
kind, work, (vocab, b, t, s, seed) = sys.argv[1], sys.argv[2], map(int, sys.argv[3:])
rng = random.Random(seed)
if kind == "markov":
    words = [[rng.randrange(1, vocab) for _ in range(rng.randint(3, 8))] for _ in range(96)]
    succ = [[rng.randrange(96) for _ in range(3)] for _ in range(96)]
def stream(n):
    if kind == "markov":
        out, w = [0], rng.randrange(96)
        while len(out) < n:
            out += words[w]
            w = rng.choice(succ[w])
        a = array.array("H", out[:n])
    else:
        a = array.array("H", (rng.randrange(vocab) for _ in range(n)))
        a[0] = 0
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()
for name, n in (("tokens.bin", (b * s + 1) * t + 1), ("eval.bin", t + 1)):
    with open("%s/%s" % (work, name), "wb") as f:
        f.write(stream(n))
PY
}

# card and driver: nvidia-smi's first GPU's name and driver version ("" without nvidia-smi).
gpt_card() {
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
}

# gpt_run NAME LIMIT PATTERN CMD...: CMD ended after LIMIT s, its stdout in $work/NAME.out, its
# stderr in $work/NAME.log and the last stdout line matching PATTERN in $work/NAME.json; sets rc,
# its exit status.
gpt_run() {
  local name="$1" limit="$2" pattern="$3"
  shift 3
  timeout --kill-after=5 "$limit" "$@" > "$work/$name.out" 2> "$work/$name.log"
  rc=$?
  grep "$pattern" "$work/$name.out" | tail -1 > "$work/$name.json"
}

# gpt_failed WHAT RC LIMIT NAME [LINES]: "# WHAT (exit RC[, timeout LIMIT s]):" and the last
# LINES (default 5) lines of $work/NAME.log.
gpt_failed() {
  echo "# $1 (exit $2$(why "$2" "$3")):"
  tail -"${5:-5}" "$work/$4.log" | sed 's/^/#   /'
}

# commit and dirty: the repository's HEAD and its first modified tracked file ("" outside one).
gpt_commit() {
  commit=$(git -C "$root" rev-parse HEAD 2>/dev/null)
  dirty=$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null | head -1)
}
