#!/usr/bin/env bash
# check-packages.sh - the Debian packages of deploy/package.sh installed and
# run on a fresh Debian 12, as a user would get them (docs/design.md §11.5).
# Not part of CI: it needs root and a Debian mirror, and downloads a Debian
# root and what the packages depend on (half a minute next to a fast
# mirror, longer on a slow link). Run it by hand before a release or after
# changing cmake/Packaging.cmake or deploy/debian/.
#
# Usage: deploy/check-packages.sh [--build DIR] [--keep] [--mirror URL]
#
#   --build DIR   the build tree whose packages/ holds the .deb files
#                 (default build/release). When packages/ has none they are
#                 made first with deploy/package.sh --build_dir=DIR, which
#                 needs the tree built (deploy/build.sh release). Packages
#                 already there are checked as they are, even when older
#                 than the tree: run deploy/package.sh to remake them.
#   --keep        keep the Debian root (its path is printed) for a look:
#                 chroot ROOT bash. It is removed at exit otherwise.
#   --mirror URL  the Debian archive to build the root from, bookworm and
#                 bookworm-updates (default: the first URI of the host's apt
#                 sources that serves bookworm, else
#                 http://deb.debian.org/debian). bookworm-security comes
#                 from the host's URI for it.
#
# Runs as root, on a host with apt-get (mmdebstrap is installed when
# missing) and network to the mirror; the root resolves names with the
# host's /etc/resolv.conf and shares its network. The steps:
#   1. packages  the build folder's packages/*.deb, made when there are none
#   2. root      mmdebstrap --variant=apt bookworm: Essential packages and
#                apt only, in a folder under /tmp, with the host's
#                bookworm-updates and bookworm-security suites when it has
#                them
#   3. install   apt-get install -y /tmp/pkgs/*.deb in the root (/proc,
#                /sys and /dev mounted, a policy-rc.d that starts no
#                service), so apt resolves what they need from Debian alone:
#                this is what proves their Depends complete
#   4. user      rkv-server's postinst made the system user rkv and /etc/rkv;
#                the packaged libraries are in ld.so's cache
#   5. commands  rkv-server, kvctl and rkv-coordinator on PATH; rkv-server
#                --help and kvctl --version run
#   6. serve     rkv-server --transport=tcp, run as the user rkv with its
#                token in /etc/rkv as the systemd unit has it, on a free
#                port of 127.0.0.1; kvctl puts a key and gets it back; the
#                Python module (python3-rkv, when made) reads that key and
#                puts and gets one of its own; SIGTERM stops the server,
#                which must exit 0
# Each step is printed with the seconds since the start, then one line:
# "check-packages: OK (...)", or "check-packages: FAILED in step S after
# Ns: ..."
# with the tail of that step's log.
#
# Exit status: 0 when every step passed, 1 when one failed (package.sh
# failing to make the packages included), 2 for bad usage, not root, or no
# build directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { printf 'check-packages: ERROR: %s\n' "$*" >&2; exit 2; }

build_dir=$repo/build/release
keep=0
mirror=
while [ $# -gt 0 ]; do
  case "$1" in
    --build) [ $# -ge 2 ] || die "--build needs a directory"; build_dir=$2; shift ;;
    --build=*) build_dir=${1#*=} ;;
    --keep) keep=1 ;;
    --mirror) [ $# -ge 2 ] || die "--mirror needs a URL"; mirror=$2; shift ;;
    --mirror=*) mirror=${1#*=} ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || die "run it as root: it builds a Debian root and chroots into it"
[ -d "$build_dir" ] || die "no build directory $build_dir (deploy/build.sh release)"
build_dir=$(cd "$build_dir" && pwd -P)

# --- reporting --------------------------------------------------------------
start=$SECONDS
step_name=setup
step_log=
step() {
  step_name=$1
  step_log=${3:-}
  printf 'check-packages: [%4ds] %s: %s\n' $((SECONDS - start)) "$1" "$2"
}
note() { printf 'check-packages:         %s\n' "$*"; }
failed=0
fail() {
  failed=1
  printf 'check-packages: FAILED in step %s after %ds: %s\n' "$step_name" $((SECONDS - start)) "$*" >&2
  if [ -n "$step_log" ] && [ -s "$step_log" ]; then
    printf -- '--- last lines of %s\n' "$step_log" >&2
    tail -25 "$step_log" >&2
  fi
  exit 1
}

# --- cleanup ----------------------------------------------------------------
work=
root=
server_pid=
cleanup() {
  local status=$?
  # A second signal must not cut the unmounting short.
  trap - EXIT
  trap '' INT TERM
  if [ "$status" != 0 ] && [ "$failed" = 0 ]; then
    local why="a command exited with status $status"
    case "$status" in 130|143) why="interrupted by a signal" ;; esac
    printf 'check-packages: FAILED in step %s after %ds: %s\n' "$step_name" $((SECONDS - start)) "$why" >&2
    if [ -n "$step_log" ] && [ -s "$step_log" ]; then tail -25 "$step_log" >&2; fi
  fi
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  local mounted=0 m
  if [ -n "$root" ]; then
    for m in dev sys proc; do
      if mountpoint -q "$root/$m"; then
        umount "$root/$m" 2>/dev/null || umount -l "$root/$m" || mounted=1
      fi
    done
  fi
  if [ -n "$work" ] && [ -d "$work" ]; then
    # Never remove through a mount that is still there (the host's /dev).
    if grep -q " $work/" /proc/self/mounts; then mounted=1; fi
    if [ "$keep" = 1 ]; then
      printf 'check-packages: kept the Debian root: %s (chroot %s bash; remove with rm -rf %s)\n' \
        "$root" "$root" "$work"
    elif [ "$mounted" = 1 ]; then
      printf 'check-packages: %s not removed: something is still mounted under it\n' "$work" >&2
    else
      rm -rf --one-file-system "$work"
    fi
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- 1. the packages --------------------------------------------------------
packages=$build_dir/packages
step packages "the .deb files of $packages"
shopt -s nullglob
debs=("$packages"/*.deb)
if [ "${#debs[@]}" = 0 ]; then
  note "none there: deploy/package.sh --build_dir=$build_dir"
  "$repo/deploy/package.sh" --build_dir="$build_dir" --no_check ||
    fail "deploy/package.sh could not make the packages (exit status $?)"
  debs=("$packages"/*.deb)
fi
shopt -u nullglob
names=()
pkg_list=
python_pkg=0
for deb in "${debs[@]}"; do
  name=$(dpkg-deb --field "$deb" Package) || fail "$deb is not a Debian package"
  names+=("$name=$(dpkg-deb --field "$deb" Version)")
  pkg_list="$pkg_list${pkg_list:+ }$name"
  [ "$name" = python3-rkv ] && python_pkg=1
done
for want in rkv-client rkv-server; do
  printf '%s\n' "${names[@]}" | grep -q "^$want=" || fail "no $want package in $packages"
done
note "${names[*]}"

# --- 2. the Debian root -----------------------------------------------------
# The host's apt sources as "URI SUITE" lines, one-line and deb822 formats.
host_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && NF >= 3 { print $2, $3 }'
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # A comment line is no stanza break: drop it whole.
    sed -e '/^[[:space:]]*#/d' -e 's/#.*//' "$f" | awk '
      function flush(  i, j, u, s) {
        if (types ~ /(^| )deb( |$)/ && enabled != "no") {
          nu = split(uris, u, " "); ns = split(suites, s, " ")
          for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++) print u[i], s[j]
        }
        types = uris = suites = ""; enabled = "yes"
      }
      BEGIN { enabled = "yes" }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "types:" { $1 = ""; types = $0 }
      tolower($1) == "uris:" { $1 = ""; uris = $0 }
      tolower($1) == "suites:" { $1 = ""; suites = $0 }
      tolower($1) == "enabled:" { enabled = tolower($2) }
      END { flush() }'
  done
}
sources=$(host_sources | sed 's/ \{1,\}/ /g; s/^ //')
first_uri() { awk -v s="$1" '$2 == s { print $1; exit }' <<< "$sources"; }
[ -n "$mirror" ] || mirror=$(first_uri bookworm)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
suites=("deb $mirror bookworm main")
[ -n "$(first_uri bookworm-updates)" ] && suites+=("deb $mirror bookworm-updates main")
security=$(first_uri bookworm-security)
[ -n "$security" ] && suites+=("deb $security bookworm-security main")

work=$(mktemp -d /tmp/rkv-check-packages.XXXXXX)
chmod 755 "$work"  # apt's download user _apt reaches the root through it
root=$work/root
# A command in the root, with a clean environment. An array, not a
# function: a function's redirections would still hold while a signal's
# trap runs after it, and the trap's report would land in the step's log.
in_root=(chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
         HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
step root "mmdebstrap --variant=apt bookworm $root" "$work/mmdebstrap.log"
for line in "${suites[@]}"; do note "$line"; done
if ! command -v mmdebstrap > /dev/null; then
  note "installing mmdebstrap (apt-get install mmdebstrap)"
  command -v apt-get > /dev/null || fail "no mmdebstrap and no apt-get to install it with"
  # Each command redirected on its own: a signal's trap then runs with the
  # script's own stderr, not with a group's log.
  log=$work/mmdebstrap.log
  apt-get install -y --no-install-recommends mmdebstrap >> "$log" 2>&1 ||
    { apt-get update >> "$log" 2>&1 && apt-get install -y --no-install-recommends mmdebstrap >> "$log" 2>&1; } ||
    fail "apt-get install mmdebstrap failed"
fi
mmdebstrap --mode=root --variant=apt bookworm "$root" "${suites[@]}" >> "$work/mmdebstrap.log" 2>&1 ||
  fail "mmdebstrap could not build a bookworm root from $mirror"

# --- 3. installing the packages ---------------------------------------------
step install "apt-get install -y /tmp/pkgs/*.deb in the root" "$work/apt.log"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --bind /dev "$root/dev"
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
# No service starts in the root (invoke-rc.d asks policy-rc.d; 101: denied).
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
mkdir -p "$root/tmp/pkgs"
cp "${debs[@]}" "$root/tmp/pkgs/"
chmod 755 "$root/tmp/pkgs"
chmod 644 "$root"/tmp/pkgs/*.deb
"${in_root[@]}" apt-get update > "$work/apt.log" 2>&1 || fail "apt-get update failed in the root"
"${in_root[@]}" sh -c 'apt-get install -y /tmp/pkgs/*.deb' >> "$work/apt.log" 2>&1 ||
  fail "apt-get could not install the packages from Debian 12 alone (incomplete Depends?)"
new=$(grep -c '^Setting up ' "$work/apt.log" || true)
note "$new packages set up, the Debian ones they depend on included"
for entry in "${names[@]}"; do
  name=${entry%%=*}
  # shellcheck disable=SC2016 # dpkg-query's format, not the shell's
  "${in_root[@]}" dpkg-query -W -f='${db:Status-Status}' "$name" 2>/dev/null | grep -qx installed ||
    fail "$name is not installed after apt-get install"
done

# --- 4. the system user -----------------------------------------------------
step user "the postinst made the system user rkv and /etc/rkv"
passwd_line=$("${in_root[@]}" getent passwd rkv) || fail "no user rkv in the root"
uid=$(cut -d: -f3 <<< "$passwd_line")
[ "$uid" -lt 1000 ] || fail "rkv is not a system user (uid $uid)"
"${in_root[@]}" getent group rkv > /dev/null || fail "no group rkv in the root"
[ "$("${in_root[@]}" stat -c '%a %U %G' /etc/rkv)" = "750 root rkv" ] ||
  fail "/etc/rkv is not 750 root:rkv: $("${in_root[@]}" stat -c '%a %U %G' /etc/rkv)"
note "$passwd_line"
# The packaged libraries are in ld.so's cache (rkv-client's ldconfig,
# rkv-server's ldconfig trigger), as a program built against them needs.
"${in_root[@]}" ldconfig -p > "$work/ldconfig.txt"
for lib in $("${in_root[@]}" dpkg -L rkv-client rkv-server | sed -n 's|^/usr/lib/\([^/]*\)\.so\..*|\1|p' | sort -u); do
  soname=$(awk -v l="$lib" 'index($1, l ".so.") == 1 { print $1; exit }' "$work/ldconfig.txt")
  [ -n "$soname" ] || fail "no $lib in ld.so's cache"
  note "$soname in ld.so's cache"
done

# --- 5. the commands --------------------------------------------------------
step commands "rkv-server, kvctl and rkv-coordinator on PATH" "$work/commands.log"
# shellcheck disable=SC2016 # expanded by the root's shell
"${in_root[@]}" sh -c 'for c in rkv-server kvctl rkv-coordinator; do command -v "$c" || echo "no $c"; done' \
  > "$work/commands.log" 2>&1
if grep -q '^no ' "$work/commands.log"; then
  fail "not every command is on PATH: $(paste -sd ' ' "$work/commands.log")"
fi
note "$(paste -sd ' ' "$work/commands.log")"
"${in_root[@]}" rkv-server --help > "$work/commands.log" 2>&1 || fail "rkv-server --help failed"
grep -q -- '-token_file' "$work/commands.log" || fail "rkv-server --help did not print its flags"
"${in_root[@]}" kvctl --version >> "$work/commands.log" 2>&1 || fail "kvctl --version failed"
note "$(tail -1 "$work/commands.log")"

# --- 6. serving -------------------------------------------------------------
step serve "rkv-server --transport=tcp as the user rkv; kvctl and Python" "$work/serve.log"
# As the systemd unit has it: the token in /etc/rkv (group rkv), the data
# in /var/lib/rkv, the server running as rkv.
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$root/etc/rkv/token"
"${in_root[@]}" sh -c 'chown root:rkv /etc/rkv/token && chmod 640 /etc/rkv/token &&
  install -d -o rkv -g rkv -m 750 /var/lib/rkv /var/lib/rkv/check'
# Port 0: the server picks a free port and prints it (the chroot shares the
# host's network). server.out exists before the server's shell opens it.
: > "$work/server.out"
# $! is the server's pid: chroot, env and setpriv exec, so SIGTERM reaches it.
"${in_root[@]}" setpriv --reuid=rkv --regid=rkv --init-groups \
  rkv-server --transport=tcp --listen=127.0.0.1:0 --data_dir=/var/lib/rkv/check \
  --token_file=/etc/rkv/token --memory=64M > "$work/server.out" 2> "$work/serve.log" &
server_pid=$!
address=
for _ in $(seq 1 300); do
  address=$(sed -n 's/^rkv-server listening on \([^ ]*\) .*/\1/p' "$work/server.out")
  [ -n "$address" ] && break
  kill -0 "$server_pid" 2>/dev/null || fail "rkv-server exited before it listened"
  sleep 0.1
done
[ -n "$address" ] || fail "rkv-server did not listen within 30 s"
note "$(head -1 "$work/server.out")"
flags=(--server="$address" --token_file=/etc/rkv/token --transport=tcp)
value="rkv-check-$(date +%s)-$$"
"${in_root[@]}" kvctl "${flags[@]}" put check-key "$value" >> "$work/serve.log" 2>&1 < /dev/null ||
  fail "kvctl put failed"
got=$("${in_root[@]}" kvctl "${flags[@]}" get check-key 2>> "$work/serve.log") || fail "kvctl get failed"
[ "$got" = "$value" ] || fail "kvctl get returned '$got', not the '$value' it put"
note "kvctl put and get: '$value'"
if [ "$python_pkg" = 1 ]; then
  "${in_root[@]}" python3 -c '
import sys, rkv
c = rkv.Client(server=sys.argv[1], token_file="/etc/rkv/token", transport="tcp")
assert c.get(b"check-key") == sys.argv[2].encode(), "the key kvctl put reads differently"
c.put(b"k", b"v")
assert c.get(b"k") == b"v"
c.close()
print("python3: rkv", sys.argv[1], "ok")' "$address" "$value" >> "$work/serve.log" 2>&1 ||
    fail "the Python module failed"
  note "python3: import rkv, get of kvctl's key, put and get"
else
  note "python3: skipped (no python3-rkv among the packages)"
fi
kill -TERM "$server_pid"
server_status=0
wait "$server_pid" || server_status=$?
server_pid=
[ "$server_status" = 0 ] || fail "rkv-server exited with status $server_status after SIGTERM"
note "rkv-server stopped by SIGTERM, exit status 0"

step_name=finished
printf 'check-packages: OK (%s installed from Debian 12 alone and run in %ds)\n' \
  "$pkg_list" $((SECONDS - start))
