#!/usr/bin/env bash
# package.sh - the Debian packages of a built tree (cmake/Packaging.cmake):
# rkv-client, rkv-server and, when the Python module is built, python3-rkv,
# written to BUILD_DIR/packages/, then checked without installing them:
# each package's control fields and files are listed, the packages are
# unpacked into one scratch root, and what they hold runs from there
# (kvctl --version, rkv-server and rkv-coordinator --help, `import rkv`),
# which proves that the binaries find the packaged libraries and that
# dpkg-shlibdeps gave every package its Debian dependencies.
#
# Usage: deploy/package.sh [--build_dir=DIR] [--no_check]
#
#   --build_dir  a configured and built tree (default build/release);
#                nothing is built here (deploy/build.sh release builds it).
#   --no_check   make the packages only.
#
# To install them on a Debian 12 host (as root): apt-get install
# ./build/release/packages/*.deb. A clean Debian 12 check, in a container:
#   docker run --rm -v "$PWD/build/release/packages:/p" debian:12 sh -c \
#     'apt-get update && apt-get install -y /p/*.deb && kvctl --version &&
#      rkv-server --help | head -3 && python3 -c "import rkv; print(rkv.__doc__)"'
#
# Exit status: 0 when the packages were made (and checked), 1 when a step
# failed, 2 for bad usage or a tree that is not built.
set -euo pipefail

die() { printf 'package.sh: ERROR: %s\n' "$*" >&2; exit 2; }
fail() { printf 'package.sh: FAILED: %s\n' "$*" >&2; exit 1; }

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
build_dir=$repo/build/release
check=1
for arg in "$@"; do
  case "$arg" in
    --build_dir=*) build_dir=${arg#*=} ;;
    --no_check) check=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$arg' (see --help)" ;;
  esac
done
build_dir=$(cd "$build_dir" 2>/dev/null && pwd -P) || die "no build directory $build_dir (deploy/build.sh release)"
[ -f "$build_dir/CPackConfig.cmake" ] || die "$build_dir has no CPackConfig.cmake: configure it with this tree's CMakeLists.txt"
for bin in server/rkv-server coordinator/rkv-coordinator client/kvctl; do
  [ -x "$build_dir/$bin" ] || die "$build_dir/$bin is not built (deploy/build.sh release)"
done
command -v cpack > /dev/null || die "cpack not found (Debian: cmake)"
command -v dpkg-shlibdeps > /dev/null || die "dpkg-shlibdeps not found (Debian: dpkg-dev; deploy/install-deps.sh)"

out=$build_dir/packages
rm -rf "$out"
mkdir -p "$out"
echo "== making the packages in $out"
(cd "$build_dir" && cpack --config CPackConfig.cmake -B "$out" > "$out/cpack.log" 2>&1) ||
  { tail -30 "$out/cpack.log" >&2; fail "cpack failed (log: $out/cpack.log)"; }
mapfile -t debs < <(find "$out" -maxdepth 1 -name '*.deb' | sort)
[ "${#debs[@]}" -ge 2 ] || fail "cpack made ${#debs[@]} packages, expected rkv-client and rkv-server at least"
for deb in "${debs[@]}"; do
  printf '%s\n' "$(basename "$deb")"
  dpkg-deb --field "$deb" Package Version Depends | sed 's/^/  /'
done
[ "$check" = 1 ] || exit 0

echo "== checking them, unpacked into a scratch root"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
for deb in "${debs[@]}"; do
  dpkg-deb --extract "$deb" "$root"
done
expect_file() {
  [ -e "$root/$1" ] || fail "no /$1 in the packages"
}
expect_file usr/bin/kvctl
expect_file usr/bin/rkv-server
expect_file usr/bin/rkv-coordinator
expect_file usr/include/rkv/client.h
expect_file usr/lib/systemd/system/rkv-server@.service
grep -q '^ExecStart=/usr/bin/rkv-server ' "$root/usr/lib/systemd/system/rkv-server@.service" ||
  fail "the packaged rkv-server@.service does not start /usr/bin/rkv-server"
for pkg in rkv-client rkv-server; do
  deb=$(printf '%s\n' "${debs[@]}" | grep "/${pkg}_" || true)
  [ -n "$deb" ] || fail "no $pkg package"
  depends=$(dpkg-deb --field "$deb" Depends)
  case "$depends" in
    *libc6*) ;;
    *) fail "$pkg has no shared-library dependencies (Depends: '$depends'): dpkg-shlibdeps did not run" ;;
  esac
done
# The binaries run from the unpacked root: they find the packaged
# libraries through their RUNPATH ($ORIGIN/../lib), none from the build.
(cd / && env -u LD_LIBRARY_PATH "$root/usr/bin/kvctl" --version) || fail "the packaged kvctl --version failed"
for bin in rkv-server rkv-coordinator; do
  help=$(cd / && env -u LD_LIBRARY_PATH "$root/usr/bin/$bin" --help 2>&1) ||
    fail "the packaged $bin --help failed: $(head -5 <<< "$help")"
  grep -q -- '--listen' <<< "$help" || fail "the packaged $bin --help did not print its flags: $(head -5 <<< "$help")"
done
if printf '%s\n' "${debs[@]}" | grep -q '/python3-rkv_'; then
  module=$(find "$root/usr/lib" -path '*/dist-packages/*' -name 'rkv*.so' | head -1)
  [ -n "$module" ] || fail "python3-rkv holds no module rkv*.so under dist-packages"
  (cd / && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$module")" /usr/bin/python3 -c 'import rkv; rkv.Client') ||
    fail "the packaged module does not import"
fi
echo "package.sh: ${#debs[@]} packages made and checked: $(printf '%s ' "${debs[@]##*/}")"
