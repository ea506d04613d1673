#!/usr/bin/env bash
# Install everything the tests need into a virtual environment ($VENV, default .venv: made if missing,
# reused if there) and run them. This is the README's test command; CI (.ci/run) runs it in a new one.
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV=${VENV:-.venv}
bash scripts/install.sh requirements-dev.txt  # the app, as scripts/start.sh installs it, and the tests' extras
. "$VENV/bin/activate"
# The vLLM backend's tests start a real vLLM server (its CPU build) from its own venv: its pins differ.
VLLM_VENV=${VLLM_VENV:-.venv-vllm}
if ! cmp -s requirements-vllm.txt "$VLLM_VENV/installed.txt"; then
  python3 -m venv "$VLLM_VENV"
  "$VLLM_VENV/bin/pip" install -q -r requirements-vllm.txt
  "$VLLM_VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  cp requirements-vllm.txt "$VLLM_VENV/installed.txt"
fi
export VLLM_PYTHON="$PWD/$VLLM_VENV/bin/python"
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
