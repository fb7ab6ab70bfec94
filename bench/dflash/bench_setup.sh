# Sourced by the dflash_train bench scripts (pipeline.sh, auto_budget.sh) from the project
# root: the GPU build (into build-gpu unless BUILD_DIR says otherwise, built when missing),
# $bin, $results ($OUT or a temporary folder), a scratch $work removed on exit, and
# $work/docs.h5: 4M tokens of synthetic documents of ~4K tokens.
export BUILD_DIR=${BUILD_DIR:-$PWD/build-gpu}
source launch/env.sh
[[ -x $BUILD_DIR/bin/dflash_train ]] || JOBS=$(nproc --all) launch/build.sh >/dev/null
bin=$BUILD_DIR/bin
results=${OUT:-$(mktemp -d)}
mkdir -p "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/moe/make_dataset.py "$work/docs.h5" --tokens 4000000 --mean-len 4096 >/dev/null
