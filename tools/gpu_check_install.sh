#!/usr/bin/env bash
# tools/gpu_check.sh's setup on the lent GPU machine: the wheels in .whl/ (tools/gpu_check_wheels.sh)
# into the image's python3 (its venv; no index, no dependencies: nothing can be fetched there), and
# this checkout put on its path before the extension's start-up hook (onmt_posenc_startup.pth), as
# `pip install -e .` would. Dry run here, against a throwaway venv standing for the image's
# (docs/benchmarks.md): PATH=/tmp/image-venv/bin:$PATH bash tools/gpu_check_install.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD" >"$site/onmt_posenc_checkout.pth"  # before onmt_posenc_startup.pth, alphabetically
cp onmt_posenc_startup.pth "$site/"
# from another folder, so that the checkout comes from the .pth, not from the working directory
checkout=$PWD
(cd / && python3 -c "import sys, onmt_posenc.startup as hook
assert hook.__file__.startswith('$checkout/'), hook.__file__
print('python', sys.version.split()[0], sys.executable, '| onmt_posenc from', hook.__file__)")
# the wheels' compiled parts load in this Python (onmt itself needs the image's torch)
python3 -c "import configargparse, pyonmttok, rapidfuzz, ahocorasick, fasttext, six; print('the wheels import')"
python3 -m pip list --format=freeze 2>/dev/null \
    | grep -iE '^(opennmt-py|configargparse|pyonmttok|rapidfuzz|pyahocorasick|fasttext-wheel|six)=='
