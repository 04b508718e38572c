#!/usr/bin/env bash
# Run `rftbus bench KIND ARGS...` on this tree and on an earlier commit, alternating, on one broker:
#   scripts/bench_two_trees.sh REV KIND ROUNDS [ARGS...]   (e.g. d498728 streams 3)
# The earlier tree is a git worktree; it runs on this tree's .venv packages (an overlay venv whose only
# difference is where `rftbus` imports from), so the two differ in rftbus code alone. One JSON line per
# run goes to build/bench-KIND.jsonl ({"tree": "new"|"old", "round", "result"}); plot them with
# scripts/plot_bench_pair.py. Needs `make install` first.
set -euo pipefail
rev=$1 kind=$2 rounds=$3; shift 3
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/rftbus-two-trees-XXXX)
git -C "$repo" worktree add -q "$work/old" "$rev"
trap 'RFTBUS_BROKER__PORT=$port "$repo/.venv/bin/rftbus" --state-dir "$work/state" down >/dev/null 2>&1 || true;
      git -C "$repo" worktree remove --force "$work/old"' EXIT
site=$("$repo/.venv/bin/python" -c "import site; print(site.getsitepackages()[0])")
python3 -m venv --without-pip "$work/venv"
osite=$("$work/venv/bin/python" -c "import site; print(site.getsitepackages()[0])")
sed "s#$repo#$work/old#g; s#__editable___rftbus_0_1_0_finder#old_rftbus_finder#g" \
    "$site/__editable___rftbus_0_1_0_finder.py" > "$osite/old_rftbus_finder.py"
echo "import old_rftbus_finder; old_rftbus_finder.install()" > "$osite/aa_old.pth"
echo "import site; site.addsitedir('$site')" > "$osite/zz_base.pth"
printf '#!%s\nimport sys\nfrom rftbus.apps.cli.main import main\nsys.exit(main())\n' "$work/venv/bin/python" > "$work/venv/bin/rftbus"
chmod +x "$work/venv/bin/rftbus"
port=$((20000 + RANDOM % 10000))
export RFTBUS_BROKER__PORT=$port RFTBUS_BROKER__LIBS_DIR="$repo/.rftbus/kafka/libs-4.1.1"
"$repo/.venv/bin/rftbus" --state-dir "$work/state" up --port "$port" >/dev/null
mkdir -p "$repo/build"
out="$repo/build/bench-$kind.jsonl"
for r in $(seq 1 "$rounds"); do
  for tree in new old; do
    if [ "$tree" = new ]; then cd "$work"; exe="$repo/.venv/bin/rftbus"; else cd "$work/old"; exe="$work/venv/bin/rftbus"; fi
    res=$("$exe" --state-dir "$work/state" bench "$kind" "$@" --json 2>>"$work/$tree.err" | tail -1)
    echo "{\"tree\": \"$tree\", \"round\": $r, \"result\": ${res:-null}}" | tee -a "$out" | cut -c1-200
  done
done
