#!/usr/bin/env bash
# Builds and installs the Python package `unipool` (torch_ext/) against the
# torch already installed: no build isolation, so the build sees that torch.
# The build tree (build/wheel/) is kept, so a re-run only rebuilds changes.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
  --no-build-isolation .
