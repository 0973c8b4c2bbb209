#!/usr/bin/env bash
# Installs what teletron's build needs, only what is missing, then configures and builds into
# build/ (the executable is build/teletron). Sourced by quickstart.sh and test.sh; safe to rerun:
# with everything in place it only runs an incremental build.
# Debian 12: apt packages (Catch2 v3 from bookworm-backports) + `pip install torch==2.11.0`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

say() { echo "[setup] $*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "[setup] need root to run: $*" >&2; exit 1; fi
}

# --- system packages -------------------------------------------------------------------------
packages=(g++ cmake ninja-build ccache pkg-config python3 python3-pip python3-venv ffmpeg libyaml-cpp-dev libcli11-dev libspdlog-dev
          libfmt-dev nlohmann-json3-dev libavformat-dev libavcodec-dev libavutil-dev libswscale-dev
          libffmpeg-nvenc-dev libprotobuf-dev protobuf-compiler)
missing=()
if command -v dpkg >/dev/null; then
  for pkg in "${packages[@]}"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
fi
catch2_ok=0
for dir in /usr/lib/cmake/Catch2 /usr/lib/x86_64-linux-gnu/cmake/Catch2 /usr/local/lib/cmake/Catch2; do
  if grep -qs 'PACKAGE_VERSION "3' "$dir/Catch2ConfigVersion.cmake"; then catch2_ok=1; fi
done
if [ ${#missing[@]} -gt 0 ] || [ $catch2_ok -eq 0 ]; then
  say "installing: ${missing[*]} $([ $catch2_ok -eq 0 ] && echo 'catch2 (v3)')"
  export DEBIAN_FRONTEND=noninteractive
  if [ $catch2_ok -eq 0 ] && grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
    # Plain bookworm has Catch2 v2; v3 lives in bookworm-backports.
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo 'deb http://deb.debian.org/debian bookworm-backports main' |
        as_root tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    fi
  fi
  as_root apt-get update -qq
  [ ${#missing[@]} -gt 0 ] && as_root apt-get install -y -qq "${missing[@]}" >/dev/null
  if [ $catch2_ok -eq 0 ]; then
    if grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
      as_root apt-get install -y -qq -t bookworm-backports catch2 >/dev/null
    else
      as_root apt-get install -y -qq catch2 >/dev/null
    fi
  fi
fi

# --- LibTorch (pip wheel) --------------------------------------------------------------------
python=${TELETRON_PYTHON:-python3}
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  if [ -x "$root/.venv/bin/python" ]; then
    python="$root/.venv/bin/python"
  fi
fi
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.11") else 1)' >/dev/null 2>&1; then
  say "installing torch==2.11.0 (LibTorch headers and libraries) with pip"
  if ! "$python" -m pip install -q torch==2.11.0 2>/tmp/teletron-pip.log; then
    # Distro Pythons refuse system-wide pip installs (PEP 668): use a project venv instead.
    say "system pip refused; using a virtual environment in .venv"
    python3 -m venv "$root/.venv"
    python="$root/.venv/bin/python"
    "$python" -m pip install -q torch==2.11.0
  fi
fi

# The Python packages the parity and reader tests use (test/python, scripts/check_*.py): the text
# encoders against diffusers' encode_prompt, exports loaded by diffusers + peft, TensorBoard's own
# event reader. One at a time (pip's resolver has tripped over a combined install here); a missing
# one makes its tests skip, so a failed install fails the setup instead.
for pkg in tokenizers==0.23.3 transformers==5.25.0 diffusers==0.42.1 peft==0.21.2 tensorboard==2.21.0; do
  name=${pkg%%==*}
  version=${pkg#*==}
  if ! "$python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('$name') == '$version' else 1)" >/dev/null 2>&1; then
    say "installing $pkg (tests)"
    "$python" -m pip install -q "$pkg" || { say "pip could not install $pkg"; exit 1; }
  fi
done

# TELETRON_SETUP_NO_BUILD=1 stops here (scripts/ci.sh times installing and building apart).
if [ "${TELETRON_SETUP_NO_BUILD:-0}" = 1 ]; then
  say "installed; not building (TELETRON_SETUP_NO_BUILD=1)"
  exit 0
fi

# --- configure + build -----------------------------------------------------------------------
build=${TELETRON_BUILD_DIR:-$root/build}
if [ ! -f "$build/build.ninja" ]; then
  say "configuring $build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$python" || echo "$python")" \
    ${TELETRON_CMAKE_ARGS:-} >/tmp/teletron-configure.log 2>&1 || { tail -40 /tmp/teletron-configure.log; exit 1; }
fi
jobs=${TELETRON_JOBS:-$(nproc)}
say "building ($jobs jobs)"
cmake --build "$build" -j "$jobs"
