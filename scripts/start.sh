#!/usr/bin/env bash
# Set up and start the app on the embedded model, at http://127.0.0.1:7860: the README's quick start.
# scripts/install.sh installs it into $VENV (default .venv; a second run installs nothing), then app.py
# runs with this script's arguments (--mcp, --backend vllm --server-url URL: docs/configuration.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export VENV=${VENV:-.venv}
bash scripts/install.sh
exec "$VENV/bin/python" app.py "$@"
