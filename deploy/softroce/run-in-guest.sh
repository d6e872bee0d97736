#!/usr/bin/env bash
# run-in-guest.sh - run a command inside a throw-away QEMU guest that has a
# SoftRoCE (rdma_rxe) device, so rkv's RDMA code can be built on the host and
# exercised without RDMA hardware or RDMA support in the host kernel.
#
# Usage:
#   deploy/softroce/run-in-guest.sh [--timeout SECONDS] [--mem MiB] [--cpus N]
#                                   [--mtu BYTES] [--pin-vcpu0] [--out DIR]
#                                   [--boot-timeout SECONDS] -- COMMAND [ARGS...]
#
#   --timeout SECONDS       wall-clock limit for the whole guest run, boot
#                           included (default 900). Inside the guest the
#                           command gets what is left after boot, less 10 s
#                           for a clean power-off, and is killed when that
#                           runs out; if the guest still has not stopped 15 s
#                           after the limit, qemu is killed. Either way the
#                           script exits 124.
#   --mem MiB               guest RAM (default 4096).
#   --cpus N                guest vCPUs, 1..16 (default 2, or $RKV_SOFTROCE_CPUS).
#   --mtu BYTES             MTU of the veth pair under rxe0 (default 1500, or
#                           $RKV_SOFTROCE_MTU; 576..9000). rxe's path MTU is
#                           the largest IB MTU that fits: 1024 at 1500, 4096
#                           at 4200 and up (jumbo frames, as RoCE fabrics
#                           are usually run).
#   --pin-vcpu0             give guest CPU 0 a host CPU of its own: qemu's
#                           "CPU 0/TCG" thread runs on host CPU 0 and every
#                           other qemu thread (the other vCPUs, the main loop,
#                           the 9p workers) on the remaining host CPUs. For
#                           latency benchmarks, whose clients run on guest
#                           CPU 0: unpinned, the main loop (~40% of a host
#                           CPU under a READ loop) shares CPU 0's host CPU
#                           part of the time, and a 1 KiB READ then takes
#                           ~105 us instead of ~62. Needs 2+ host CPUs and
#                           taskset; ignored, with a note, otherwise.
#   --out DIR               files the command writes under $RKV_GUEST_OUT are
#                           copied into DIR (created if needed) on the host.
#   --boot-timeout SECONDS  limit for the guest to boot and bring rxe0 up
#                           (default 240; also $RKV_SOFTROCE_BOOT_TIMEOUT);
#                           past it qemu is killed and the script exits 125.
#
# COMMAND: with a single argument, that argument is a bash script string
# (`run-in-guest.sh -- 'ibv_devices && ibv_devinfo'`); with several, each is
# quoted and they run as one exact argv. Either way it runs via `bash -c`
# inside the guest, as root, with the host's current working directory as cwd
# and stdin from /dev/null. Its output (and the guest console) is streamed to
# stdout. The script exits with COMMAND's exit code, or:
#   124  the --timeout passed (the command, or qemu, was killed),
#   125  the harness failed: kernel/initramfs could not be prepared, the guest
#        did not come up, rxe0 could not be created/activated, the cwd is not
#        visible in the guest (e.g. under /run), or the guest stopped without
#        reporting an exit code (kernel panic).
#
# Environment seen by COMMAND:
#   every RKV_* and GTEST_* variable of the caller, plus (overriding)
#   RKV_GUEST_OUT   writable folder whose contents end up in --out DIR
#   RKV_RDMA_ADDR   10.99.0.1, the IPv4 address bound to rxe0
#   RKV_RDMA_PEER_ADDR 10.99.0.2, the other end of the veth pair
#   RKV_RDMA_DEV    rxe0
#   RKV_IN_GUEST    1
#   PATH (the caller's), HOME=/tmp/home, LANG=C.UTF-8.
#
# How the guest is built (facts this script depends on):
#   * Debian 12 host with qemu-system-x86, busybox-static, cpio, kmod,
#     iproute2, rdma-core, ibverbs-providers (deploy/install-deps.sh).
#   * Kernel: the Debian package linux-image-amd64 depends on (the generic
#     amd64 flavour; cloud-amd64 lacks rdma_rxe) is fetched with
#     `apt-get download` (running `apt-get update` once if needed), never
#     installed, and cached with the initramfs in
#     $RKV_CACHE_DIR (default ~/.cache/rkv/softroce). Delete that folder to pick
#     up a newer kernel. Set RKV_SOFTROCE_KERNEL_PKG to force a package.
#   * Initramfs: static busybox plus the modules below, in the load order that
#     `depmod`/`modprobe --show-depends` compute (compressed modules are
#     decompressed because busybox insmod may not read them). crc32_generic is
#     required: without it rxe fails with "failed to init crc32 algorithm".
#   * Root filesystem: the host's / is shared read-only over virtio-9p and the
#     guest chroots into it, so it runs the host's binaries at the same paths.
#     proc, sys, devtmpfs, devpts and tmpfs (/tmp, /run, /var/tmp, /dev/shm)
#     are mounted fresh. If the cwd lies under /tmp or /var/tmp, its top-level
#     folder there is bind-mounted (read-only) from the host so it stays
#     visible. The host file system is read-only in the guest: the command can
#     only write to tmpfs folders and $RKV_GUEST_OUT.
#   * A second, writable 9p share (a fresh temporary folder on the host) holds
#     the command, its environment, markers and the exit code; it is mounted at
#     /run/rkv in the guest.
#   * Network: no NIC at all (-nic none). Inside the guest a veth pair is made
#     (veth0 10.99.0.1/24, veth1 10.99.0.2/24, lo up) and
#     `rdma link add rxe0 type rxe netdev veth0`. Client and server on the same
#     rxe device work (rxe loopback). rxe reports active_mtu 1024 and a small
#     max_inline_data.
#   * CPU: pure emulation (-accel tcg -cpu max, -smp 2); KVM is not used since
#     nested guests hang on the machines this was written for. Expect code to
#     run 10-50x slower than on the host; boot to rxe0 up takes ~5-10 s, a
#     whole run at least ~12 s.
#   * Clock: the kernel gets tsc=reliable. Under TCG the guest TSC follows the
#     host's and is synchronised across vCPUs (checked with a cross-CPU warp
#     test), but the guest's own sync check misjudges it under emulation and
#     falls back to the HPET, which turns every clock_gettime() into an
#     emulated device access (about 4x slower).
#   * RKV_SOFTROCE_KERNEL_ARGS adds kernel command-line arguments (debugging).
#
# Reruns reuse the cache (~80 MB); only the first run downloads. The command
# cannot change the host: its root is read-only and nothing but
# $RKV_GUEST_OUT comes back. Cache preparation is serialised with flock and
# every run has its own temporary share and private guest network, so
# concurrent runs work (checked), but they share the host's cores and every
# timing gets slower: do not run benchmarks concurrently.
set -euo pipefail

readonly HARNESS_FAIL=125
readonly TIMEOUT_RC=124
readonly RXE_ADDR=10.99.0.1
readonly RXE_PEER_ADDR=10.99.0.2
# Modules whose dependency closure is loaded, in this order.
readonly MODULES=(virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe rdma_ucm veth)
# Bump when the initramfs layout changes in a way the hash below cannot see.
readonly INITRAMFS_FORMAT=1

log() { printf 'run-in-guest: %s\n' "$*" >&2; }
die() {
  local rc=$1
  shift
  printf 'run-in-guest: ERROR: %s\n' "$*" >&2
  exit "$rc"
}

usage() { # exit-code
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit "$1"
}

timeout_s=900
mem_mib=4096
cpus=${RKV_SOFTROCE_CPUS:-2}
out_dir=""
pin_vcpu0=0
boot_timeout_s=${RKV_SOFTROCE_BOOT_TIMEOUT:-240}
mtu=${RKV_SOFTROCE_MTU:-1500}

while [[ $# -gt 0 ]]; do
  case $1 in
    --timeout) timeout_s=${2:?--timeout needs a value}; shift 2 ;;
    --timeout=*) timeout_s=${1#*=}; shift ;;
    --cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
    --cpus=*) cpus=${1#*=}; shift ;;
    --mem) mem_mib=${2:?--mem needs a value}; shift 2 ;;
    --mem=*) mem_mib=${1#*=}; shift ;;
    --mtu) mtu=${2:?--mtu needs a value}; shift 2 ;;
    --mtu=*) mtu=${1#*=}; shift ;;
    --pin-vcpu0) pin_vcpu0=1; shift ;;
    --out) out_dir=${2:?--out needs a value}; shift 2 ;;
    --out=*) out_dir=${1#*=}; shift ;;
    --boot-timeout) boot_timeout_s=${2:?--boot-timeout needs a value}; shift 2 ;;
    --boot-timeout=*) boot_timeout_s=${1#*=}; shift ;;
    -h | --help) usage 0 ;;
    --) shift; break ;;
    -*) log "unknown option: $1"; usage 2 ;;
    *) break ;;
  esac
done
[[ $# -gt 0 ]] || { log "no COMMAND given"; usage 2; }
for n in "$timeout_s" "$mem_mib" "$boot_timeout_s" "$mtu"; do
  [[ $n =~ ^[0-9]+$ && $n -gt 0 ]] || die 2 "not a positive integer: $n"
done
((mtu >= 576 && mtu <= 9000)) || die 2 "--mtu $mtu is outside 576..9000"
[[ $cpus =~ ^[0-9]+$ ]] && ((cpus >= 1 && cpus <= 16)) || die 2 "--cpus $cpus is outside 1..16"

cache_dir=${RKV_CACHE_DIR:-${HOME:-/root}/.cache/rkv/softroce}

for tool in qemu-system-x86_64 cpio depmod modprobe dpkg flock; do
  command -v "$tool" >/dev/null 2>&1 ||
    die "$HARNESS_FAIL" "'$tool' not found; run deploy/install-deps.sh"
done
busybox_bin=""
for b in /bin/busybox /usr/bin/busybox; do
  if [[ -x $b ]] && ! ldd "$b" >/dev/null 2>&1; then busybox_bin=$b; break; fi
done
[[ -n $busybox_bin ]] || die "$HARNESS_FAIL" "static busybox not found; install busybox-static"

# ---------------------------------------------------------------------------
# Guest-side scripts.
# ---------------------------------------------------------------------------

# /init of the initramfs (busybox sh). Loads modules, mounts the shares,
# prepares the chroot and hands over to stage2 (bash, inside the chroot).
read -r -d '' INIT_SCRIPT <<'EOF_INIT' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys

say() { echo "rkv-guest: $*"; }
fatal() {
  say "FATAL: $*"
  [ -d /share/ctl ] && echo "$*" >/share/ctl/fatal
  sync
  poweroff -f
  sleep 10
}

while read -r m; do
  insmod "/modules/$m" || fatal "insmod $m failed"
done </modules/order

mount_9p() { # tag dir options
  i=0
  until mount -t 9p -o "trans=virtio,version=9p2000.L,msize=262144,$3" "$1" "$2"; do
    i=$((i + 1))
    [ $i -ge 50 ] && return 1
    sleep 0.2
  done
}
mount_9p rkvshare /share cache=mmap || fatal "cannot mount the control share"
echo booted >/share/ctl/booted
mount_9p hostroot /newroot ro,cache=loose || fatal "cannot mount the host root"

R=/newroot
cwd=$(cat /share/ctl/cwd)
mkdir -p /keep
kept=""
for t in tmp var/tmp; do
  case "$cwd/" in
    "/$t/"?*)
      rest=${cwd#/$t/}
      top=${rest%%/*}
      mkdir -p "/keep/$t"
      mount -o bind "$R/$t/$top" "/keep/$t" || fatal "cannot keep /$t/$top"
      kept="$kept $t"
      ;;
  esac
done
mount -t proc proc $R/proc || fatal "mount proc"
mount -t sysfs sysfs $R/sys || fatal "mount sys"
mount -t devtmpfs devtmpfs $R/dev || fatal "mount dev"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts devpts $R/dev/pts || fatal "mount devpts"
mount -t tmpfs tmpfs $R/dev/shm || fatal "mount /dev/shm"
mount -t tmpfs -o mode=1777 tmpfs $R/tmp || fatal "mount /tmp"
# Process substitution and /dev/std* need these links; devtmpfs lacks them.
ln -sf /proc/self/fd $R/dev/fd; ln -sf /proc/self/fd/0 $R/dev/stdin
ln -sf /proc/self/fd/1 $R/dev/stdout; ln -sf /proc/self/fd/2 $R/dev/stderr
mount -t tmpfs -o mode=755 tmpfs $R/run || fatal "mount /run"
[ -d $R/var/tmp ] && { mount -t tmpfs -o mode=1777 tmpfs $R/var/tmp || fatal "mount /var/tmp"; }
for t in $kept; do
  rest=${cwd#/$t/}
  top=${rest%%/*}
  mkdir -p "$R/$t/$top"
  mount -o bind "/keep/$t" "$R/$t/$top" || fatal "cannot rebind /$t/$top"
done
mkdir -p $R/run/rkv
mount -o bind /share $R/run/rkv || fatal "cannot bind the control share"

chroot $R /bin/bash /run/rkv/ctl/stage2.sh
rc=$?
[ -f /share/ctl/rc ] || echo "$rc" >/share/ctl/rc
sync
umount $R/run/rkv 2>/dev/null
umount /share 2>/dev/null
poweroff -f
sleep 10
EOF_INIT

# Stage 2 (bash, in the chroot): network, rxe0, then the command.
read -r -d '' STAGE2_SCRIPT <<'EOF_STAGE2' || true
#!/bin/bash
set -uo pipefail
ctl=/run/rkv/ctl
say() { echo "rkv-guest: $*"; }
fatal() { say "FATAL: $*"; echo "$*" >"$ctl/fatal"; exit 125; }
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

addr=$(<"$ctl/addr")
peer=$(<"$ctl/peer_addr")
mtu=$(<"$ctl/mtu")
ip link set lo up || fatal "lo up failed"
ip link add veth0 type veth peer name veth1 || fatal "cannot create veth pair"
ip addr add "$addr/24" dev veth0 || fatal "cannot address veth0"
ip addr add "$peer/24" dev veth1 || fatal "cannot address veth1"
ip link set veth0 mtu "$mtu" || fatal "cannot set veth0's MTU to $mtu"
ip link set veth1 mtu "$mtu" || fatal "cannot set veth1's MTU to $mtu"
ip link set veth0 up || fatal "cannot bring veth0 up"
ip link set veth1 up || fatal "cannot bring veth1 up"
rdma link add rxe0 type rxe netdev veth0 || fatal "rdma link add rxe0 failed"
state=""
for _ in $(seq 1 300); do
  state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null || true)
  [[ $state == *ACTIVE* ]] && break
  sleep 0.1
done
[[ $state == *ACTIVE* ]] || fatal "rxe0 port not ACTIVE (state: ${state:-none})"
ulimit -l unlimited 2>/dev/null || true
mkdir -p /run/rkv/out /tmp/home
up=$(cut -d' ' -f1 /proc/uptime)
say "rxe0 up on veth0 ($addr) after ${up}s; running command"
echo ready >"$ctl/ready"

# Leave a little of the host's limit for powering off cleanly.
limit=$(<"$ctl/timeout")
left=$(( limit - ${up%.*} - 10 ))
(( left > 5 )) || left=5

export HOME=/tmp/home LANG=C.UTF-8 TERM=dumb
# shellcheck disable=SC1091
source "$ctl/env"
cwd=$(<"$ctl/cwd")
cd "$cwd" || fatal "cwd $cwd does not exist in the guest"
timeout -k 5 "$left" bash -c "$(<"$ctl/cmd")" </dev/null
rc=$?
(( rc == 124 )) && echo timeout >"$ctl/cmd_timeout"
sync
echo "$rc" >"$ctl/rc"
say "command exited with $rc"
exit "$rc"
EOF_STAGE2

# ---------------------------------------------------------------------------
# Kernel + initramfs cache.
# ---------------------------------------------------------------------------

resolve_kernel_pkg() {
  if [[ -n ${RKV_SOFTROCE_KERNEL_PKG:-} ]]; then
    echo "$RKV_SOFTROCE_KERNEL_PKG"
    return
  fi
  local pkg=""
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}') || true
  if [[ -z $pkg ]]; then
    log "refreshing apt lists to find the kernel package"
    apt-get update -qq >&2 || true
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}') || true
  fi
  [[ -n $pkg ]] || return 1
  echo "$pkg"
}

download_kernel() { # pkg destdir
  local pkg=$1 dest=$2 deb opts=()
  # As root, download as root: the cache folder is usually not reachable by
  # apt's unprivileged download user.
  [[ $(id -u) -ne 0 ]] || opts=(-o APT::Sandbox::User=root)
  (cd "$dest" && apt-get download "${opts[@]}" "$pkg" >&2) ||
    {
      log "download failed; refreshing apt lists and retrying"
      apt-get update -qq >&2 || true
      (cd "$dest" && apt-get download "${opts[@]}" "$pkg" >&2)
    } || return 1
  deb=$(find "$dest" -maxdepth 1 -name "${pkg}_*.deb" | head -n1)
  [[ -n $deb ]] || return 1
  echo "$deb"
}

# Extracts vmlinuz and the needed modules (decompressed, load order) from the
# kernel .deb into $1.
extract_kernel() { # deb kdir
  local deb=$1 kdir=$2 x ver order=() seen=" " line path name n=0 f deps
  x=$(mktemp -d "$cache_dir/extract.XXXXXX")
  dpkg -x "$deb" "$x"
  ver=$(find "$x/lib/modules" -mindepth 1 -maxdepth 1 -printf '%f\n' | head -n1)
  [[ -n $ver && -f $x/boot/vmlinuz-$ver ]] || { rm -rf "$x"; return 1; }
  depmod -b "$x" "$ver"
  for m in "${MODULES[@]}"; do
    deps=$(modprobe -d "$x" -S "$ver" --show-depends "$m") ||
      { log "module $m not found in $ver"; rm -rf "$x"; return 1; }
    while read -r line; do
      [[ $line == insmod\ * ]] || continue # skip "builtin NAME"
      path=$(awk '{print $2}' <<<"$line")
      [[ $seen == *" $path "* ]] && continue
      seen+="$path "
      order+=("$path")
    done <<<"$deps"
  done
  rm -rf "$kdir.tmp"
  mkdir -p "$kdir.tmp/modules"
  cp "$x/boot/vmlinuz-$ver" "$kdir.tmp/vmlinuz"
  : >"$kdir.tmp/modules/order"
  for path in "${order[@]}"; do
    n=$((n + 1))
    name=$(basename "$path")
    name=${name%.xz}; name=${name%.zst}; name=${name%.gz}
    f=$(printf '%02d-%s' "$n" "$name")
    case $path in
      *.xz) xz -dc "$path" >"$kdir.tmp/modules/$f" ;;
      *.zst) zstd -qdc "$path" >"$kdir.tmp/modules/$f" ;;
      *.gz) gzip -dc "$path" >"$kdir.tmp/modules/$f" ;;
      *) cp "$path" "$kdir.tmp/modules/$f" ;;
    esac
    echo "$f" >>"$kdir.tmp/modules/order"
  done
  echo "$ver" >"$kdir.tmp/version"
  printf '%s\n' "${MODULES[@]}" >"$kdir.tmp/wanted"
  rm -rf "$x" "$kdir"
  mv "$kdir.tmp" "$kdir"
}

build_initramfs() { # kdir out
  local kdir=$1 out=$2 r
  r=$(mktemp -d "$cache_dir/initramfs.XXXXXX")
  mkdir -p "$r"/{bin,dev,proc,sys,newroot,share,modules}
  cp "$busybox_bin" "$r/bin/busybox"
  cp "$kdir"/modules/* "$r/modules/"
  printf '%s\n' "$INIT_SCRIPT" >"$r/init"
  chmod 755 "$r/init" "$r/bin/busybox"
  (cd "$r" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc --quiet --owner=0:0) | gzip -1 >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$r"
}

prepare_cache() {
  mkdir -p "$cache_dir"
  exec {lock_fd}>"$cache_dir/.lock"
  flock "$lock_fd"
  local pkg kdir deb hash
  if [[ -n ${RKV_SOFTROCE_KERNEL_PKG:-} ]]; then
    pkg=$RKV_SOFTROCE_KERNEL_PKG
  elif [[ -s $cache_dir/kernel-pkg ]]; then
    pkg=$(<"$cache_dir/kernel-pkg")
  else
    pkg=$(resolve_kernel_pkg) || die "$HARNESS_FAIL" "cannot resolve the package linux-image-amd64 depends on"
  fi
  kdir=$cache_dir/$pkg
  if [[ ! -f $kdir/version || "$(cat "$kdir/wanted" 2>/dev/null)" != "$(printf '%s\n' "${MODULES[@]}")" ]]; then
    deb=$(find "$cache_dir/debs" -maxdepth 1 -name "${pkg}_*.deb" 2>/dev/null | head -n1) || true
    if [[ -z $deb ]]; then
      log "downloading $pkg (once; cached in $cache_dir)"
      mkdir -p "$cache_dir/debs"
      local dl
      dl=$(mktemp -d "$cache_dir/download.XXXXXX")
      deb=$(download_kernel "$pkg" "$dl") || { rm -rf "$dl"; die "$HARNESS_FAIL" "cannot download $pkg"; }
      mv "$deb" "$cache_dir/debs/"
      deb=$cache_dir/debs/$(basename "$deb")
      rm -rf "$dl"
    fi
    log "extracting kernel and modules from $(basename "$deb")"
    extract_kernel "$deb" "$kdir" || die "$HARNESS_FAIL" "cannot extract the kernel from $deb"
  fi
  echo "$pkg" >"$cache_dir/kernel-pkg"
  hash=$({
    echo "$INITRAMFS_FORMAT"
    printf '%s\n' "$INIT_SCRIPT"
    cat "$kdir/modules/order"
    sha256sum "$busybox_bin" | cut -d' ' -f1
  } | sha256sum | cut -c1-16)
  initramfs=$kdir/initramfs-$hash.cpio.gz
  if [[ ! -s $initramfs ]]; then
    log "building initramfs"
    find "$kdir" -maxdepth 1 -name 'initramfs-*.cpio.gz' -delete
    build_initramfs "$kdir" "$initramfs"
  fi
  vmlinuz=$kdir/vmlinuz
  kver=$(<"$kdir/version")
  flock -u "$lock_fd"
  exec {lock_fd}>&-
}

initramfs=""
vmlinuz=""
kver=""
prepare_cache

# ---------------------------------------------------------------------------
# Run.
# ---------------------------------------------------------------------------

share=$(mktemp -d "${TMPDIR:-/tmp}/rkv-guest.XXXXXX")
qemu_pid=""
tail_pid=""
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  if [[ -n $qemu_pid ]]; then kill "$qemu_pid" 2>/dev/null || true; fi
  if [[ -n $tail_pid ]]; then kill "$tail_pid" 2>/dev/null || true; fi
  rm -rf "$share"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$share/ctl" "$share/out"
ctl=$share/ctl
printf '%s\n' "$STAGE2_SCRIPT" >"$ctl/stage2.sh"
if [[ $# -eq 1 ]]; then
  printf '%s\n' "$1" >"$ctl/cmd"
else
  printf '%q ' "$@" >"$ctl/cmd"
  echo >>"$ctl/cmd"
fi
pwd -P >"$ctl/cwd"
echo "$timeout_s" >"$ctl/timeout"
echo "$RXE_ADDR" >"$ctl/addr"
echo "$RXE_PEER_ADDR" >"$ctl/peer_addr"
echo "$mtu" >"$ctl/mtu"
{
  while IFS= read -r v; do
    case $v in
      RKV_* | GTEST_*) printf 'export %s=%q\n' "$v" "${!v}" ;;
    esac
  done < <(compgen -e)
  printf 'export PATH=%q\n' "$PATH"
  printf 'export RKV_GUEST_OUT=/run/rkv/out\n'
  printf 'export RKV_RDMA_ADDR=%q RKV_RDMA_PEER_ADDR=%q\n' "$RXE_ADDR" "$RXE_PEER_ADDR"
  printf 'export RKV_RDMA_DEV=rxe0 RKV_IN_GUEST=1\n'
} >"$ctl/env"

# Pins qemu's vCPU 0 thread to host CPU 0 and its other threads to the
# other host CPUs (threads qemu starts later inherit the main thread's set).
# The vCPU threads exist before the guest runs its first instruction.
pin_guest_cpu0() { # qemu_pid
  local pid=$1 host_cpus t i found=0
  host_cpus=$(nproc)
  if ((host_cpus < 2)) || ! command -v taskset >/dev/null 2>&1; then
    log "--pin-vcpu0: needs 2+ host CPUs and taskset; not pinning"
    return 0
  fi
  for ((i = 0; i < 50 && !found; i++)); do
    grep -qx 'CPU 0/TCG' /proc/"$pid"/task/*/comm 2>/dev/null && found=1 || sleep 0.1
  done
  if ((!found)); then
    log "--pin-vcpu0: qemu's vCPU threads not found; not pinning"
    return 0
  fi
  for t in /proc/"$pid"/task/*; do
    if [[ $(cat "$t/comm" 2>/dev/null) == "CPU 0/TCG" ]]; then
      taskset -p -c 0 "${t##*/}" >/dev/null 2>&1 || true
    else
      taskset -p -c "1-$((host_cpus - 1))" "${t##*/}" >/dev/null 2>&1 || true
    fi
  done
  log "guest CPU 0 pinned to host CPU 0; qemu's other threads on host CPUs 1-$((host_cpus - 1))"
}

console=$share/console.log
: >"$console"
# tsc=reliable: TCG's TSC follows the host's (synchronised across vCPUs), but
# the guest's sync check misjudges it under emulation and falls back to the
# HPET, which makes every clock_gettime() an emulated MMIO exit.
kernel_args="console=ttyS0 panic=-1 quiet loglevel=4 rdinit=/init tsc=reliable"
kernel_args+=" ${RKV_SOFTROCE_KERNEL_ARGS:-}"
log "booting guest (kernel $kver, ${mem_mib} MiB, timeout ${timeout_s}s)"
start=$SECONDS
qemu-system-x86_64 \
  -name rkv-softroce,debug-threads=on \
  -machine pc -accel tcg -cpu max -smp "$cpus" -m "$mem_mib" \
  -nodefaults -no-user-config -no-reboot \
  -display none -monitor none -serial "file:$console" \
  -nic none \
  -kernel "$vmlinuz" -initrd "$initramfs" \
  -append "$kernel_args" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$share,mount_tag=rkvshare,security_model=none" \
  </dev/null >"$share/qemu.log" 2>&1 &
qemu_pid=$!
if ((pin_vcpu0)); then pin_guest_cpu0 "$qemu_pid"; fi
# Stream the console (the guest tty turns \n into \r\n), line by line: tr
# writing into a pipe (deploy/test.sh tees it) would otherwise hold up to
# 4 KiB, minutes of test lines, and the console would look stuck.
{ tail -n +1 -F --pid="$qemu_pid" "$console" 2>/dev/null | stdbuf -oL tr -d '\r'; } &
tail_pid=$!

failure=""
fail_rc=0
fatal_seen=""
while kill -0 "$qemu_pid" 2>/dev/null; do
  elapsed=$((SECONDS - start))
  if [[ -f $ctl/fatal ]]; then
    # The guest reports and powers off by itself; do not wait for ever.
    fatal_seen=${fatal_seen:-$SECONDS}
    if ((SECONDS - fatal_seen > 30)); then
      failure="guest setup failed: $(<"$ctl/fatal") (and it did not power off)"
      fail_rc=$HARNESS_FAIL
    fi
  elif [[ ! -f $ctl/ready ]] && ((elapsed > boot_timeout_s)); then
    if [[ -f $ctl/booted ]]; then
      failure="guest booted but rxe0 was not up within ${boot_timeout_s}s"
    else
      failure="guest did not come up within ${boot_timeout_s}s"
    fi
    fail_rc=$HARNESS_FAIL
  elif ((elapsed > timeout_s + 15)); then
    failure="timeout: the guest run exceeded ${timeout_s}s"
    fail_rc=$TIMEOUT_RC
  fi
  if [[ -n $failure ]]; then
    kill "$qemu_pid" 2>/dev/null || true
    sleep 1
    kill -9 "$qemu_pid" 2>/dev/null || true
    break
  fi
  sleep 1
done
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
wait "$tail_pid" 2>/dev/null || true
tail_pid=""
elapsed=$((SECONDS - start))

if [[ -n $out_dir ]]; then
  mkdir -p "$out_dir"
  cp -a "$share/out/." "$out_dir/"
fi

[[ -n $failure ]] && die "$fail_rc" "$failure (qemu killed)"
if [[ -f $ctl/fatal ]]; then
  die "$HARNESS_FAIL" "guest setup failed: $(<"$ctl/fatal")"
fi
# Failures before the control share is mounted only reach the console.
fatal_line=$(grep -a -m1 'rkv-guest: FATAL: ' "$console" | tr -d '\r' || true)
if [[ -n $fatal_line ]]; then
  die "$HARNESS_FAIL" "guest setup failed: ${fatal_line#*FATAL: }"
fi
if [[ ! -f $ctl/rc ]]; then
  sed 's/^/qemu: /' "$share/qemu.log" >&2 || true
  if [[ ! -f $ctl/booted ]]; then
    die "$HARNESS_FAIL" "guest did not come up (qemu exited with $qemu_rc)"
  fi
  die "$HARNESS_FAIL" "guest stopped without reporting an exit code (qemu exited with $qemu_rc)"
fi
rc=$(<"$ctl/rc")
[[ $rc =~ ^[0-9]+$ ]] || die "$HARNESS_FAIL" "bad exit code from the guest: $rc"
if [[ -f $ctl/cmd_timeout ]]; then
  log "command timed out inside the guest (limit ${timeout_s}s incl. boot)"
  rc=$TIMEOUT_RC
fi
log "guest finished in ${elapsed}s; command exit code $rc"
exit "$rc"
