#!/bin/sh
# Installs Relay on Linux from an unpacked release archive (see docs/operations.md):
#
#   sudo ./deploy/install.sh                  # this machine: account, units, service started
#   DESTDIR=/tmp/root ./deploy/install.sh     # into a staging root: files only
#
# Environment: DESTDIR (a staging root, empty by default), PREFIX (/opt/relay by default).
# Options: --create-account creates the relay account even with DESTDIR set (on this machine).
#
# Safe to run again: binaries, documentation and units are replaced (this is the upgrade
# path), an existing /etc/relay/config.toml and everything in /var/lib/relay are kept.
set -eu

DESTDIR="${DESTDIR:-}"
PREFIX="${PREFIX:-/opt/relay}"
ACCOUNT=relay
STATE_DIR=/var/lib/relay
CONFIG_DIR=/etc/relay
UNIT_DIR=/etc/systemd/system
BINARIES="relayd relay-mcp relay-worker relay-hook relay-doctor"

say() { printf 'install.sh: %s\n' "$*"; }
fail() { printf 'install.sh: error: %s\n' "$*" >&2; exit 1; }

create_account=no
if [ -z "$DESTDIR" ]; then
    create_account=yes
fi
for arg in "$@"; do
    case "$arg" in
        --create-account) create_account=yes ;;
        -h|--help)
            sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) fail "unknown argument '$arg' (try --help)" ;;
    esac
done

case "$PREFIX" in
    /*) ;;
    *) fail "PREFIX must be an absolute path, got '$PREFIX'" ;;
esac

# The archive's root: this script is deploy/install.sh inside it.
ARCHIVE=$(cd "$(dirname "$0")/.." && pwd)

is_root=no
if [ "$(id -u)" = 0 ]; then
    is_root=yes
fi
if [ -z "$DESTDIR" ] && [ "$is_root" = no ]; then
    fail "installing on this machine needs root (run it with sudo), or set DESTDIR to a staging root"
fi

# 1. The archive is what it says it is, before anything is written.
[ -f "$ARCHIVE/SHA256SUMS" ] || fail "no SHA256SUMS in $ARCHIVE: run this script from an unpacked release archive"
say "verifying $ARCHIVE/SHA256SUMS"
if command -v sha256sum >/dev/null 2>&1; then
    (cd "$ARCHIVE" && sha256sum --check --strict --quiet SHA256SUMS) \
        || fail "SHA256SUMS does not verify: the archive is damaged or was modified"
elif command -v shasum >/dev/null 2>&1; then
    (cd "$ARCHIVE" && shasum -a 256 --check --strict --quiet SHA256SUMS) \
        || fail "SHA256SUMS does not verify: the archive is damaged or was modified"
else
    fail "neither sha256sum nor shasum is installed, so the archive cannot be verified"
fi
# The check reads only the files listed, so a file added to the archive after it was made
# would pass it: only listed files are installed.
listed=$(awk '{ name = substr($0, 67); sub(/^[*]/, "", name); print name }' "$ARCHIVE/SHA256SUMS")
(cd "$ARCHIVE" && find bin docs deploy LICENSE -type f) | while IFS= read -r file; do
    printf '%s\n' "$listed" | grep -Fqx -- "$file" \
        || fail "$file is not listed in SHA256SUMS: the archive was modified"
done || exit 1
for binary in $BINARIES; do
    [ -x "$ARCHIVE/bin/$binary" ] || fail "the archive has no executable bin/$binary"
done

# Files owned by root when root installs; a staging install by another user keeps its own.
owner() {
    if [ "$is_root" = yes ]; then
        chown "$1" "$2"
    fi
}

# Copies $1 to $2 with mode $3 through a temporary name and a rename, so a running relayd
# keeps its old executable and never sees a half-written file.
place() {
    tmp="$(dirname "$2")/.$(basename "$2").new.$$"
    cp "$1" "$tmp"
    chmod "$3" "$tmp"
    owner root:root "$tmp"
    mv -f "$tmp" "$2"
}

directory() {
    mkdir -p "$1"
    chmod "$2" "$1"
}

# 2. Binaries, documentation, service files and the license under PREFIX.
say "installing into $DESTDIR$PREFIX"
directory "$DESTDIR$PREFIX" 0755
owner root:root "$DESTDIR$PREFIX"
(cd "$ARCHIVE" && find bin docs deploy -type d) | while IFS= read -r sub; do
    directory "$DESTDIR$PREFIX/$sub" 0755
    owner root:root "$DESTDIR$PREFIX/$sub"
done
for binary in $BINARIES; do
    place "$ARCHIVE/bin/$binary" "$DESTDIR$PREFIX/bin/$binary" 0755
done
(cd "$ARCHIVE" && find docs deploy -type f) | while IFS= read -r file; do
    case "$file" in
        *.sh) mode=0755 ;;
        *) mode=0644 ;;
    esac
    place "$ARCHIVE/$file" "$DESTDIR$PREFIX/$file" "$mode"
done
place "$ARCHIVE/LICENSE" "$DESTDIR$PREFIX/LICENSE" 0644

# 3. The service account, only on this machine (or when asked): systemd runs relayd as it.
if [ "$create_account" = yes ]; then
    if getent passwd "$ACCOUNT" >/dev/null 2>&1; then
        say "the $ACCOUNT account exists already"
    else
        [ "$is_root" = yes ] || fail "creating the $ACCOUNT account needs root"
        say "creating the system account $ACCOUNT"
        # A group of that name left by an earlier account is reused rather than an error.
        if getent group "$ACCOUNT" >/dev/null 2>&1; then
            group_option="--gid $ACCOUNT"
        else
            group_option="--user-group"
        fi
        # shellcheck disable=SC2086 # group_option is two words or one, on purpose
        useradd --system $group_option --no-create-home --home-dir "$STATE_DIR" \
            --shell /usr/sbin/nologin --comment "Relay daemon" "$ACCOUNT"
    fi
fi

# 4. The state directory (identity and bindings live below it: never touched when present).
directory "$DESTDIR$STATE_DIR" 0700
if [ "$is_root" = yes ] && getent passwd "$ACCOUNT" >/dev/null 2>&1; then
    chown "$ACCOUNT:$ACCOUNT" "$DESTDIR$STATE_DIR"
fi

# 5. The system configuration: readable by everyone, a credentials directory only root reads.
directory "$DESTDIR$CONFIG_DIR" 0755
owner root:root "$DESTDIR$CONFIG_DIR"
directory "$DESTDIR$CONFIG_DIR/credentials" 0700
owner root:root "$DESTDIR$CONFIG_DIR/credentials"
config="$DESTDIR$CONFIG_DIR/config.toml"
if [ -e "$config" ]; then
    say "keeping the existing $config"
else
    say "writing $config (every default, commented out)"
    tmp="$config.new.$$"
    {
        echo "# Relay daemon configuration. Every line below is a default, commented out:"
        echo "# uncomment and change what this site needs, then run: systemctl restart relayd"
        echo "# The complete list: $PREFIX/docs/reference.md"
        echo
        if defaults=$("$DESTDIR$PREFIX/bin/relayd" config defaults 2>/dev/null); then
            printf '%s\n' "$defaults" | sed 's/^\(.\)/# \1/'
        fi
    } >"$tmp"
    chmod 0644 "$tmp"
    owner root:root "$tmp"
    mv "$tmp" "$config"
fi

# 6. The systemd units. The provider-keys drop-in stays in $PREFIX/deploy: systemd refuses
#    to start a unit whose credential files are missing, so it is installed with the keys.
directory "$DESTDIR$UNIT_DIR" 0755
for unit in relayd.service relayd.socket; do
    place "$ARCHIVE/deploy/systemd/system/$unit" "$DESTDIR$UNIT_DIR/$unit" 0644
done

# 7. Enabled and (re)started only on this machine under a running systemd. A restart of a
#    running relayd drains it; relayd.socket keeps the port meanwhile.
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
    say "enabling and starting relayd.socket and relayd.service"
    systemctl daemon-reload
    systemctl enable relayd.socket relayd.service
    systemctl start relayd.socket
    systemctl restart relayd.service
    say "done: check it with 'systemctl status relayd' and 'curl http://127.0.0.1:47632/healthz'"
else
    say "done: files installed under '${DESTDIR:-/}'; systemd units not enabled (DESTDIR set or systemd not running)"
fi
