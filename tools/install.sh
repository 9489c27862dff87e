#!/usr/bin/env bash
# Installs the earmark command: builds it (release), then puts it under PREFIX with its resources,
# shell completions (bash, zsh, fish) and man pages (one per subcommand, from its --help).
#
# Usage: tools/install.sh [--prefix DIR] [--help]
#
#   --prefix DIR   where to install (default /usr/local; needs root there)
#
# Layout:
#   PREFIX/lib/earmark/earmark                        the program, with its resource bundle beside it
#   PREFIX/lib/earmark/models/yamnet.emodel           the sound model, when tools/fetch-model.sh has made it
#   PREFIX/bin/earmark                                a link to the program
#   PREFIX/share/bash-completion/completions/earmark, PREFIX/share/zsh/site-functions/_earmark,
#   PREFIX/share/fish/vendor_completions.d/earmark.fish
#   PREFIX/share/man/man1/earmark*.1
#
# Idempotent: running it again replaces the installed files. Run tools/setup.sh first on a fresh
# machine (this script does, when it runs as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

me=install.sh
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
prefix=/usr/local
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || { echo "$me: --prefix needs a folder" >&2; exit 2; }; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "$me: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$prefix" && prefix=$(cd "$prefix" && pwd)

if [ "$(id -u)" -eq 0 ]; then bash tools/setup.sh </dev/null; fi
scratch=.build/tools
echo "$me: building earmark (release)" >&2
swift build -c release --scratch-path "$scratch" --product earmark 2>&1 | grep -Ev '^\[[0-9]+/[0-9]+\]' >&2 || true
bin=$(swift build -c release --scratch-path "$scratch" --show-bin-path)
[ -x "$bin/earmark" ] || { echo "$me: error: the build did not produce $bin/earmark" >&2; exit 1; }

lib=$prefix/lib/earmark
mkdir -p "$lib" "$prefix/bin"
install -m 755 "$bin/earmark" "$lib/earmark.new" && mv -f "$lib/earmark.new" "$lib/earmark"
for bundle in "$bin"/*.resources; do
  [ -d "$bundle" ] || continue
  rm -rf "$lib/$(basename "$bundle")"
  cp -R "$bundle" "$lib/"
done
if [ -f models/yamnet.emodel ]; then
  mkdir -p "$lib/models"
  install -m 644 models/yamnet.emodel "$lib/models/yamnet.emodel"
fi
ln -sfn ../lib/earmark/earmark "$prefix/bin/earmark"

"$lib/earmark" --generate-completion-script bash | install -D -m 644 /dev/stdin "$prefix/share/bash-completion/completions/earmark"
"$lib/earmark" --generate-completion-script zsh | install -D -m 644 /dev/stdin "$prefix/share/zsh/site-functions/_earmark"
"$lib/earmark" --generate-completion-script fish | install -D -m 644 /dev/stdin "$prefix/share/fish/vendor_completions.d/earmark.fish"

# Man pages come from the commands' own help, through swift-argument-parser's generate-manual plugin.
man=$(mktemp -d)
trap 'rm -rf "$man"' EXIT
if swift package --scratch-path "$scratch" --allow-writing-to-directory "$man" generate-manual --multi-page \
     --date "$(git log -1 --format=%cs 2>/dev/null || date +%F)" -o "$man" >"$man/log" 2>&1; then
  mkdir -p "$prefix/share/man/man1"
  find "$man" -name '*.1' -exec install -m 644 {} "$prefix/share/man/man1/" \;
  pages=$(find "$man" -name '*.1' | wc -l)
else
  echo "$me: warning: man pages not generated (see below); everything else is installed" >&2
  tail -5 "$man/log" >&2
  pages=0
fi

echo "$me: installed $prefix/bin/earmark, completions for bash, zsh and fish, $pages man pages" >&2
[ -f "$lib/models/yamnet.emodel" ] || echo "$me: no sound model yet: run tools/fetch-model.sh, then this script again, for classify and --analyze" >&2
case ":$PATH:" in *":$prefix/bin:"*) ;; *) echo "$me: note: $prefix/bin is not on your PATH" >&2 ;; esac
echo "$prefix/bin/earmark"
