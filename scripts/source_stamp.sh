#!/usr/bin/env bash
# The build's source stamp, taken from the tree being built (Meson's vcs_tag
# runs it at every build): "<commit description>|<source hash>".
#   source hash  sha256 (12 hex digits) of every file that builds the programs
#                (core, stages, bench, the Meson files), by path and content:
#                it names exactly what was compiled, with or without git.
#   commit       `git describe --always --dirty --abbrev=12` of the tree; but a
#                tree copied without its history (or onto another checkout)
#                carries .source-stamp, written by scripts/stamp_source.sh
#                where the commit is known: it is used when its source hash
#                equals this tree's, and "unknown" when neither holds.
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 1
src=$(find core stages bench meson.build meson_options.txt -type f \
        \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.in' -o -name 'meson.build' \
           -o -name 'meson_options.txt' -o -name '*.py' \) -print0 2>/dev/null |
      LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)
commit=""
if [ -f .source-stamp ]; then
  read -r stamped_commit stamped_src < .source-stamp
  [ "${stamped_src:-}" = "$src" ] && commit=$stamped_commit
fi
if [ -z "$commit" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  commit=$(git describe --always --dirty --abbrev=12 2>/dev/null)
fi
echo "${commit:-unknown}|$src"
