#!/usr/bin/env bash
# The pagestream CLI end to end: pack an ImageFolder (with a corrupt file, a
# PNG and a stray text file in it) and list files, inspect --json, verify
# (good file, then one flipped byte), cat, packing to a pipe, interrupted
# packs, usage errors and --help everywhere.
source "$(dirname "$0")/lib.sh" "$1"
PY=/usr/bin/python3
D="$TB/it_cli"
rm -rf "$D"
mkdir -p "$D"
trap 'rm -rf "$D"' EXIT

if ! "$PY" -c 'import PIL' 2>/dev/null; then
    skip cli_all "python3-pil is not installed (/usr/bin/python3 -c 'import PIL' failed)"
    exit 0
fi
json() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# 60 JPEGs in 3 classes (one name with a space), sizes 60-300 px; plus bad inputs
"$PY" - "$D/imgs" <<'EOF'
import os, random, sys
from PIL import Image
root = sys.argv[1]
rng = random.Random(7)
for c in ["ant", "bee", "cat dog"]:
    os.makedirs(f"{root}/{c}", exist_ok=True)
for i in range(60):
    c = ["ant", "bee", "cat dog"][i % 3]
    w, h = rng.randint(60, 300), rng.randint(60, 300)
    im = Image.new("RGB", (w, h))
    px = im.load()
    for y in range(0, h, 4):
        for x in range(0, w, 4):
            px[x, y] = (rng.randrange(256), (x * 3) % 256, (y * 5) % 256)
    sub = "/deeper" if i == 5 else ""
    os.makedirs(f"{root}/{c}{sub}", exist_ok=True)
    im.save(f"{root}/{c}{sub}/img{i:03d}.jpg", quality=90)
# a corrupt JPEG (cut short) and a PNG, both in class ant
data = open(f"{root}/ant/img000.jpg", "rb").read()
open(f"{root}/ant/broken.jpg", "wb").write(data[: len(data) // 3])
Image.new("RGB", (32, 32), (1, 2, 3)).save(f"{root}/ant/picture.png")
open(f"{root}/bee/README.txt", "w").write("not an image\n")
EOF
[ -f "$D/imgs/ant/picture.png" ] || { fail cli_make_images "PIL script failed"; exit 0; }

# ---- help and usage ----
for c in pack inspect verify cat; do
    if "$PS" "$c" --help | grep -q "usage: pagestream $c"; then ok "cli_help_$c"; else fail "cli_help_$c" "no usage text / exit $?"; fi
done
check cli_help_main "$PS" --help
"$PS" --version | grep -qE '^pagestream [0-9]+\.[0-9]+' && ok cli_version || fail cli_version "$("$PS" --version 2>&1)"
"$PS" verify --no-such-flag x.pgs >/dev/null 2>&1; [ $? -eq 2 ] && ok cli_unknown_flag_exit_2 || fail cli_unknown_flag_exit_2 "exit not 2"
"$PS" pack "$D/imgs" >/dev/null 2>&1; [ $? -eq 2 ] && ok cli_pack_needs_output || fail cli_pack_needs_output "exit not 2"
"$PS" frobnicate >/dev/null 2>&1; [ $? -eq 2 ] && ok cli_unknown_command || fail cli_unknown_command "exit not 2"
expect_fail cli_bad_page_size "page-size" "$PS" pack "$D/imgs" -o "$D/x.pgs" --page-size 3M+
expect_fail cli_page_size_range "64K to 64M" "$PS" pack "$D/imgs" -o "$D/x.pgs" --page-size 32K

# ---- pack an ImageFolder ----
if "$PS" pack "$D/imgs" -o "$D/a.pgs" --page-size 64K --no-restart-markers > "$D/pack.out" 2> "$D/pack.err"; then
    ok cli_pack_imagefolder
else
    fail cli_pack_imagefolder "$(tail -n 3 "$D/pack.err")"
fi
grep -q 'broken.jpg: skipped: corrupt JPEG' "$D/pack.err" && ok cli_pack_warns_corrupt || fail cli_pack_warns_corrupt "$(cat "$D/pack.err")"
grep -q 'picture.png: skipped: PNG input is not supported' "$D/pack.err" && ok cli_pack_refuses_png || fail cli_pack_refuses_png "$(cat "$D/pack.err")"
grep -q '60 images, 2 skipped, 3 classes' "$D/pack.out" && ok cli_pack_summary || fail cli_pack_summary "$(cat "$D/pack.out")"
grep -qE 'MB/s read.*images/s' "$D/pack.out" && ok cli_pack_throughput_line || fail cli_pack_throughput_line "$(cat "$D/pack.out")"

if "$PS" inspect --json "$D/a.pgs" > "$D/a.json"; then
    r=$(json "$D/a.json" "(d['samples'], d['nclasses'], [c['name'] for c in d['classes']], [c['samples'] for c in d['classes']], d['page_size'], [f['type'] for f in d['fields']], d['shuffled'])")
    exp="(60, 3, ['ant', 'bee', 'cat dog'], [20, 20, 20], 65536, ['jpeg', 'int'], True)"
    [ "$r" = "$exp" ] && ok cli_inspect_json_counts_classes || fail cli_inspect_json_counts_classes "got $r, want $exp"
    npages=$(json "$D/a.json" "d['pages']")
else
    fail cli_inspect_json_counts_classes "inspect failed"; npages=0
fi
"$PS" inspect "$D/a.pgs" | grep -qE '^samples: +60' && ok cli_inspect_text || fail cli_inspect_text "no samples line"
check cli_verify_good "$PS" verify "$D/a.pgs"

# shuffled: the first 15 samples are not all one class (probability of failure ~1e-6)
labels=$(for i in $(seq 0 14); do "$PS" cat "$D/a.pgs" "$i" --field label; done | sort -u | wc -l)
[ "$labels" -gt 1 ] && ok cli_pack_shuffles || fail cli_pack_shuffles "first 15 samples all have one label"

# cat returns the original bytes of a file of the right class
ok_cat=1
for i in 0 7 33 59; do
    "$PS" cat "$D/a.pgs" "$i" > "$D/cat.jpg" || { ok_cat=0; break; }
    lab=$("$PS" cat "$D/a.pgs" "$i" --field label)
    cls=$(json "$D/a.json" "d['classes'][$lab]['name']")
    hit=0
    while IFS= read -r -d '' f; do cmp -s "$f" "$D/cat.jpg" && hit=1; done < <(find "$D/imgs/$cls" -name '*.jpg' -print0)
    [ $hit = 1 ] || { ok_cat=0; break; }
done
[ $ok_cat = 1 ] && ok cli_cat_original_bytes || fail cli_cat_original_bytes "sample $i: bytes not found among class '$cls' files"
expect_fail cli_cat_out_of_range "sample 60 does not exist" "$PS" cat "$D/a.pgs" 60

# ---- one flipped byte inside a page: verify names that page ----
if [ "${npages:-0}" -ge 4 ]; then
    cp "$D/a.pgs" "$D/bad.pgs"
    off=$((4096 + 3 * 65536 + 100))
    orig=$(od -An -tx1 -j "$off" -N1 "$D/bad.pgs" | tr -d ' ')
    printf "\\x$(printf %02x $(( 0x$orig ^ 0xff )))" | dd of="$D/bad.pgs" bs=1 seek="$off" conv=notrunc 2>/dev/null
    expect_fail cli_verify_names_bad_page "page 3 \(samples? [0-9]+(-[0-9]+)?\): checksum mismatch" "$PS" verify "$D/bad.pgs"
    "$PS" verify --json "$D/bad.pgs" > "$D/bad.json"; rc=$?
    r=$(json "$D/bad.json" "(d['ok'], d['bad_pages'], [p['page'] for p in d['pages_failed']])")
    [ $rc = 1 ] && [ "$r" = "(False, 1, [3])" ] && ok cli_verify_json_bad_page || fail cli_verify_json_bad_page "exit $rc, $r"
    # a second bad page is counted too
    off2=$((4096 + 1 * 65536 + 7))
    printf '\x00\x01\x02' | dd of="$D/bad.pgs" bs=1 seek="$off2" conv=notrunc 2>/dev/null
    "$PS" verify "$D/bad.pgs" > "$D/bad2.out" 2>&1
    grep -q 'FAILED: 2 of' "$D/bad2.out" && ok cli_verify_counts_all_bad_pages || fail cli_verify_counts_all_bad_pages "$(tail -n 2 "$D/bad2.out")"
    # the metadata still opens: cat of a sample on the bad page fails, one elsewhere works
    s3=$(json "$D/bad.json" "d['pages_failed'][0].get('first_sample', 0)")
    expect_fail cli_cat_checks_sample "sample $s3 \(page 3\): checksum mismatch" "$PS" cat "$D/bad.pgs" "$s3"
    check cli_cat_good_sample "$PS" cat "$D/bad.pgs" 0 --field label
else
    fail cli_verify_names_bad_page "dataset has only ${npages:-0} pages"
fi
# a damaged footer: a clear error, not a crash
cp "$D/a.pgs" "$D/foot.pgs"
sz=$(stat -c %s "$D/foot.pgs")
printf 'X' | dd of="$D/foot.pgs" bs=1 seek=$((sz - 64)) conv=notrunc 2>/dev/null
expect_fail cli_verify_bad_footer "foot.pgs: no footer" "$PS" verify "$D/foot.pgs"
head -c $((sz - 4096)) "$D/a.pgs" > "$D/trunc.pgs"
expect_fail cli_inspect_truncated "trunc.pgs: .*(truncated|footer)" "$PS" inspect "$D/trunc.pgs"

# ---- to a pipe: byte-identical to the file written with the same seed ----
if "$PS" pack "$D/imgs" -o - --page-size 64K --no-restart-markers 2>/dev/null | cat > "$D/pipe.pgs"; then
    cmp -s "$D/pipe.pgs" "$D/a.pgs" && ok cli_pack_to_pipe_identical || fail cli_pack_to_pipe_identical "pipe output differs from file output"
    check cli_verify_pipe_output "$PS" verify "$D/pipe.pgs"
else
    fail cli_pack_to_pipe_identical "pack -o - failed"
fi

# ---- list files: class names and integer labels ----
( cd "$D/imgs" && for f in ant/img0*.jpg "cat dog"/img0[0-2]*.jpg; do printf '%s\t%s\n' "$f" "${f%%/*}"; done ) > "$D/imgs/list.txt"
printf '# comment\n\n' >> "$D/imgs/list.txt"
n_list=$(grep -c $'\t' "$D/imgs/list.txt")
if "$PS" pack "$D/imgs/list.txt" -o "$D/l.pgs" --page-size 64K > /dev/null 2>&1 && "$PS" inspect --json "$D/l.pgs" > "$D/l.json"; then
    r=$(json "$D/l.json" "(d['samples'], [c['name'] for c in d['classes']], sum(c['samples'] for c in d['classes']))")
    [ "$r" = "($n_list, ['ant', 'cat dog'], $n_list)" ] && ok cli_pack_listfile_names || fail cli_pack_listfile_names "got $r ($n_list lines)"
else
    fail cli_pack_listfile_names "pack or inspect of the list file failed"
fi
( cd "$D/imgs" && i=0; for f in bee/img0*.jpg; do printf '%s/%s\t%d\n' "$D/imgs" "$f" $((i % 2 * 1000 + 5)); i=$((i + 1)); done ) > "$D/ints.txt"
if "$PS" pack "$D/ints.txt" -o "$D/i.pgs" --page-size 64K --no-shuffle --no-restart-markers > /dev/null 2>&1 && "$PS" inspect --json "$D/i.pgs" > "$D/i.json"; then
    r=$(json "$D/i.json" "(d['nclasses'], [l['label'] for l in d['labels']], d['shuffled'])")
    [ "$r" = "(0, [5, 1005], False)" ] && ok cli_pack_listfile_ints || fail cli_pack_listfile_ints "got $r"
    first=$(head -n 1 "$D/ints.txt" | cut -f1)
    "$PS" cat "$D/i.pgs" 0 > "$D/i0.jpg" && cmp -s "$D/i0.jpg" "$first" && ok cli_no_shuffle_keeps_order || fail cli_no_shuffle_keeps_order "sample 0 is not the first line's file"
else
    fail cli_pack_listfile_ints "pack or inspect failed"
fi
printf 'no-tab-here\n' > "$D/badlist.txt"
expect_fail cli_listfile_syntax "badlist.txt:1: expected PATH<TAB>LABEL" "$PS" pack "$D/badlist.txt" -o "$D/bl.pgs"

# ---- --max-side, --mode raw, --restart-markers, --strict ----
if "$PS" pack "$D/imgs" -o "$D/m.pgs" --page-size 64K --max-side 100 > /dev/null 2>&1; then
    "$PS" cat "$D/m.pgs" 3 > "$D/m3.jpg"
    r=$("$PY" -c "from PIL import Image; import sys; im=Image.open(sys.argv[1]); print(max(im.size) <= 100)" "$D/m3.jpg" 2>&1)
    "$PS" inspect --json "$D/m.pgs" > "$D/m.json"
    mw=$(json "$D/m.json" "d['mean_width'] <= 100 and d['mean_height'] <= 100")
    [ "$r" = True ] && [ "$mw" = True ] && ok cli_pack_max_side || fail cli_pack_max_side "image larger than 100 px ($r, $mw)"
else
    fail cli_pack_max_side "pack failed"
fi
if "$PS" pack "$D/imgs" -o "$D/r.pgs" --mode raw --max-side 50 > /dev/null 2>&1; then
    "$PS" inspect --json "$D/r.pgs" > "$D/r.json"
    "$PS" cat "$D/r.pgs" 0 > "$D/r0.raw"
    r=$("$PY" -c "
import json,sys,os
d=json.load(open(sys.argv[1]))
print(d['fields'][0]['type'], d['samples'], os.path.getsize(sys.argv[2]) % 3 == 0 and os.path.getsize(sys.argv[2]) <= 50*50*3)" "$D/r.json" "$D/r0.raw")
    [ "$r" = "raw 60 True" ] && ok cli_pack_raw || fail cli_pack_raw "$r"
else
    fail cli_pack_raw "pack --mode raw failed"
fi
if "$PS" pack "$D/imgs" -o "$D/rst.pgs" >  /dev/null 2>&1; then
    "$PS" cat "$D/rst.pgs" 0 > "$D/rst0.jpg"
    r=$("$PY" -c "
import sys; b=open(sys.argv[1],'rb').read()
from PIL import Image; Image.open(sys.argv[1]).load()
print(b'\xff\xdd' in b and any(bytes([0xff, 0xd0 + k]) in b for k in range(8)))" "$D/rst0.jpg" 2>&1)
    f=$("$PS" inspect --json "$D/rst.pgs" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['restart_markers'])")
    [ "$r" = True ] && [ "$f" = True ] && ok cli_pack_restart_markers || fail cli_pack_restart_markers "markers: $r, flag: $f"
else
    fail cli_pack_restart_markers "pack --restart-markers failed"
fi
expect_fail cli_pack_strict "(broken.jpg|picture.png).*--strict" "$PS" pack "$D/imgs" -o "$D/s.pgs" --strict
[ ! -e "$D/s.pgs" ] && ok cli_pack_strict_leaves_nothing || fail cli_pack_strict_leaves_nothing "s.pgs exists"

# ---- nothing to pack / nonexistent source: no output file ----
mkdir -p "$D/empty/cls"
expect_fail cli_pack_no_images "empty: no images found" "$PS" pack "$D/empty" -o "$D/e.pgs"
expect_fail cli_pack_missing_source "nope: No such file" "$PS" pack "$D/nope" -o "$D/n.pgs"
[ ! -e "$D/e.pgs" ] && [ ! -e "$D/n.pgs" ] && ok cli_failed_pack_no_file || fail cli_failed_pack_no_file "output exists"

# ---- interrupted pack: a FIFO in the list blocks a worker mid-run; SIGINT/SIGTERM then ----
interrupted() {  # NAME SIGNAL EXPECTED_STATUS
    local name=$1 sig=$2 want=$3 out="$D/int/out.pgs" pid st
    rm -rf "$D/int"; mkdir -p "$D/int"
    mkfifo "$D/int/stall.jpg"
    { for f in "$D"/imgs/ant/img*.jpg; do printf '%s\t0\n' "$f"; done; printf '%s\t0\n' "$D/int/stall.jpg";
      for f in "$D"/imgs/bee/img*.jpg; do printf '%s\t1\n' "$f"; done; } > "$D/int/list.txt"
    "$PS" pack "$D/int/list.txt" -o "$out" --no-shuffle --threads 1 --page-size 64K > /dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do compgen -G "$D/int/.out.pgs.tmp*" >/dev/null && break; sleep 0.05; done
    local had_tmp=0; compgen -G "$D/int/.out.pgs.tmp*" >/dev/null && had_tmp=1
    kill -s "$sig" "$pid"; wait "$pid"; st=$?
    local left; left=$(find "$D/int" -maxdepth 1 -name '*out.pgs*' -printf '%f ')
    if [ $had_tmp = 1 ] && [ "$st" = "$want" ] && [ -z "$left" ]; then ok "$name"
    else fail "$name" "temp seen: $had_tmp, exit $st (want $want), left: '$left'"; fi
}
interrupted cli_pack_sigint_leaves_nothing INT 130
interrupted cli_pack_sigterm_leaves_nothing TERM 143

exit 0
