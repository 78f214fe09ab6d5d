#!/usr/bin/env bash
# Here, before tools/gpu_check.sh's device call: CPython 3.12 x86-64 wheels of what the lent
# GPU machine's image lacks for onmt_train (its python3 has torch, Triton, sacrebleu, PyYAML,
# numpy, pytest; nothing can be fetched there), into .whl/ (ignored through .git/info/exclude),
# to be carried with the call (carry: [".whl"]). spacy stays behind: the extension's stand-in
# answers OpenNMT-py's start-up import and nothing here uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
rm -rf .whl
platforms=()
for n in 2_28 2_27 2_17 2_5; do platforms+=(--platform "manylinux_${n}_x86_64"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
    opennmt-py==3.5.1 ConfigArgParse==1.9.0 pyonmttok==1.38.1 RapidFuzz==3.14.6 pyahocorasick==2.3.1 \
    fasttext-wheel==0.9.2 six==1.17.0
du -sh .whl
