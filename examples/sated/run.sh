#!/usr/bin/env bash
# Prepare one SATED language pair and run the paper's four systems on it.
# usage: examples/sated/run.sh PAIR SATED_DIR WORK_DIR [recipe.py options: --gpu 0 --fp16 --toy ...]
#   PAIR       en-fr, en-es or en-de
#   SATED_DIR  the unpacked release (sated-release-0.9.0), with PAIR/{train,dev,test}.{en,xx,usr}
#   WORK_DIR   data go to WORK_DIR/PAIR/data, checkpoints and the BLEU table to WORK_DIR/PAIR/runs
set -euo pipefail
if [ $# -lt 3 ]; then
    sed -n '2,6p' "$0" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
pair=$1; sated=$2; work=$3; shift 3
src=${pair%-*}; tgt=${pair#*-}
"${PYTHON:-python}" "$here/prepare.py" --input "$sated/$pair" --src "$src" --tgt "$tgt" --out "$work/$pair/data"
"${PYTHON:-python}" "$here/recipe.py" --data "$work/$pair/data" --pair "$pair" --out "$work/$pair/runs" "$@"
