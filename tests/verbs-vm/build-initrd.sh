#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Builds a minimal initramfs and fetches Debian's kernel for running weft's
# verbs tests on a real Soft-RoCE (rdma_rxe) stack inside qemu (and the
# TLS tests with kernel TLS: the tls module and the AEADs it asks the
# crypto API for, which nothing could load on demand in the VM). Adapted from
# the project's Soft-RoCE recipe; scripts/test-verbs-vm.sh drives it.
#
# The kernel package is downloaded with apt and only extracted, never
# installed. The initramfs holds busybox, the kernel modules (rdma_rxe, and
# rdma_ucm for librdmacm) and the `rdma` tool; the tests themselves run
# chrooted into the host's tree, shared read-only over 9p (run-vm.sh).
#
# Usage: build-initrd.sh [OUTDIR]
#   env EXTRA_BINS="path1 path2"  extra host binaries to put in the initramfs
#                                  (copied to the same path, with their ldd libs)
#   env EXTRA_FILES="src:dst ..."  extra files to copy verbatim
#   env TEST_SCRIPT=path           shell script run by /init after rxe0 is up
#                                  (default: built-in smoke test below)
#   env INSTALL_PKGS=1             apt-get install the needed host packages
set -euo pipefail

OUT=${1:-${TMPDIR:-/tmp}/softroce-vm}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [ "${INSTALL_PKGS:-0}" = 1 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    qemu-system-x86 busybox-static cpio kmod iproute2 \
    rdma-core ibverbs-utils ibverbs-providers libibverbs1 perftest >/dev/null
fi

# ---------------------------------------------------------------- kernel
# Debian's linux-image-amd64 metapackage points at the current ABI package.
KPKG=${KPKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
[ -n "$KPKG" ] || { echo "cannot resolve kernel package" >&2; exit 1; }
KVER=${KPKG#linux-image-}
KDIR=$OUT/kpkg
if [ ! -e "$KDIR/boot/vmlinuz-$KVER" ]; then
  rm -rf "$KDIR" "$OUT"/linux-image-*.deb
  (cd "$OUT" && apt-get download "$KPKG" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  dpkg -x "$OUT"/linux-image-*.deb "$KDIR"          # extract only, never install
  rm -f "$OUT"/linux-image-*.deb
fi
cp "$KDIR/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
depmod -b "$KDIR" "$KVER"                            # modules.dep for the extracted tree

# ---------------------------------------------------------------- rootfs
R=$OUT/root
rm -rf "$R"
mkdir -p "$R"/usr/{bin,sbin,lib,lib64} "$R"/{proc,sys,dev,tmp,run,etc,root}
ln -s usr/bin "$R/bin"; ln -s usr/sbin "$R/sbin"
ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"

copy_file() {   # copy host file (dereferenced) to the same path in $R
  local src=$1 dst=${2:-$1}
  mkdir -p "$R$(dirname "$dst")"
  cp -L "$src" "$R$dst"
}
copy_with_libs() {
  local f=$1
  copy_file "$f"
  ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/[^ ]+ \(/{print $1}' | while read -r lib; do
    [ -e "$R$lib" ] || copy_file "$lib"
  done
}

cp /usr/bin/busybox "$R/usr/bin/busybox"   # busybox-static

PROV_DIR=/usr/lib/x86_64-linux-gnu/libibverbs
BINS="/usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong
      /usr/bin/ibv_ud_pingpong /usr/bin/ibv_srq_pingpong /usr/bin/rdma
      $(ls $PROV_DIR/librxe-rdmav*.so)"
for p in ib_send_lat ib_send_bw ib_write_bw ib_read_lat; do
  [ -x /usr/bin/$p ] && BINS="$BINS /usr/bin/$p"
done
for b in $BINS ${EXTRA_BINS:-}; do copy_with_libs "$b"; done
copy_file /etc/libibverbs.d/rxe.driver
for pair in ${EXTRA_FILES:-}; do copy_file "${pair%%:*}" "${pair#*:}"; done

# ---------------------------------------------------------------- modules
mkdir -p "$R/lib/modules"
: > "$R/etc/modules.load"
modprobe -d "$KDIR" -S "$KVER" --show-depends -a \
    virtio_pci virtio_net dummy crc32_generic rdma_rxe rdma_ucm 9pnet_virtio 9p overlay \
    tls gcm ctr ghash_generic chacha20poly1305 chacha_generic poly1305_generic |
  awk '$1=="insmod"{print $2}' | awk '!seen[$0]++' | while read -r ko; do
    base=$(basename "$ko")
    case $ko in           # busybox insmod wants plain .ko (newer kernels ship .ko.xz/.zst)
      *.ko.xz)  base=${base%.xz};  xz -dc "$ko" > "$R/lib/modules/$base" ;;
      *.ko.zst) base=${base%.zst}; zstd -qdc "$ko" > "$R/lib/modules/$base" ;;
      *.ko.gz)  base=${base%.gz};  gzip -dc "$ko" > "$R/lib/modules/$base" ;;
      *)        cp "$ko" "$R/lib/modules/$base" ;;
    esac
    echo "$base" >> "$R/etc/modules.load"
  done

# ---------------------------------------------------------------- /init
cat > "$R/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/usr/bin:/usr/sbin:/bin:/sbin
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /tmp; mount -t devpts devpts /dev/pts
ts() { echo "[t=$(cut -d' ' -f1 /proc/uptime)s] $*"; }
die() { echo "RXE-TEST-RESULT: FAIL ($*)"; poweroff -f; }
ts "init started"

# kernel cmdline knobs:
#   rxe_netdev=virtio|dummy   netdev that rxe0 is bound to (default dummy)
#   rxe_test=PATH             test to run instead of /test.sh
#   rxe_chroot=DIR            run the test chrooted into DIR (e.g. /mnt/host
#                             when the host's / is shared read-only via 9p)
NETDEV_KIND=dummy; TEST=/test.sh; CHROOT=
for a in $(cat /proc/cmdline); do
  case $a in
    rxe_netdev=*) NETDEV_KIND=${a#rxe_netdev=} ;;
    rxe_test=*)   TEST=${a#rxe_test=} ;;
    rxe_chroot=*) CHROOT=${a#rxe_chroot=} ;;
  esac
done

while read -r m; do
  insmod /lib/modules/$m || echo "insmod $m failed"
done < /etc/modules.load
ts "modules loaded"

# optional host share: qemu -virtfs ...,mount_tag=host0  ->  /mnt/host
if cat /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag 2>/dev/null | grep -q host0; then
  mkdir -p /mnt/host
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=loose host0 /mnt/host \
    && ts "host share mounted on /mnt/host"
fi

ip link set lo up
ip addr add 127.0.0.1/8 dev lo 2>/dev/null
if [ "$NETDEV_KIND" = virtio ]; then
  # first non-lo ethernet device (virtio-net)
  for i in 1 2 3 4 5 6 7 8 9 10; do
    NETDEV=$(ls /sys/class/net | grep -v -e '^lo$' -e dummy | head -n1)
    [ -n "$NETDEV" ] && break; sleep 0.2
  done
else
  [ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || die "no dummy"
  NETDEV=dummy0
fi
[ -n "$NETDEV" ] || die "no netdev"
IP=192.0.2.1            # TEST-NET-1, only ever used inside this VM
ip link set "$NETDEV" up
ip addr add $IP/24 dev "$NETDEV"
ts "netdev $NETDEV up with $IP"

rdma link add rxe0 type rxe netdev "$NETDEV" || die "rdma link add failed"
rdma link show
ts "rxe0 created"

# find the GID index holding the IPv4-mapped address (RoCEv2)
GIDX=
for t in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  for i in 0 1 2 3 4 5 6 7; do
    case $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i 2>/dev/null) in
      *ffff:c000:0201) GIDX=$i; break 2 ;;
    esac
  done
  sleep 0.1
done
[ -n "$GIDX" ] || GIDX=1
export GIDX IP NETDEV
ts "using gid index $GIDX"

if [ -n "$CHROOT" ]; then
  # writable throw-away view of the (read-only) shared tree: overlay with tmpfs upper
  mkdir -p /ovl && mount -t tmpfs tmpfs /ovl && mkdir -p /ovl/upper /ovl/work /ovl/root
  if mount -t overlay overlay -o lowerdir=$CHROOT,upperdir=/ovl/upper,workdir=/ovl/work /ovl/root; then
    CHROOT=/ovl/root
  else
    echo "overlay failed; chroot is read-only except /tmp and /run"
    mount -t tmpfs tmpfs "$CHROOT/tmp"; mount -t tmpfs tmpfs "$CHROOT/run"
  fi
  for d in proc sys dev; do mount --bind /$d "$CHROOT/$d" || die "bind $d"; done
  ts "running $TEST chrooted in $CHROOT"
  chroot "$CHROOT" /usr/bin/env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root GIDX=$GIDX IP=$IP NETDEV=$NETDEV /bin/sh -c "$TEST"
  trc=$?
else
  ts "running $TEST"
  "$TEST"; trc=$?
fi
[ $trc = 0 ] && echo "RXE-TEST-RESULT: PASS" || echo "RXE-TEST-RESULT: FAIL (test rc=$trc)"
ts "done, powering off"
poweroff -f
EOF
chmod +x "$R/init"

# ---------------------------------------------------------------- test
if [ -n "${TEST_SCRIPT:-}" ]; then
  cp "$TEST_SCRIPT" "$R/test.sh"
else
cat > "$R/test.sh" <<'EOF'
#!/bin/sh
ts() { echo "[t=$(cut -d' ' -f1 /proc/uptime)s] $*"; }
rc=0
# client_server LOG COMMAND...: COMMAND as the server (its output in LOG),
# then as the client of 127.0.0.1; rc=1 if either fails.
client_server() {
  log=$1; shift
  "$@" > "$log" 2>&1 &
  SRV=$!
  sleep 0.5
  timeout 60 "$@" 127.0.0.1 || rc=1
  wait $SRV || rc=1
}
echo "===== ibv_devices";  ibv_devices || rc=1
echo "===== ibv_devinfo";  ibv_devinfo -d rxe0 || rc=1
echo "===== gids"; for i in 0 1 2; do echo "gid[$i] $(cat /sys/class/infiniband/rxe0/ports/1/gids/$i)"; done
ts "===== ibv_rc_pingpong (gid index $GIDX)"
client_server /tmp/srv.log ibv_rc_pingpong -d rxe0 -g $GIDX -n 1000 -e
echo "--- server side:"; cat /tmp/srv.log
ts "rc_pingpong done rc=$rc"
if command -v ib_send_lat >/dev/null; then
  ts "===== ib_send_lat"
  client_server /tmp/lat.log ib_send_lat -d rxe0 -x $GIDX -n 1000 -e
  ts "===== ib_write_bw"
  client_server /tmp/bw.log ib_write_bw -d rxe0 -x $GIDX -n 1000
  ts "perftest done rc=$rc"
fi
exit $rc
EOF
fi
chmod +x "$R/test.sh"

(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) > "$OUT/initrd.gz"
echo "kernel:  $OUT/vmlinuz ($KVER)"
echo "initrd:  $OUT/initrd.gz ($(du -h "$OUT/initrd.gz" | cut -f1))"
