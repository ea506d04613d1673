#!/usr/bin/env bash
# Install everything the tests need into a virtual environment ($VENV, default .venv: made if missing,
# reused if there) and run them. This is the README's test command; CI (.ci/run) runs it in a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV=${VENV:-.venv}
bash scripts/install.sh requirements-dev.txt  # the app, as scripts/start.sh installs it, and the tests' extras
. "$VENV/bin/activate"
# The server backends' tests start real servers, each from its own venv (their pins differ from the app's), made
# once and again only when its requirements file changes.
server_venv() {  # VENV REQUIREMENTS [PACKAGES TO REMOVE AFTER INSTALLING...]
  local venv=$1 requirements=$2
  shift 2
  if ! cmp -s "$requirements" "$venv/installed.txt"; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$requirements"
    if [ $# -gt 0 ]; then "$venv/bin/pip" uninstall -q -y "$@"; fi
    cp "$requirements" "$venv/installed.txt"
  fi
}
# vLLM's CPU build (~3 GB).
VLLM_VENV=${VLLM_VENV:-.venv-vllm}
server_venv "$VLLM_VENV" requirements-vllm.txt torchvision torchaudio torchcodec
export VLLM_PYTHON="$PWD/$VLLM_VENV/bin/python"
# llama-cpp-python's server: llama.cpp compiled from source (3.5-6 minutes on 2 cores; pip keeps the wheel it builds).
LLAMA_CPP_VENV=${LLAMA_CPP_VENV:-.venv-llama-cpp}
server_venv "$LLAMA_CPP_VENV" requirements-llama-cpp.txt
export LLAMA_CPP_PYTHON="$PWD/$LLAMA_CPP_VENV/bin/python"
# The browser tests drive Debian's chromium (Playwright's own browser download needs the internet).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "Browser tests need Debian's chromium: sudo apt-get install chromium" >&2
  fi
fi
export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1
ruff check .  # style first: a long line or an unsorted import fails here, in a second
npm ci --silent  # eslint, as package-lock.json pins it
npx eslint ui/static  # the page's scripts, each as the page runs it (eslint.config.js)
python -m pytest -q "$@"
