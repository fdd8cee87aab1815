#!/usr/bin/env bash
# Wheels for the lent GPU machine (no network there, no package index; python3 3.12 with torch, numpy 2.x and
# opencv-python-headless preinstalled: /work/.library/device/KINDS.md). Run here, where pip reaches an index:
#
#     benchmarks/gpu_wheels.sh [DEST]          # DEST defaults to .whl (ignored by git), PYVER=3.12
#     PYVER=3.11 benchmarks/gpu_wheels.sh /tmp/whl311   # the same sets for this machine's python
#
# Two sets, installed there with `python3 -m pip install --no-index --no-deps --target DIR DEST/SET/*.whl`:
#   DEST/ours: what train.py on Atari needs beyond the image (versions as pinned in constraints.txt);
#   DEST/sf2:  Sample Factory 2.1.1 and its numpy<2 / gymnasium<1.0 stack, for benchmark_sf2 --sf2_wheels. The SF2
#              wheel is slimmed: sf_examples/vizdoom (its scenario files, 8 of its 9 MB) is left out.
# Not carried, because the image has them (SF2 runs with them): torch, opencv (SF2 asks for opencv-python; the image's
# headless build is the same cv2 module), psutil, threadpoolctl, filelock, cloudpickle, typing-extensions, protobuf,
# packaging, tensorboard. Left out on purpose: SF2's wandb, huggingface-hub<1.0 and pyglet (imported only by
# --with_wandb, its Hub upload and rendering, none of which the benchmark uses).
set -euo pipefail

DEST=${1:-.whl}
PYVER=${PYVER:-3.12}
OURS=(gymnasium==1.4.0 ale-py==0.12.1 tensorboardX==2.6.5 faster-fifo==1.5.2 farama-notifications==0.0.6)
SF2=(numpy==1.26.4 gymnasium==0.29.1 ale-py==0.9.1 tensorboardX==2.6.5 faster-fifo==1.5.2 colorlog==6.12.0
    signal-slot-mp==1.0.5 farama-notifications==0.0.6)

download() {  # download DIR SPEC...: one wheel per spec, for PYVER on manylinux x86_64 (pure-python ones as "any")
    local dir=$1
    shift
    mkdir -p "$dir"
    local platforms=()
    for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
        platforms+=(--platform "${p}_x86_64")
    done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
        "${platforms[@]}" --platform any -d "$dir" "$@" 2> >(grep -v "is ignored: it is neither" >&2)
}

download "$DEST/ours" "${OURS[@]}"
download "$DEST/sf2" "${SF2[@]}"

# SF2's wheel without sf_examples/vizdoom (its RECORD rewritten to match, so pip installs it as usual)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
download "$tmp" sample-factory==2.1.1
rm -f "$DEST"/sf2/sample_factory-*.whl
python3 - "$tmp"/sample_factory-2.1.1-py3-none-any.whl "$DEST/sf2/sample_factory-2.1.1-py3-none-any.whl" <<'EOF'
import sys
import zipfile

src, dst = sys.argv[1:]
drop = "sf_examples/vizdoom/"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    for item in zin.infolist():
        if item.filename.startswith(drop):
            continue
        data = zin.read(item.filename)
        if item.filename.endswith(".dist-info/RECORD"):
            data = b"".join(ln for ln in data.splitlines(keepends=True) if not ln.startswith(drop.encode()))
        zout.writestr(item, data)
EOF

for set in ours sf2; do
    n=$(ls "$DEST/$set"/*.whl | wc -l)
    echo "$DEST/$set: $n wheels, $(du -sh "$DEST/$set" | cut -f1)"
done
du -sh "$DEST"
