# shellcheck shell=bash disable=SC2034
# tests/servers/nfs.sh - an NFS server in userspace (nfs-ganesha, FSAL_VFS) on
# 127.0.0.1 for the nfs:// tests (sourced; TESTBED.md §6).
#   source tests/servers/nfs.sh; nfs_start || skip ... "$NFS_WHY"; trap nfs_stop EXIT
# Exports $NFS_EXPORT (a folder under $TB) as nfs://127.0.0.1/export (NFSv3 and v4).
# rpcbind is started only if none runs (and then stopped again). Needs: $TB.
# Sets NFS_URL, NFS_EXPORT; NFS_WHY on failure.

nfs_start() {
    NFS_WHY=""
    local b
    for b in ganesha.nfsd rpcbind rpcinfo; do
        if ! command -v $b >/dev/null 2>&1; then
            NFS_WHY="$b not installed (apt-get install nfs-ganesha nfs-ganesha-vfs rpcbind)"; return 1
        fi
    done
    if ! ls /usr/lib/*/ganesha/libfsalvfs.so >/dev/null 2>&1; then
        NFS_WHY="ganesha VFS backend missing (apt-get install nfs-ganesha-vfs)"; return 1
    fi
    if [ "$(id -u)" != 0 ]; then NFS_WHY="nfs-ganesha needs root here"; return 1; fi
    if ss -Hltn "sport = :2049" 2>/dev/null | grep -q .; then
        NFS_WHY="port 2049 is taken (another NFS server is running)"; return 1
    fi
    NFS_DIR=$TB/nfs
    rm -rf "$NFS_DIR"
    mkdir -p "$NFS_DIR/export" "$NFS_DIR/recov"
    NFS_EXPORT=$NFS_DIR/export
    NFS_RPCBIND_PID=""
    NFS_GANESHA_PID=""
    if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
        mkdir -p /run/rpcbind
        # no "-h 127.0.0.1": rpcbind 1.2.6 then dies with a double free (TESTBED.md)
        setsid rpcbind -f > "$NFS_DIR/rpcbind.out" 2>&1 &
        NFS_RPCBIND_PID=$!
        for _ in $(seq 50); do rpcinfo -p 127.0.0.1 >/dev/null 2>&1 && break; sleep 0.1; done
        if ! rpcinfo -p 127.0.0.1 >/dev/null 2>&1; then
            NFS_WHY="rpcbind did not start: $(tail -n 2 "$NFS_DIR/rpcbind.out" | tr '\n' ' ')"; nfs_stop; return 1
        fi
    fi
    cat > "$NFS_DIR/ganesha.conf" <<CONF
NFS_CORE_PARAM { Bind_addr = 127.0.0.1; NFS_Port = 2049; Protocols = 3, 4;
                 Enable_NLM = false; Enable_RQUOTA = false; mount_path_pseudo = true; }
NFSV4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = $NFS_DIR/recov; }
EXPORT { Export_Id = 1; Path = $NFS_EXPORT; Pseudo = /export;
         Access_Type = RO; Squash = No_Root_Squash; Protocols = 3, 4; Transports = TCP; SecType = sys;
         FSAL { Name = VFS; } }
LOG { Default_Log_Level = EVENT; }
CONF
    setsid ganesha.nfsd -F -f "$NFS_DIR/ganesha.conf" -L "$NFS_DIR/ganesha.log" -p "$NFS_DIR/ganesha.pid" \
        > "$NFS_DIR/ganesha.out" 2>&1 &
    NFS_GANESHA_PID=$!
    for _ in $(seq 200); do
        grep -q 'NFS SERVER INITIALIZED' "$NFS_DIR/ganesha.log" 2>/dev/null && break
        kill -0 "$NFS_GANESHA_PID" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q 'NFS SERVER INITIALIZED' "$NFS_DIR/ganesha.log" 2>/dev/null; then
        NFS_WHY="ganesha did not start: $(grep -E 'CRIT|FATAL|MAJ' "$NFS_DIR/ganesha.log" 2>/dev/null | grep -v -i dbus | tail -n 2 | tr '\n' ' ')"
        nfs_stop; return 1
    fi
    NFS_URL="nfs://127.0.0.1/export"
    return 0
}

nfs_stop() {
    local pid
    for pid in ${NFS_GANESHA_PID:-} ${NFS_RPCBIND_PID:-}; do
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    done
    NFS_GANESHA_PID=""; NFS_RPCBIND_PID=""
    return 0
}
