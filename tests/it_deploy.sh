#!/usr/bin/env bash
# it_deploy.sh - checks of deploy/ and of the repository's shell scripts:
#  - every YAML file under deploy/ parses (all documents) and holds the expected kinds; Secrets hold
#    placeholders only; AWS_* variables come from Secrets/ConfigMaps, never as literal values;
#  - the shell commands inside the manifests run under /bin/sh with the environment Kubernetes would
#    give them (ConfigMap, Secret, Downward API limits) and stand-ins for python3/pagestream: they
#    compute the cache (limit / 2 / local ranks) and threads, and launch torchrun / pack as documented;
#  - every shell script (*.sh outside build folders, deploy/slurm/*.sbatch, .ci/run) passes
#    `shellcheck -S warning`, one line per failing file;
#  - the Dockerfile: stages, non-root final USER, ENTRYPOINT, no AWS secrets in ENV/ARG, COPY --from
#    of known stages, .dockerignore; its apt packages exist in this machine's Debian release; its
#    build step (deploy/image-install.sh) installs a working tree under a DESTDIR; `docker build`
#    where a Docker engine runs;
#  - deploy/slurm/train.sbatch runs torchrun for real on this machine (srun/scontrol stand-ins, 2 ranks).
source "$(dirname "$0")/lib.sh" "$1"
PY=/usr/bin/python3
W="$TB/it_deploy"
rm -rf "$W"
mkdir -p "$W/bin"
trap 'rm -rf "$W"' EXIT
cd "$ROOT" || exit 1

# ---------------------------------------------------------------- YAML
if ! "$PY" -c 'import yaml' 2>/dev/null; then
    skip deploy-yaml "python3-yaml is not installed for $PY (deploy/install-deps.sh test installs it)"
    HAVE_YAML=0
else
    HAVE_YAML=1
    "$PY" - "$W" <<'EOF'
import glob, os, sys, yaml
out = sys.argv[1]
# the kinds each manifest must hold, in order
EXPECT = {
    "deploy/k8s/secret.yaml": ["Secret"],
    "deploy/k8s/configmap.yaml": ["ConfigMap"],
    "deploy/k8s/pack-job.yaml": ["Job"],
    "deploy/k8s/pytorchjob.yaml": ["PyTorchJob"],
    "deploy/k8s/indexed-job.yaml": ["Service", "Job"],
}
files = sorted(glob.glob("deploy/**/*.yaml", recursive=True) + glob.glob("deploy/**/*.yml", recursive=True))
fails = []
docs_by_file = {}
for f in files:
    try:
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
    except yaml.YAMLError as e:
        fails.append("%s: %s" % (f, str(e).replace("\n", " ")))
        continue
    docs_by_file[f] = docs
    for d in docs:
        if not isinstance(d, dict) or not d.get("apiVersion") or not d.get("kind") or \
                not (d.get("metadata") or {}).get("name"):
            fails.append("%s: a document without apiVersion, kind and metadata.name" % f)
    kinds = [d.get("kind") for d in docs if isinstance(d, dict)]
    if f in EXPECT and kinds != EXPECT[f]:
        fails.append("%s: kinds %s, expected %s" % (f, kinds, EXPECT[f]))
missing = sorted(set(EXPECT) - set(files))
if missing:
    fails.append("missing: %s" % ", ".join(missing))
print(("FAIL deploy-yaml: " + "; ".join(fails)) if fails else
      "ok deploy-yaml (%d files, %d documents parse; kinds as expected)" % (
          len(files), sum(len(v) for v in docs_by_file.values())))

def containers(d):
    spec = d.get("spec") or {}
    tmpls = []
    if d["kind"] == "Job":
        tmpls.append(("", spec["template"]))
    elif d["kind"] == "PyTorchJob":
        for role, rs in (spec.get("pytorchReplicaSpecs") or {}).items():
            tmpls.append((role, rs["template"]))
    for role, t in tmpls:
        for c in t["spec"].get("containers", []):
            yield role, c

# credentials: placeholders in Secrets, AWS_* never as literal values in a container
fails = []
for f, docs in docs_by_file.items():
    for d in docs:
        if d.get("kind") == "Secret":
            for k, v in list((d.get("stringData") or {}).items()) + list((d.get("data") or {}).items()):
                if "FAKE" not in str(v) and "REPLACE" not in str(v):
                    fails.append("%s: Secret %s key %s is not an obvious placeholder" % (f, d["metadata"]["name"], k))
        if d.get("kind") in ("Job", "PyTorchJob"):
            for role, c in containers(d):
                for e in c.get("env", []):
                    if e["name"].startswith("AWS_") and "value" in e:
                        fails.append("%s %s: %s set as a literal value" % (f, role or c["name"], e["name"]))
                    if e["name"] in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") and \
                            "secretKeyRef" not in (e.get("valueFrom") or {}):
                        fails.append("%s %s: %s not from a Secret" % (f, role or c["name"], e["name"]))
                text = " ".join(c.get("command", []) + c.get("args", []))
                if "AWS_SECRET_ACCESS_KEY=" in text or "--secret" in text:
                    fails.append("%s %s: a secret on the command line" % (f, role or c["name"]))
print(("FAIL deploy-yaml-secrets: " + "; ".join(fails)) if fails else
      "ok deploy-yaml-secrets (Secrets hold placeholders; keys only through secretKeyRef)")

# the environment Kubernetes would give each shell command: ConfigMap, Secret, values, Downward API
cm = {}
for f, docs in docs_by_file.items():
    for d in docs:
        if d.get("kind") == "ConfigMap":
            cm[d["metadata"]["name"]] = d.get("data") or {}

def quantity(v, res):
    v = str(v)
    if res == "cpu":  # whole cores, rounded up, as resourceFieldRef with divisor 1 gives them
        return str(-(-int(v[:-1]) // 1000)) if v.endswith("m") else str(int(float(v) + 0.999999))
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9}
    for u, m in units.items():
        if v.endswith(u):
            return str(int(float(v[:-len(u)]) * m))
    return str(int(v))

n = 0
for f, docs in sorted(docs_by_file.items()):
    for d in docs:
        if d.get("kind") not in ("Job", "PyTorchJob"):
            continue
        for role, c in containers(d):
            if c.get("command", [])[:2] != ["/bin/sh", "-c"]:
                continue
            env = {}
            for ef in c.get("envFrom", []):
                env.update(cm.get((ef.get("configMapRef") or {}).get("name"), {}))
            lim = (c.get("resources") or {}).get("limits") or {}
            for e in c.get("env", []):
                if "value" in e:
                    env[e["name"]] = str(e["value"])
                    continue
                vf = e.get("valueFrom") or {}
                if "secretKeyRef" in vf:
                    env[e["name"]] = "secret-from-" + vf["secretKeyRef"]["name"]
                elif "resourceFieldRef" in vf:
                    r = vf["resourceFieldRef"]["resource"]
                    assert r.startswith("limits."), r
                    env[e["name"]] = quantity(lim[r[len("limits."):]], r[len("limits."):])
            name = "%s-%s%s" % (os.path.basename(f)[:-5], d["kind"], ("-" + role) if role else "")
            with open(os.path.join(out, name + ".sh"), "w") as fh:
                fh.write(c["args"][0])
            with open(os.path.join(out, name + ".env"), "w") as fh:
                for k, v in sorted(env.items()):
                    fh.write("%s=%s\n" % (k, v))
            n += 1
print("extracted %d manifest commands" % n)
EOF
fi

# ---------------------------------------------------------------- the manifests' commands
# stand-ins that print the command line they got
cat > "$W/bin/python3" <<'EOF'
#!/bin/sh
echo "python3 $*"
EOF
cat > "$W/bin/pagestream" <<'EOF'
#!/bin/sh
echo "pagestream $*"
EOF
chmod +x "$W/bin/python3" "$W/bin/pagestream"
# run_manifest NAME EXTRA_ENV... : the extracted command under /bin/sh with its environment
run_manifest() {
    local name=$1; shift
    [ -f "$W/$name.sh" ] || { echo "no command extracted for $name"; return 1; }
    local -a envs
    mapfile -t envs < "$W/$name.env"
    env -i PATH="$W/bin:/usr/bin:/bin" HOME="$W" "${envs[@]}" "$@" /bin/sh -c "$(cat "$W/$name.sh")"
}
# expect_line NAME OUTPUT WORDS...: the output has a line holding every word
expect_words() {
    local name=$1 out=$2; shift 2
    local w line
    line=$(printf '%s\n' "$out" | grep -E '^(python3|pagestream) ' | head -n 1)
    for w in "$@"; do
        if ! printf '%s' " $line " | grep -qF -- " $w "; then
            fail "$name" "'$w' missing from: ${line:-$(printf '%s' "$out" | tail -n 2 | tr '\n' ' ')}"
            return
        fi
    done
    ok "$name"
}
if [ "$HAVE_YAML" = 1 ]; then
    # 16Gi limit, 2 local ranks: 4 GiB of cache and 4 threads each
    for role in Master Worker; do
        out=$(run_manifest "pytorchjob-PyTorchJob-$role" MASTER_ADDR=pagestream-train-master-0 MASTER_PORT=23456 2>&1)
        expect_words "deploy-k8s-pytorchjob-$role-command" "$out" -m torch.distributed.run --nnodes 2 \
            --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint pagestream-train-master-0:23456 \
            --cache-size 4294967296 --threads 4 s3://training-data/imagenet/train.pgs
    done
    out=$(run_manifest indexed-job-Job JOB_COMPLETION_INDEX=1 2>&1)
    expect_words deploy-k8s-indexed-job-command "$out" -m torch.distributed.run --nnodes 2 --node_rank 1 \
        --master_addr pagestream-train-0.pagestream-train --cache-size 4294967296 --threads 4
    out=$(run_manifest pack-job-Job 2>&1)
    expect_words deploy-k8s-pack-command "$out" pack /data/train -o s3://training-data/imagenet/train.pgs \
        --page-size 4M --threads 4
    if printf '%s\n' "$out" | grep -q '^pagestream verify s3://training-data/imagenet/train.pgs$'; then
        ok deploy-k8s-pack-verifies
    else
        fail deploy-k8s-pack-verifies "no 'pagestream verify' after pack: $(printf '%s' "$out" | tr '\n' ' ')"
    fi
fi

# kustomize (built into kubectl) renders the manifests offline: anchors expanded, every document kept
if command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1; then
    mkdir -p "$W/kz"
    cp deploy/k8s/*.yaml "$W/kz/"
    { echo "resources:"; for f in deploy/k8s/*.yaml; do echo "- $(basename "$f")"; done; } > "$W/kz/kustomization.yaml"
    if kubectl kustomize "$W/kz" > "$W/kz.out" 2> "$W/kz.err"; then
        want=$(cat deploy/k8s/*.yaml | grep -c '^kind:')
        got=$(grep -c '^kind:' "$W/kz.out")
        if [ "$got" = "$want" ]; then ok "deploy-kustomize ($got resources rendered)"; else
            fail deploy-kustomize "$got resources rendered of $want"; fi
    else
        fail deploy-kustomize "$(tail -n 2 "$W/kz.err" | tr '\n' ' ')"
    fi
else
    skip deploy-kustomize "kubectl is not installed (optional)"
fi

# ---------------------------------------------------------------- shellcheck
if ! command -v shellcheck >/dev/null 2>&1; then
    skip deploy-shellcheck "shellcheck is not installed (deploy/install-deps.sh test installs it)"
else
    mapfile -t scripts < <( { find . -name '*.sh' -not -path './build*' -not -path './.git/*'
                              ls deploy/slurm/*.sbatch .ci/run 2>/dev/null; } | sed 's|^\./||' | sort -u)
    clean=0
    for s in "${scripts[@]}"; do
        if out=$(shellcheck -S warning -f gcc "$s" 2>&1); then
            clean=$((clean + 1))
        else
            fail "shellcheck $s" "$(printf '%s\n' "$out" | sed "s|^$s:||" | head -n 5 | tr '\n' ';' | sed 's/;$//')"
        fi
    done
    ok "deploy-shellcheck ($clean of ${#scripts[@]} scripts clean at -S warning)"
fi

# ---------------------------------------------------------------- Dockerfile, statically
DF=deploy/Dockerfile
"$PY" - "$DF" .dockerignore <<'EOF'
import re, sys
df, ign = sys.argv[1], sys.argv[2]
lines = []
cur = ""
for raw in open(df):
    s = raw.rstrip("\n")
    if s.lstrip().startswith("#") and not cur:
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    cur += s
    if cur.strip():
        lines.append(cur.strip())
    cur = ""
fails = []
stages = []       # (name, [instructions])
for l in lines:
    ins = l.split(None, 1)[0].upper()
    if ins == "FROM":
        m = re.match(r"FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", l, re.I)
        stages.append((m.group(2) or str(len(stages)), []))
    elif stages:
        stages[-1][1].append(l)
    elif ins not in ("ARG",):
        fails.append("%s before the first FROM" % ins)
if len(stages) < 2:
    fails.append("%d FROM line(s): expected a multi-stage build" % len(stages))
names = [s[0] for s in stages]
for name, body in stages:
    for l in body:
        m = re.match(r"COPY\s+--from=(\S+)", l, re.I)
        if m and m.group(1) not in names[:names.index(name)]:
            fails.append("COPY --from=%s: no earlier stage of that name" % m.group(1))
for l in lines:
    ins = l.split(None, 1)[0].upper()
    if ins in ("ENV", "ARG") and re.search(r"\b(AWS_[A-Z_]*|[A-Z_]*(SECRET|TOKEN|PASSWORD)[A-Z_]*)\s*[= ]", l):
        fails.append("credential-like variable in %s" % l[:80])
final = stages[-1][1] if stages else []
users = [l.split(None, 1)[1].strip() for l in final if l.upper().startswith("USER ")]
if not users:
    fails.append("the final stage sets no USER (it would run as root)")
elif users[-1].split(":")[0] in ("root", "0"):
    fails.append("the final stage runs as %s" % users[-1])
eps = [l for l in final if l.upper().startswith("ENTRYPOINT ")]
if not eps:
    fails.append("the final stage has no ENTRYPOINT")
elif not re.match(r'ENTRYPOINT\s+\[\s*"', eps[-1], re.I):
    fails.append("ENTRYPOINT is not in exec form: %s" % eps[-1])
try:
    pats = [p.strip() for p in open(ign) if p.strip() and not p.startswith("#")]
    for need in (".git", "build", "build-*", "**/.aws"):
        if need not in pats:
            fails.append(".dockerignore does not exclude %s" % need)
except OSError:
    fails.append("no .dockerignore at the repository root (the build context)")
if fails:
    print("FAIL deploy-dockerfile-static: " + "; ".join(fails))
else:
    print("ok deploy-dockerfile-static (%d stages %s; final USER %s; %s)" % (
        len(stages), "/".join(names), users[-1], eps[-1]))
EOF

# ---------------------------------------------------------------- the build step, outside Docker
STAGE="$W/stage"
# keep the build folder as it was made: with or without the CUDA transfer code
cuda=0
if [ -f "$BUILD/decode/xfer_cuda.o" ]; then cuda=1; fi
if CUDA=$cuda DESTDIR="$STAGE" JOBS=2 deploy/image-install.sh /opt/pagestream "$BUILD" > "$W/install.log" 2>&1; then
    P="$STAGE/opt/pagestream"
    bad=""
    for f in bin/pagestream lib/libpagestream.so.0 lib/libpagestream.a include/pagestream.h \
             lib/pkgconfig/pagestream.pc python/pagestream/__init__.py share/pagestream/examples/train.py; do
        [ -e "$P/$f" ] || bad="$bad missing $f;"
    done
    "$P/bin/pagestream" --version > /dev/null 2>&1 || bad="$bad the installed CLI does not run;"
    if ldd "$P/bin/pagestream" "$P/lib/libpagestream.so.0" | grep -q 'not found'; then bad="$bad unresolved libraries;"; fi
    got=$(env -i PATH=/usr/bin:/bin PYTHONPATH="$P/python" "$PY" -c \
        'import pagestream; print(pagestream.library_path()); print(pagestream.cli_path())' 2>&1)
    case $got in
        "$P/python/pagestream/libpagestream.so"*"$P/python/pagestream/bin/pagestream") ;;
        *) bad="$bad the Python package does not find its library and CLI: $(printf '%s' "$got" | tail -n 1);" ;;
    esac
    grep -q "^prefix=/opt/pagestream$" "$P/lib/pkgconfig/pagestream.pc" ||
        bad="$bad pagestream.pc: $(head -n 1 "$P/lib/pkgconfig/pagestream.pc"), not prefix=/opt/pagestream;"
    pk=$(tr '\n' ' ' < "$P/share/pagestream/runtime-packages" | sed 's/ $//')
    for lib in uring curl jpeg; do
        printf '%s' "$pk" | grep -q "$lib" || bad="$bad no $lib package in runtime-packages ($pk);"
    done
    if [ -z "$bad" ]; then ok "deploy-image-install (runtime packages: $pk)"; else fail deploy-image-install "$bad"; fi
else
    fail deploy-image-install "$(tail -n 3 "$W/install.log" | tr '\n' ' ')"
    pk=""
fi

# the packages the Dockerfile installs exist in this machine's release (Debian 12 = the image's base)
if ! command -v apt-cache >/dev/null 2>&1 || ! compgen -G '/var/lib/apt/lists/*Packages*' > /dev/null; then
    skip deploy-dockerfile-packages "no apt package lists on this machine (apt-get update)"
elif ! grep -q 'VERSION_CODENAME=bookworm' /etc/os-release 2>/dev/null; then
    skip deploy-dockerfile-packages "this machine is not Debian 12, the image's base"
else
    build_pkgs=$(sed -n '/^FROM \${BUILD_IMAGE}/,/^FROM /p' "$DF" | tr '\\' ' ' | tr -s ' \n' ' ' |
                 sed -n 's/.*--no-install-recommends \(.*\); rm -rf.*/\1/p' | tr -d '"' |
                 sed "s/\${JPEG_DEV}/$(sed -n 's/^ARG JPEG_DEV=//p' "$DF")/")
    py_pkgs=$(sed -n 's/^ARG PYTHON_PACKAGES="\(.*\)"/\1/p' "$DF")
    missing=""
    # shellcheck disable=SC2086
    for p in $build_pkgs $py_pkgs $pk ca-certificates; do
        apt-cache show "$p" > /dev/null 2>&1 || missing="$missing $p"
    done
    if [ -z "$build_pkgs" ]; then
        fail deploy-dockerfile-packages "could not read the build stage's package list from $DF"
    elif [ -n "$missing" ]; then
        fail deploy-dockerfile-packages "unknown to apt:$missing"
    else
        ok "deploy-dockerfile-packages (build: $(echo $build_pkgs); runtime: $pk ca-certificates $py_pkgs)"
    fi
fi

# docker build, where an engine runs
if command -v docker >/dev/null 2>&1 && docker info > /dev/null 2>&1; then
    tag="pagestream-it-deploy:$$"
    if timeout 900 docker build -f "$DF" -t "$tag" . > "$W/docker.log" 2>&1; then
        v=$(docker run --rm "$tag" --version 2>&1)
        uid=$(docker run --rm --entrypoint id "$tag" -u 2>&1)
        if [ "$uid" != 0 ] && [ -n "$v" ]; then ok "deploy-docker-build ($v, uid $uid)"; else
            fail deploy-docker-build "runs as uid $uid; --version: $v"; fi
        docker rmi "$tag" > /dev/null 2>&1
    else
        fail deploy-docker-build "$(tail -n 5 "$W/docker.log" | tr '\n' ' ')"
    fi
else
    skip deploy-docker-build "no Docker engine on this machine"
fi

# ---------------------------------------------------------------- the Slurm script, for real
cat > "$W/bin/srun" <<'EOF'
#!/bin/bash
# srun stand-in: a one-node allocation runs the command once, here
while [ $# -gt 0 ]; do case $1 in --nodes|--ntasks-per-node|-N|-n) shift 2 ;; -*) shift ;; *) break ;; esac; done
exec "$@"
EOF
cat > "$W/bin/scontrol" <<'EOF'
#!/bin/bash
[ "$1 $2" = "show hostnames" ] && { echo "${3%%,*}"; exit 0; }
exit 1
EOF
chmod +x "$W/bin/srun" "$W/bin/scontrol"
SB="$ROOT/deploy/slurm/train.sbatch"
# no credentials for s3:// -> refuses before starting anything
expect_fail deploy-slurm-no-credentials 'needs credentials' \
    env -u AWS_ACCESS_KEY_ID -u AWS_SHARED_CREDENTIALS_FILE HOME="$W" PATH="$W/bin:$PATH" \
    SLURM_SUBMIT_DIR="$ROOT" bash "$SB" s3://bucket/train.pgs
if ! "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    skip deploy-slurm-run "PyTorch is not installed for $PY"
else
    IMG=$(test_images 300) && "$PS" pack "$IMG" -o "$W/train.pgs" --page-size 1M --threads 2 -q > "$W/pack.log" 2>&1 ||
        { fail deploy-slurm-run "could not pack the test images: $(tail -n 2 "$W/pack.log" | tr '\n' ' ')"; exit 1; }
    port=$((20000 + RANDOM % 20000))
    # 1 node x 2 ranks, 2 GiB per node, 2 CPUs: 512 MiB of cache and 1 thread per rank
    if timeout 180 env PATH="$W/bin:$PATH" PYTHON="$PY" SLURM_NNODES=1 SLURM_JOB_NODELIST=localhost \
        SLURM_JOB_ID=$$ SLURM_MEM_PER_NODE=2048 SLURM_CPUS_PER_TASK=2 GPUS_PER_NODE=2 RDZV_PORT=$port \
        SLURM_SUBMIT_DIR="$ROOT" PYTHONPATH="$ROOT/python" PAGESTREAM_LIB="$BUILD/libpagestream.so" \
        OMP_NUM_THREADS=1 PAGESTREAM_LOG=0 \
        bash "$SB" "$W/train.pgs" --epochs 1 --crop 32 --batch-size 16 --max-batches 3 > "$W/slurm.log" 2>&1 &&
       grep -q 'cache 536870912 bytes and 1 decode threads per rank' "$W/slurm.log" &&
       grep -q 'world 2' "$W/slurm.log" && grep -q 'epoch 0 .*images/s' "$W/slurm.log"; then
        ok "deploy-slurm-run ($(grep -m1 -o 'epoch 0 .*' "$W/slurm.log"))"
    else
        fail deploy-slurm-run "$(grep -v '^\s*$' "$W/slurm.log" | tail -n 4 | tr '\n' ' ')"
    fi
fi
[ "$T_FAILED" -eq 0 ]
