#!/usr/bin/env bash
# Run on a Debian machine with a package registry, in the project root, before building on
# a machine without one (such as a GPU machine whose image lacks toml++, PCRE2's and
# utf8proc's headers): unpacks Debian's toml++, PCRE2 and utf8proc into .deps/root (ignored
# by git), where launch/build.sh and launch/env.sh find them. Carry .deps to that machine.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.deps/' .git/info/exclude 2>/dev/null || echo '/.deps/' >> .git/info/exclude
packages=(libtomlplusplus-dev libtomlplusplus3 libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2)
stamp=.deps/root/.packages
if [[ -f $stamp && $(cat "$stamp") == "${packages[*]}" ]]; then echo ".deps ready"; exit 0; fi
rm -rf .deps && mkdir -p .deps/debs
# apt-get download writes as the _apt user where it can; a root-owned folder is fine too.
( cd .deps/debs && apt-get download "${packages[@]}" >/dev/null 2>&1 )
for f in .deps/debs/*.deb; do dpkg -x "$f" .deps/root; done
rm -rf .deps/debs
echo "${packages[*]}" > "$stamp"
echo ".deps ready: ${packages[*]}"
