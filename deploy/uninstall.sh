#!/bin/sh
# Removes Relay installed by install.sh (see docs/operations.md):
#
#   sudo /opt/relay/deploy/uninstall.sh           # service, units and binaries; state kept
#   sudo /opt/relay/deploy/uninstall.sh --purge   # also /var/lib/relay, /etc/relay, the account
#
# Environment: DESTDIR (a staging root, empty by default), PREFIX (/opt/relay by default).
#
# Without --purge, /var/lib/relay (the daemon's identity, pins and bindings) and /etc/relay
# (configuration and provider keys) stay, so installing again brings the same daemon back.
set -eu

DESTDIR="${DESTDIR:-}"
PREFIX="${PREFIX:-/opt/relay}"
ACCOUNT=relay
STATE_DIR=/var/lib/relay
CONFIG_DIR=/etc/relay
UNIT_DIR=/etc/systemd/system
BINARIES="relayd relay-mcp relay-worker relay-hook relay-doctor"

say() { printf 'uninstall.sh: %s\n' "$*"; }
warn() { printf 'uninstall.sh: warning: %s\n' "$*" >&2; }
fail() { printf 'uninstall.sh: error: %s\n' "$*" >&2; exit 1; }

purge=no
for arg in "$@"; do
    case "$arg" in
        --purge) purge=yes ;;
        -h|--help)
            sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) fail "unknown argument '$arg' (try --help)" ;;
    esac
done

case "$PREFIX" in
    /*) ;;
    *) fail "PREFIX must be an absolute path, got '$PREFIX'" ;;
esac
if [ -z "$DESTDIR" ] && [ "$(id -u)" != 0 ]; then
    fail "removing Relay from this machine needs root (run it with sudo), or set DESTDIR to a staging root"
fi

# 1. Stop the service (relayd drains for up to drain_secs) and the socket, and disable both.
systemd=no
if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ]; then
    systemd=yes
fi
if [ "$systemd" = yes ]; then
    say "stopping and disabling relayd.service and relayd.socket"
    systemctl disable --now relayd.service relayd.socket 2>/dev/null || true
fi

# 2. The units and the drop-in directory of the provider keys.
rm -f "$DESTDIR$UNIT_DIR/relayd.service" "$DESTDIR$UNIT_DIR/relayd.socket"
rm -f "$DESTDIR$UNIT_DIR/relayd.service.d/provider-keys.conf"
rmdir "$DESTDIR$UNIT_DIR/relayd.service.d" 2>/dev/null || true
if [ "$systemd" = yes ]; then
    systemctl daemon-reload
    systemctl reset-failed relayd.service relayd.socket 2>/dev/null || true
fi

# 3. Binaries, documentation, service files and the license.
say "removing $DESTDIR$PREFIX"
for binary in $BINARIES; do
    rm -f "$DESTDIR$PREFIX/bin/$binary"
done
rmdir "$DESTDIR$PREFIX/bin" 2>/dev/null || true
rm -rf "$DESTDIR$PREFIX/docs" "$DESTDIR$PREFIX/deploy"
rm -f "$DESTDIR$PREFIX/LICENSE"
rmdir "$DESTDIR$PREFIX" 2>/dev/null || true

# 4. State, configuration and the account only when asked.
if [ "$purge" = yes ]; then
    say "purging $DESTDIR$STATE_DIR and $DESTDIR$CONFIG_DIR"
    rm -rf "$DESTDIR$STATE_DIR" "$DESTDIR$CONFIG_DIR"
    if [ -z "$DESTDIR" ] && getent passwd "$ACCOUNT" >/dev/null 2>&1; then
        say "removing the $ACCOUNT account"
        userdel "$ACCOUNT"
    fi
else
    say "kept $DESTDIR$STATE_DIR (identity state) and $DESTDIR$CONFIG_DIR; --purge removes them"
fi

# 5. What install.sh did not put there stays, and is named: files under PREFIX (a managed
# bundle, say), and the agents' managed wiring, which would go on starting the removed
# programs for every user of the machine.
if [ -d "$DESTDIR$PREFIX" ]; then
    warn "kept $DESTDIR$PREFIX: it holds files install.sh did not put there (a managed bundle, say); remove them by hand"
fi
for wiring in /etc/claude-code/managed-settings.json /etc/claude-code/managed-mcp.json \
    /etc/codex/managed_config.toml /etc/codex/hooks.json; do
    if [ -f "$DESTDIR$wiring" ] && grep -Fq -- "$PREFIX/bin/relay-" "$DESTDIR$wiring"; then
        warn "$DESTDIR$wiring still starts programs from $PREFIX/bin for every user: remove Relay's entries from it (docs/harnesses.md)"
    fi
done
say "done"
