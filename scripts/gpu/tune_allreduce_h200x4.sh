#!/bin/bash
# The all-reduce family tuned at 4 ranks on 4 x H200 and its library run there: tune_family_h200x4.sh
# with FAMILIES=allreduce_family (its options: SMALL, LARGE, STEP, PRE, LIBS, WHEELS, ...). Run from the
# repository root; results under $OUT/tune4_allreduce_family.tgz.
FAMILIES=allreduce_family exec bash scripts/gpu/tune_family_h200x4.sh "$@"
