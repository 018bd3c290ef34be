#!/usr/bin/env bash
# Writes .source-stamp: this tree's commit description and source hash, so
# that a copy of the tree built elsewhere without its git history (the lent
# GPU machine) records the real commit (scripts/source_stamp.sh reads it back
# when the sources are unchanged). Run it in the checkout before copying.
set -eu
cd "$(dirname "$0")/.."
stamp=$(bash scripts/source_stamp.sh .)
commit=$(git describe --always --dirty --abbrev=12)
echo "$commit ${stamp#*|}" > .source-stamp
echo "wrote .source-stamp: $commit ${stamp#*|}"
