#!/usr/bin/env bash
# Environment for the ONNX fixture scripts in tests/onnx/ (export.py, make_large.py,
# make_weights.py) and for checking collage against ONNX Runtime.
#
# Usage: tests/onnx/setup-env.sh [VENV_DIR]        (default: ~/.cache/collage/onnx-venv)
#
# - Debian packages (bookworm): python3-torch 1.13 and python3-torchvision 0.14 (CPU builds),
#   with Debian's numpy 1.24; installed with apt-get when missing (needs root).
# - A virtual environment made from /usr/bin/python3 (the interpreter Debian's torch is built for,
#   not a pyenv one that may come first on PATH) with --system-site-packages, so it sees Debian's
#   torch, torchvision and numpy; pip installs the pinned packages below into it.
# - numpy stays below 2: Debian's torch 1.13 is built against numpy 1.x.
#
# Keep the environment outside the repository. Afterwards: VENV_DIR/bin/python tests/onnx/export.py
set -euo pipefail

venv=${1:-$HOME/.cache/collage/onnx-venv}

# Pins: tests/onnx/requirements.txt (transformers 4.36.2, onnx 1.22.0, onnxruntime 1.23.2,
# numpy<2, and their dependencies).
requirements="$(cd "$(dirname "$0")" && pwd)/requirements.txt"
deb_packages=(python3-torch python3-torchvision python3-venv python3-pip)

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
for p in "${deb_packages[@]}"; do
    installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup-env.sh: missing Debian packages ${missing[*]}; run as root, or: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    echo "setup-env.sh: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

repo="$(cd "$(dirname "$0")/../.." && pwd)"
case "$(realpath -m "$venv")" in
    "$repo" | "$repo"/*)
        echo "setup-env.sh: $venv is inside the repository; put the environment elsewhere" >&2
        exit 1 ;;
esac

if [[ ! -x "$venv/bin/python" ]]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
export HF_HUB_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
"$venv/bin/python" -m pip install -q -r "$requirements"

# Check the environment: versions, and that torch imports with the numpy that pip left in place.
"$venv/bin/python" - <<'PY'
import numpy, torch, torchvision, transformers, onnx, onnxruntime
assert numpy.__version__.startswith("1."), numpy.__version__
assert torch.__version__.startswith("1.13"), torch.__version__
assert torchvision.__version__.startswith("0.14"), torchvision.__version__
torch.from_numpy(numpy.zeros(2, dtype=numpy.float32))
for m in (numpy, torch, torchvision, transformers, onnx, onnxruntime):
    print(f"{m.__name__} {m.__version__}")
PY
