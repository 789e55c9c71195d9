#!/usr/bin/env bash
# Install carried Python packages on an offline GPU machine (the H200 of the device tool).
# No downloads and no source builds: only wheels (and compressed pieces of wheels) that were
# carried in, plus longca itself (editable, no dependencies).
#
# usage: scripts/h200_setup.sh TARGET [DIR ...]
#   DIR/*.whl      installed with one `pip install --no-index --no-deps --target TARGET`
#                  (one call: nvidia-cutlass-dsl's wheels share a folder that a second
#                  --upgrade install into the same target would replace)
#   DIR/*.tar.xz   unpacked into TARGET (a wheel's files, minus pieces carried separately)
#   DIR/place.txt  lines "PIECE.xz RELATIVE/PATH": PIECE.xz decompressed to TARGET/RELATIVE/PATH
#                  (a large shared library, xz-compressed to fit the 64 MiB a call may carry)
#   DIR/NAME.whl.part-NN  byte pieces of one wheel (`split -b 40000000 -d NAME.whl NAME.whl.part-`),
#                  possibly spread over several DIRs: joined in NN order into NAME.whl first
# Every distribution of the repository is installed editable, as `make install` does, with the
# plugins named in LONGCA_PLUGINS_TO_INSTALL (default "fa2 fa3 fa4 cudnn flex"; "all" = every one).
# Afterwards export the PYTHONPATH this prints (TARGET and nvidia-cutlass-dsl's dsl_packages, which its .pth would add in a normal install).
set -euo pipefail
target=${1:?usage: scripts/h200_setup.sh TARGET [DIR ...]}
shift
mkdir -p "$target"
joined=$(mktemp -d)
for piece in $(for d in "$@"; do ls "$d"/*.whl.part-* 2>/dev/null; done | awk -F/ '{print $NF, $0}' | sort | cut -d' ' -f2); do
  name=$(basename "$piece"); cat "$piece" >> "$joined/${name%.part-*}"
done
wheels=()
for d in "$@" "$joined"; do
  for w in "$d"/*.whl; do [ -e "$w" ] && wheels+=("$w"); done
done
if [ ${#wheels[@]} -gt 0 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" "${wheels[@]}"
fi
for d in "$@"; do
  for t in "$d"/*.tar.xz; do [ -e "$t" ] && tar xJf "$t" -C "$target"; done
  if [ -f "$d/place.txt" ]; then
    while read -r piece dest; do
      [ -n "$piece" ] || continue
      mkdir -p "$target/$(dirname "$dest")"
      xz -dc "$d/$piece" > "$target/$dest"
    done < "$d/place.txt"
  fi
done
root=$(cd "$(dirname "$0")/.." && pwd)
# every distribution of the repository, editable, in `make install`'s order and modes
python3 -m pip install -q --no-index --no-deps --no-build-isolation --config-settings editable_mode=compat \
  -e "$root/core" 2>&1 | grep -v "^$" || true
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e "$root/longca_flashplan" -e "$root/longca_cp" \
  2>&1 | grep -v "^$" || true
python3 -m pip install -q --no-index --no-deps --no-build-isolation --config-settings editable_mode=compat \
  -e "$root/longca_runner" -e "$root/longca_testing" 2>&1 | grep -v "^$" || true
plugins=(-e "$root/longca_sim" -e "$root/longca_cli")
if [ "${LONGCA_PLUGINS_TO_INSTALL:-}" = all ]; then
  for d in "$root"/plugins/*/; do plugins+=(-e "$d"); done
else
  for p in ${LONGCA_PLUGINS_TO_INSTALL:-fa2 fa3 fa4 cudnn flex}; do plugins+=(-e "$root/plugins/$p"); done
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation "${plugins[@]}" 2>&1 | grep -v "^$" || true
echo "export PYTHONPATH=$target:$target/nvidia_cutlass_dsl/dsl_packages\${PYTHONPATH:+:\$PYTHONPATH}"
