# shellcheck shell=bash disable=SC2034
# tests/servers/swift.sh - OpenStack Swift + s3api + tempauth on 127.0.0.1, a
# real S3 API that verifies SigV4 signatures (sourced; TESTBED.md §2b).
#   source tests/servers/swift.sh; swift_start || skip ... "$SWIFT_WHY"; trap swift_stop EXIT
# Credentials: access key test:tester, secret testing, region us-east-1;
# storage_domain s3.amazonaws.com (virtual-hosted: BUCKET.s3.amazonaws.com:PORT).
# Needs: $TB. Sets SWIFT_URL (the S3 endpoint), SWIFT_PORT; SWIFT_WHY on failure.

_swift_free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return 0; fi
    done
    return 1
}

swift_start() {
    SWIFT_WHY=""
    local n p
    for n in swift-proxy-server swift-object-server swift-container-server swift-account-server swift-ring-builder; do
        if ! command -v $n >/dev/null 2>&1; then
            SWIFT_WHY="$n not installed (apt-get install swift-proxy swift-object swift-container swift-account)"
            return 1
        fi
    done
    if [ ! -f /etc/swift/swift.conf ]; then SWIFT_WHY="/etc/swift/swift.conf missing"; return 1; fi
    if ! id swift >/dev/null 2>&1; then SWIFT_WHY="no user 'swift' (swift packages incomplete)"; return 1; fi
    SWIFT_DIR=$TB/swift
    rm -rf "$SWIFT_DIR"
    mkdir -p "$SWIFT_DIR/etc" "$SWIFT_DIR/srv/sdb1" "$SWIFT_DIR/run" "$SWIFT_DIR/log"
    SWIFT_PORT=${SWIFT_PORT:-$(_swift_free_port)}
    SWIFT_PIDS=""
    local memcache=""
    if command -v memcached >/dev/null 2>&1; then
        local mp; mp=$(_swift_free_port)
        setsid memcached -l 127.0.0.1 -p "$mp" -U 0 -u nobody -m 16 > "$SWIFT_DIR/log/memcached.log" 2>&1 &
        SWIFT_PIDS="$!"
        memcache="$mp"
    fi
    (
        cd "$SWIFT_DIR/etc" || exit 1
        for n in object container account; do
            p=$(_swift_free_port)
            cat > $n-server.conf <<CONF
[DEFAULT]
devices = $SWIFT_DIR/srv
mount_check = false
disable_fallocate = true
bind_ip = 127.0.0.1
bind_port = $p
workers = 1
swift_dir = $SWIFT_DIR/etc
log_name = $n
[pipeline:main]
pipeline = $n-server
[app:$n-server]
use = egg:swift#$n
CONF
            swift-ring-builder $n.builder create 10 1 1 && \
            swift-ring-builder $n.builder add "r1z1-127.0.0.1:$p/sdb1" 1 && \
            swift-ring-builder $n.builder rebalance
        done > "$SWIFT_DIR/log/rings.log" 2>&1
    ) || { SWIFT_WHY="swift-ring-builder failed: $(tail -n 2 "$SWIFT_DIR/log/rings.log" | tr '\n' ' ')"; swift_stop; return 1; }
    cat > "$SWIFT_DIR/etc/proxy-server.conf" <<CONF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $SWIFT_PORT
workers = 2
swift_dir = $SWIFT_DIR/etc
log_name = proxy
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk s3api tempauth copy slo dlo proxy-logging proxy-server
[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
[filter:s3api]
use = egg:swift#s3api
location = us-east-1
storage_domain = s3.amazonaws.com
[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = testing .admin
[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:${memcache:-11211}
[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:bulk]
use = egg:swift#bulk
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
CONF
    # the servers drop privileges to user swift
    chown -R swift:swift "$SWIFT_DIR/srv"
    for n in object container account proxy; do
        ( cd "$SWIFT_DIR" && exec setsid swift-$n-server "etc/$n-server.conf" -v > "log/$n.log" 2>&1 ) &
        echo $! > "$SWIFT_DIR/run/$n.pid"
        SWIFT_PIDS="$SWIFT_PIDS $!"
    done
    SWIFT_URL="http://127.0.0.1:$SWIFT_PORT"
    for _ in $(seq 150); do
        if curl -sf "$SWIFT_URL/healthcheck" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    SWIFT_WHY="swift proxy did not answer on $SWIFT_URL within 30 s: $(tail -n 3 "$SWIFT_DIR/log/proxy.log" | tr '\n' ' ')"
    swift_stop
    return 1
}

swift_stop() {
    local pid
    [ -n "${SWIFT_PIDS:-}" ] || return 0
    # each server was started with setsid: its workers share its process group
    for pid in $SWIFT_PIDS; do kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null; done
    for _ in $(seq 50); do
        local alive=0
        for pid in $SWIFT_PIDS; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for pid in $SWIFT_PIDS; do kill -KILL -- "-$pid" 2>/dev/null; done
    SWIFT_PIDS=""
    return 0
}
