#!/usr/bin/env bash
# Table 3 of the paper, en-fr: usage: examples/sated/run_en_fr.sh SATED_DIR WORK_DIR [--gpu 0] [--fp16] [--toy]
exec "$(dirname "$0")/run.sh" en-fr "$@"
