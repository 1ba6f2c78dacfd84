#!/usr/bin/env bash
# A Debian unstable (sid) chroot with the CPythons the host does not have (3.14, 3.15,
# their debug builds and CPython's own test suite), to build and test zigcorn on them.
#
#   scripts/sid_chroot.sh create            build the chroot if missing (idempotent)
#   scripts/sid_chroot.sh run -- CMD ARG..  run CMD inside, in the current directory
#                                           (creating the chroot first if needed); exits
#                                           with CMD's status
#   scripts/sid_chroot.sh venv VERSION [DIR]
#                                           make DIR (default .venv-VERSION) with
#                                           pythonVERSION inside the chroot and install
#                                           zigcorn editable with every test dependency
#                                           that installs there (the others are listed);
#                                           3.14d/3.15d: the debug builds, minimal deps
#   scripts/sid_chroot.sh status | destroy
#
# The chroot lives in $ZIGCORN_SID_DIR (default /var/cache/zigcorn-sid) and is kept
# between runs; when the package list below changes, the missing packages are added. The
# host's apt sources are never touched: debootstrap fetches sid into the chroot only.
#
# `run` works in a private mount namespace (unshare -m): /proc, /sys, /dev, /dev/pts,
# /dev/shm, a fresh /tmp and the repository (bound at the same path, so editable installs
# and absolute paths work on both sides) are mounted there only, and vanish with the
# namespace when the command ends, however it ends (exit, error, signal, kill -9). The
# chroot shares the host's network, so loopback servers and clients meet as on the host.
set -euo pipefail

SID_DIR=${ZIGCORN_SID_DIR:-/var/cache/zigcorn-sid}
# The Debian archive the host's own apt uses (its first source whose path ends in
# /debian), unless $ZIGCORN_SID_MIRROR names one: sid comes from the same place.
host_mirror() {
    {
        sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | tr ' ' '\n'
        sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]*\).*/\2/p' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
    } | grep -m1 -E '^https?://.*/debian/?$' | sed 's:/$::'
}
SID_MIRROR=${ZIGCORN_SID_MIRROR:-$(host_mirror || true)}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHONS=(3.14 3.15)
# What the suite needs: the interpreters (normal and debug builds, headers, venv, the
# test suite for test.test_asyncio), a C toolchain for test dependencies that build from
# source (Zig itself comes from the ziglang wheel), and the tools the tests drive.
PACKAGES=(
    ca-certificates build-essential pkg-config git procps iproute2 libssl-dev libffi-dev
    curl nghttp2-client wrk postgresql redis-server libnss3-tools libbrotli1 libzstd1 zlib1g
)
for v in "${PYTHONS[@]}"; do
    PACKAGES+=("python$v" "python$v-dev" "python$v-venv" "python$v-dbg" "libpython$v-testsuite")
done
# Chromium is large (~300 MB installed) and its test skips without it: opt in.
[ "${ZIGCORN_SID_CHROMIUM:-0}" = 1 ] && PACKAGES+=(chromium)
STAMP="$SID_DIR/.zigcorn-ready"
WANT=$(printf '%s\n' "${PACKAGES[@]}" | sort | sha256sum | cut -c1-16)

log() { echo "sid_chroot: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"

# Runs "$@" inside the chroot in a private mount namespace; the caller's cwd is kept when
# it lies in the repository, and the environment is reduced to a clean, known one plus
# the variables the suite reads (ZIGCORN_*, CI, PYTEST_ADDOPTS).
in_chroot() {
    local cwd=$PWD
    case "$cwd" in "$REPO"|"$REPO"/*) ;; *) cwd=$REPO ;; esac
    local -a envs=(
        HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM="${TERM:-dumb}"
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1
        PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DEFAULT_TIMEOUT=180
    )
    local name
    while IFS= read -r name; do
        envs+=("$name=${!name}")
    done < <(compgen -e | grep -E '^(ZIGCORN_|CI$|PYTEST_ADDOPTS$|PYTHON(WARNINGS|FAULTHANDLER|DEVMODE|MALLOC)$)' || true)
    cp -L /etc/resolv.conf "$SID_DIR/etc/resolv.conf" 2>/dev/null || true
    sync_trust
    mkdir -p "$SID_DIR$REPO"
    # shellcheck disable=SC2016
    unshare --mount --propagation private -- /bin/bash -c '
        set -e
        root=$1 repo=$2 cwd=$3 nenv=$4; shift 4
        envs=("${@:1:nenv}"); shift "$nenv"
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --bind /dev "$root/dev"
        mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null \
            || mount --bind /dev/pts "$root/dev/pts"
        mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
        mount -t tmpfs -o mode=1777,size=8g tmp "$root/tmp"
        # A repository under /tmp (a CI clone) needs its mount point inside that tmpfs.
        mkdir -p "$root$repo"
        mount --bind "$repo" "$root$repo"
        exec chroot "$root" /usr/bin/env -i "${envs[@]}" /bin/bash -c "cd \"\$0\" && exec \"\$@\"" "$cwd" "$@"
    ' sid "$SID_DIR" "$REPO" "$cwd" "${#envs[@]}" "${envs[@]}" "$@"
}

# The chroot trusts the certificate authorities the host added to its own store (a
# registry reached through a TLS-inspecting proxy needs them), and only those.
sync_trust() {
    local src=/usr/local/share/ca-certificates dst=$SID_DIR/usr/local/share/ca-certificates
    [ -d "$src" ] || return 0
    [ -x "$SID_DIR/usr/sbin/update-ca-certificates" ] || return 0
    if ! diff -rq "$src" "$dst" >/dev/null 2>&1; then
        rm -rf "$dst"
        cp -a "$src" "$dst"
        chroot "$SID_DIR" update-ca-certificates --fresh >/dev/null 2>&1 || log "update-ca-certificates failed"
    fi
}

ready() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; }

create() {
    ready && return 0
    # One builder at a time (CI and a developer may share the machine); the others wait.
    mkdir -p "$(dirname "$SID_DIR")"
    exec 9>"$SID_DIR.lock"
    flock 9
    if ready; then
        exec 9>&-
        return 0
    fi
    local t0=$SECONDS
    command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
    command -v unshare >/dev/null || die "unshare (util-linux) is missing"
    [ -n "$SID_MIRROR" ] || die "no Debian archive in the host's apt sources: set ZIGCORN_SID_MIRROR"
    if [ ! -f "$SID_DIR/.debootstrap-done" ]; then
        log "debootstrap sid into $SID_DIR (a few minutes)"
        rm -rf "$SID_DIR"
        mkdir -p "$SID_DIR"
        # In its own mount namespace: the /proc and /sys debootstrap mounts in the target
        # go away with it even if it is interrupted.
        unshare --mount --propagation private -- \
            debootstrap --variant=minbase sid "$SID_DIR" "$SID_MIRROR" >"$SID_DIR.debootstrap.log" 2>&1 \
            || { tail -20 "$SID_DIR.debootstrap.log" >&2; die "debootstrap failed (log: $SID_DIR.debootstrap.log)"; }
        touch "$SID_DIR/.debootstrap-done"
    fi
    # No service starts inside the chroot on install: the tests start their own.
    printf '#!/bin/sh\nexit 101\n' >"$SID_DIR/usr/sbin/policy-rc.d"
    chmod +x "$SID_DIR/usr/sbin/policy-rc.d"
    # The registry's sid may be a dated copy whose Release file is past its Valid-Until.
    printf 'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n' \
        >"$SID_DIR/etc/apt/apt.conf.d/90zigcorn"
    log "installing ${#PACKAGES[@]} packages into the chroot"
    in_chroot sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" && apt-get clean' \
        sh "${PACKAGES[@]}" >"$SID_DIR.apt.log" 2>&1 \
        || { tail -30 "$SID_DIR.apt.log" >&2; die "apt-get inside the chroot failed (log: $SID_DIR.apt.log)"; }
    echo "$WANT" >"$STAMP"
    exec 9>&-
    log "chroot ready in $((SECONDS - t0)) s"
}

# Test dependencies of pyproject's [test] extra, one by one, so that one whose wheel or
# build is missing for a new CPython does not keep the others out (its tests skip, even on
# CI: they are listed in DIR/zigcorn-uninstallable.txt). A
# debug interpreter (VERSION ending in d, e.g. 3.14d) gets only what the reference-leak
# check needs: no wheel exists for its ABI, so every C extension would build from source.
# $ZIGCORN_SID_VENV_DEPS (space-separated requirements) overrides the list.
make_venv() {
    local version=$1 dir=${2:-.venv-$1}
    local py=python$version deps=${ZIGCORN_SID_VENV_DEPS:-}
    [ -x "$SID_DIR/usr/bin/$py" ] || die "$py is not in the chroot"
    case "$version" in *d) deps=${deps:-pytest h2 ziglang==0.15.2} ;; esac
    in_chroot bash -c '
        set -e
        py=$1 dir=$2 deps=$3
        [ -x "$dir/bin/python" ] || "$py" -m venv "$dir"
        "$dir/bin/python" -m pip install -q --upgrade pip setuptools wheel >/dev/null
        if [ -n "$deps" ]; then
            deps=$(printf "%s\n" $deps)
        else
            deps=$("$dir/bin/python" -c "if 1:
                import tomllib
                with open(\"pyproject.toml\", \"rb\") as f:
                    print(\"\\n\".join(tomllib.load(f)[\"project\"][\"optional-dependencies\"][\"test\"]))")
        fi
        failed=""
        # All at once first (one pip run instead of thirty); only when that fails, one
        # by one, to find which do not install.
        mapfile -t all <<<"$deps"
        if ! "$dir/bin/python" -m pip install -q "${all[@]}" >"$dir/pip-$$.log" 2>&1; then
            while IFS= read -r dep; do
                "$dir/bin/python" -m pip install -q "$dep" >"$dir/pip-$$.log" 2>&1 \
                    || failed="$failed ${dep%%[<>=]*}"
            done <<<"$deps"
        fi
        rm -f "$dir/pip-$$.log"
        "$dir/bin/python" -m pip install -q --no-deps --no-build-isolation -e . \
            || "$dir/bin/python" -m pip install -q --no-deps -e .
        echo "$dir: $("$dir/bin/python" -VV | head -1)"
        # The tests read this list (tests/support/tools.py): on CI those packages skip
        # their tests, any other missing package fails them.
        printf "%s\n" $failed >"$dir/zigcorn-uninstallable.txt"
        [ -z "$failed" ] || echo "$dir: test dependencies that did not install:$failed"
    ' venv "$py" "$dir" "$deps"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
    create) create ;;
    run)
        [ "${1:-}" = "--" ] && shift
        [ $# -gt 0 ] || die "usage: $0 run -- CMD [ARG...]"
        create
        in_chroot "$@"
        ;;
    venv)
        [ $# -ge 1 ] || die "usage: $0 venv VERSION [DIR]"
        create
        make_venv "$@"
        ;;
    status)
        if ready; then
            echo "ready: $SID_DIR ($(du -sh "$SID_DIR" 2>/dev/null | cut -f1))"
            for v in "${PYTHONS[@]}"; do
                [ -x "$SID_DIR/usr/bin/python$v" ] && echo "  python$v: $(chroot "$SID_DIR" "python$v" -V 2>&1)"
            done
        else
            echo "missing or stale: $SID_DIR"
            exit 1
        fi
        ;;
    destroy)
        # Mounts live in per-run namespaces, so nothing is mounted here; check anyway.
        if findmnt -rno TARGET | grep -q "^$SID_DIR/"; then die "something is mounted under $SID_DIR"; fi
        rm -rf --one-file-system "$SID_DIR" "$SID_DIR.debootstrap.log" "$SID_DIR.apt.log" "$SID_DIR.lock"
        ;;
    *)
        sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
        [ -z "$cmd" ] || exit 2
        ;;
esac
