# shellcheck shell=bash disable=SC2034
# tests/servers/nginx.sh - nginx on 127.0.0.1 for the http tests (sourced; TESTBED.md §3).
#   source tests/servers/nginx.sh; nginx_start || skip ... "$NGINX_WHY"; trap nginx_stop EXIT
# Serves $TB/www at $NGINX_URL (http://127.0.0.1:PORT) with these locations:
#   /F            static file F (Range -> 206)
#   /delay/F      +50 ms before the first byte (echo_sleep), then F
#   /norange/F    F, ignoring Range (200 with the whole object)
#   /fail/F       503 Service Unavailable
#   /stall/F      F: the first 4 KiB (headers included), then 1 byte/s (a stalled stream)
#   /hang/F       no answer for 60 s
#   /slow/F       F at 10 MB/s per request
# and, when openssl can make a self-signed certificate, the same files over
# HTTPS with HTTP/2 at $NGINX_TLS_URL (certificate $NGINX_CERT, for "localhost";
# the protocol of each request goes to $NGINX_DIR/logs/tls_access.log).
# Needs: $TB (scratch folder). Sets NGINX_URL, NGINX_PORT; NGINX_WHY on failure.

_nginx_free_port() {
    local p
    for _ in $(seq 50); do
        p=$((20000 + RANDOM % 20000))
        if ! ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; then echo "$p"; return 0; fi
    done
    return 1
}

nginx_start() {
    NGINX_WHY=""
    if ! command -v nginx >/dev/null 2>&1; then
        NGINX_WHY="nginx is not installed (apt-get install nginx libnginx-mod-http-echo)"; return 1
    fi
    local mod=/usr/lib/nginx/modules/ngx_http_echo_module.so
    if [ ! -f "$mod" ]; then
        NGINX_WHY="nginx echo module missing (apt-get install libnginx-mod-http-echo)"; return 1
    fi
    NGINX_DIR=$TB/nginx
    mkdir -p "$NGINX_DIR/logs" "$NGINX_DIR/tmp" "$TB/www"
    NGINX_PORT=${NGINX_PORT:-$(_nginx_free_port)}
    NGINX_TLS_URL=""
    local tls=""
    if command -v openssl >/dev/null 2>&1 &&
       openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost \
           -keyout "$NGINX_DIR/key.pem" -out "$NGINX_DIR/cert.pem" > "$NGINX_DIR/logs/openssl.out" 2>&1; then
        NGINX_TLS_PORT=$(_nginx_free_port)
        NGINX_CERT=$NGINX_DIR/cert.pem
        tls="server {
        listen 127.0.0.1:$NGINX_TLS_PORT ssl http2;
        ssl_certificate $NGINX_DIR/cert.pem;
        ssl_certificate_key $NGINX_DIR/key.pem;
        access_log $NGINX_DIR/logs/tls_access.log tls;
        root $TB/www;
        location / { }
    }"
    fi
    cat > "$NGINX_DIR/nginx.conf" <<CONF
load_module $mod;
daemon on;
worker_processes 2;
pid $NGINX_DIR/nginx.pid;
error_log $NGINX_DIR/logs/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $NGINX_DIR/tmp/body;
    proxy_temp_path $NGINX_DIR/tmp/proxy;
    fastcgi_temp_path $NGINX_DIR/tmp/fcgi;
    uwsgi_temp_path $NGINX_DIR/tmp/uwsgi;
    scgi_temp_path $NGINX_DIR/tmp/scgi;
    sendfile on; tcp_nopush on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    log_format tls '\$server_protocol \$status \$request';
    $tls
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $TB/www;
        location / { }
        location /norange/ { alias $TB/www/; max_ranges 0; }
        location /stall/ { alias $TB/www/; limit_rate_after 4k; limit_rate 1; }
        location /slow/ { alias $TB/www/; limit_rate 10m; }
        location ~ ^/delay/(?<f>.+)\$ { echo_sleep 0.05; echo_exec /\$f; }
        location ~ ^/hang/ { echo_sleep 60; echo "late"; }
        location ~ ^/fail/ { return 503; }
    }
}
CONF
    if ! nginx -t -q -p "$NGINX_DIR" -c nginx.conf >"$NGINX_DIR/logs/test.out" 2>&1; then
        NGINX_WHY="nginx -t failed: $(tail -n 2 "$NGINX_DIR/logs/test.out" | tr '\n' ' ')"; return 1
    fi
    if ! nginx -p "$NGINX_DIR" -c nginx.conf >"$NGINX_DIR/logs/start.out" 2>&1; then
        NGINX_WHY="nginx did not start: $(tail -n 2 "$NGINX_DIR/logs/start.out" | tr '\n' ' ')"; return 1
    fi
    NGINX_URL="http://127.0.0.1:$NGINX_PORT"
    for _ in $(seq 50); do
        if [ -s "$NGINX_DIR/nginx.pid" ] && curl -s -o /dev/null "$NGINX_URL/"; then
            NGINX_PID=$(cat "$NGINX_DIR/nginx.pid")
            [ -n "$tls" ] && NGINX_TLS_URL="https://localhost:$NGINX_TLS_PORT"
            return 0
        fi
        sleep 0.1
    done
    NGINX_WHY="nginx did not answer on $NGINX_URL within 5 s"
    nginx_stop
    return 1
}

nginx_stop() {
    local pid=${NGINX_PID:-}
    [ -z "$pid" ] && [ -s "${NGINX_DIR:-/nonexistent}/nginx.pid" ] && pid=$(cat "$NGINX_DIR/nginx.pid")
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    NGINX_PID=""
    return 0
}
