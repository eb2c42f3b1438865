# shellcheck shell=bash disable=SC2034
# tests/servers/tls.sh - nginx serving one file over https with a fresh
# self-signed certificate for 127.0.0.1 (sourced). tls_start DIR FILE sets
# TLS_PORT, TLS_CERT and TLS_PID, or TLS_WHY and returns 1; stop by PID.
tls_start() {
    local dir=$1 file=$2
    TLS_WHY=""
    if ! command -v openssl > /dev/null; then
        TLS_WHY="openssl is not installed (apt-get install openssl)"; return 1
    fi
    if ! command -v nginx > /dev/null; then
        TLS_WHY="nginx is not installed"; return 1
    fi
    mkdir -p "$dir/logs" "$dir/tmp" "$dir/www"
    cp "$file" "$dir/www/"
    if ! openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
        -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 > "$dir/openssl.log" 2>&1; then
        TLS_WHY="openssl could not make a certificate: $(tail -n 1 "$dir/openssl.log")"; return 1
    fi
    TLS_CERT=$dir/cert.pem
    TLS_PORT=$((20000 + RANDOM % 20000))
    cat > "$dir/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$TLS_PORT ssl;
        ssl_certificate $dir/cert.pem;
        ssl_certificate_key $dir/key.pem;
        root $dir/www;
    }
}
CONF
    nginx -p "$dir" -c nginx.conf > "$dir/logs/start.out" 2>&1 &
    TLS_PID=$!
    local probe
    probe="https://127.0.0.1:$TLS_PORT/$(basename "$file")"
    for _ in $(seq 50); do curl -sk -o /dev/null "$probe" && return 0; sleep 0.1; done
    TLS_WHY="TLS nginx did not start: $(tail -n 1 "$dir/logs/error.log" 2>/dev/null)"
    return 1
}
