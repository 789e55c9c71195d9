#!/usr/bin/env bash
# The wheels a GPU machine without network needs for every installable dense plugin (fa4, flex-fa4,
# cudnn's frontend path, cudnn-flex, sage) and longca itself (pydantic), in two folders that each fit
# one device call's 64 MiB with the working tree (move docs/results, 18 MB, out of the checkout
# while calling; it is not needed there):
#   OUT/A  nvidia-cutlass-dsl-libs-cu13's 193 MB MLIR library as xz (50 MB; so/place.txt says where it
#          goes), the pydantic set and sageattention (py/)
#   OUT/B  the other wheels, and the rest of libs-cu13 as libs_cu13_rest.tar.xz
# On the machine, after both calls: bash scripts/h200_setup.sh TARGET A/py A/so B (one install).
#
#   OUT/TE/1 ... OUT/TE/5  with WITH_TE=1: TransformerEngine 2.20.2's core wheel (transformer-engine-cu13,
#          276.5 MB) as five byte pieces of 55.3 MB (room for the working tree and 7 MB more in a call), one
#          folder a call, the meta wheel in the last; the torch extension's sdist and MagiAttention's
#          sources are fetched by scripts/te_ffa_sources.sh (plugins/te/README.md, plugins/ffa/README.md)
#
# usage: bash scripts/h200_wheels.sh OUT        (downloads with pip into OUT/cache; about 3 min of xz)
set -euo pipefail
out=${1:?usage: scripts/h200_wheels.sh OUT}
cache="$out/cache"
mkdir -p "$cache" "$out/A/py" "$out/A/so" "$out/B"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done
get() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          "${platforms[@]}" -d "$cache" "$@"; }
get pydantic pydantic-core annotated-types typing-inspection "typing-extensions>=4.14" sageattention==1.0.6
get flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
    nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi==0.1.15.post2 \
    torch-c-dlpack-ext==0.1.5 quack-kernels==0.6.5 cuda-tile==1.7.0 nvidia-cudnn-frontend==1.32.0
for w in pydantic- pydantic_core- annotated_types- typing_inspection- typing_extensions- sageattention-; do
  cp "$cache/$w"*.whl "$out/A/py/"
done
for w in "$cache"/*.whl; do
  case "$(basename "$w")" in
    pydantic*|annotated_types*|typing_*|sageattention*|nvidia_cutlass_dsl_libs_cu13*) ;;
    *) cp "$w" "$out/B/" ;;
  esac
done
so=nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
unpacked=$(mktemp -d)
python3 -m zipfile -e "$cache"/nvidia_cutlass_dsl_libs_cu13-*.whl "$unpacked"
xz -T0 -9 -c "$unpacked/$so" > "$out/A/so/cutlass_ir.so.xz"
echo "cutlass_ir.so.xz $so" > "$out/A/so/place.txt"
rm "$unpacked/$so"
tar cJf "$out/B/libs_cu13_rest.tar.xz" -C "$unpacked" .
rm -rf "$unpacked"
if [ "${WITH_TE:-}" = 1 ]; then
  get transformer-engine==2.20.2 transformer-engine-cu13==2.20.2
  pieces=$(mktemp -d)
  split -n 5 -d "$cache"/transformer_engine_cu13-2.20.2-*.whl "$pieces/$(basename "$cache"/transformer_engine_cu13-2.20.2-*.whl).part-"
  n=0
  for piece in "$pieces"/*.part-*; do n=$((n + 1)); mkdir -p "$out/TE/$n"; mv "$piece" "$out/TE/$n/"; done
  cp "$cache"/transformer_engine-2.20.2-*.whl "$out/TE/$n/"
  rmdir "$pieces"
  du -sh "$out"/TE/*
fi
du -sh "$out/A" "$out/B"
