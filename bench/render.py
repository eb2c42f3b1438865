#!/usr/bin/python3
# render.py - turns the raw results of bench/run.sh (RESULTS_DIR/*.tsv, *.json) into bench/RESULTS.md:
# every figure as a ratio to the peer or ceiling measured in the same run, with the absolute numbers,
# the machine, the evidence, and for each goal missed the reason read off the counters.
#   /usr/bin/python3 bench/render.py RESULTS_DIR OUT.md
import json
import os
import re
import sys


def read_tsv(path, ncols):
    rows = []
    if not os.path.exists(path):
        return rows
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        f = line.split("\t")
        rows.append(f + [""] * (ncols - len(f)))
    return rows


def num(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def mib(b):
    return "%.0f MiB" % (float(b) / 1048576)


def load_json(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def steady(d, key):
    ep = d["epochs"][1:] or d["epochs"]
    secs = sum(e["seconds"] for e in ep) or 1
    if key == "cpu":
        return sum(e["cpu_ms_per_image"] * e["images"] for e in ep) / max(1, sum(e["images"] for e in ep))
    if key == "wait_io":
        return sum(e["workers_wait_storage_s"] for e in ep) / secs
    if key == "wait_caller":
        return sum(e["caller_wait_s"] for e in ep) / secs
    if key == "read":
        return sum(e["bytes_read"] for e in ep) / secs / 1e6
    if key == "ips":
        return sum(e["images"] for e in ep) / secs
    return None


def why(rdir, scen, figure, value, ref, ratio, goal, machine):
    """Why a goal was missed and what would close it, from the counters of this run."""
    ncores = int(machine.get("nproc", "1"))
    out = []
    if scen.startswith("RAM"):
        tag = "inet" if "ImageNet" in scen else "low"
        ps = load_json(os.path.join(rdir, "ram_%s_ps.json" % tag))
        dec = {}
        try:
            for line in open(os.path.join(rdir, "ram_%s_decode.txt" % tag)):
                f = re.split(r"\s{2,}", line.strip())
                if len(f) >= 3 and re.match(r"\((a|b|e)\) ", line):
                    # e (restart markers, as pack stores them by default) replaces b when measured
                    key = "a_ms" if line.startswith("(a)") else "b_ms"
                    if key == "a_ms" or line.startswith("(e)") or "b_ms" not in dec:
                        dec[key] = float(f[2].split()[0])
        except (OSError, ValueError):
            pass
        if ps:
            cpu = steady(ps, "cpu")
            ips = steady(ps, "ips")
            wc = steady(ps, "wait_caller")
            busy = ips * cpu / 1000.0
            if "PyTorch" in figure:
                out.append("PyTorch's workers pay for a full PIL decode of every image plus an antialiased resize, "
                           "while pagestream decodes only the crop's rows at the smallest DCT scale that keeps it "
                           ">= 224 px; at ImageNet-like bit rates Huffman decoding of the whole scan dominates both "
                           "(DATASETS.md), which caps the gain of crop-aware decode.")
                if dec.get("a_ms") and dec.get("b_ms"):
                    out.append("Measured here: full decode + crop + resize costs %.2f ms/image, crop-aware %.2f "
                               "ms/image (%.2fx); pagestream's workers spent %.2f ms/image." %
                               (dec["a_ms"], dec["b_ms"], dec["a_ms"] / dec["b_ms"], cpu))
                out.append("To close it: smaller stored images (`pack --max-side`), or restart markers "
                           "(`pack --restart-markers`) so crops skip whole MCU rows; the GPU path (nvJPEG) is "
                           "not in this build.")
            else:
                out.append("pagestream ran %.0f images/s using %.2f of %d cores (%.2f CPU ms/image in decode); the "
                           "bare loop needs %.2f ms/image." % (ips, busy, ncores, cpu, dec.get("b_ms", 0)))
                if dec.get("b_ms") and cpu > dec["b_ms"] * 1.1:
                    out.append("The per-image decode cost inside the loader is %.0f%% above the bare loop's: cache "
                               "and memory bandwidth shared with batch assembly; the rest of the gap is time the "
                               "workers are not decoding (%.2f of %d cores busy)." %
                               (100 * (cpu / dec["b_ms"] - 1), busy, ncores))
                if busy < 0.9 * ncores:
                    out.append("Workers were idle %.0f%% of the time: the caller waited %.2f s per second on "
                               "batches, so the ring or the page admission starves them; a deeper --ring-depth "
                               "or more pages admitted ahead would close it." % (100 * (1 - busy / ncores), wc))
                lo = machine.get("load_start", "")
                out.append("Machine load at the start of the run: %s (other jobs share these %d cores)." %
                           (lo, ncores))
    elif scen.startswith("EBS"):
        d = load_json(os.path.join(rdir, "ebs_quasi_none.json"))
        if d:
            e = d["epochs"][0]
            rd = e["bytes_read"] / e["seconds"] / 1e6
            out.append("The device delivered %.1f MB/s (%.1f%% of 131.1 MB/s) of which %.1f%% was payload "
                       "(read amplification %.3f: the unused tail of each 4 MiB page)." %
                       (rd, 100 * rd / 131.072, 100 / e["read_amplification"] if e["read_amplification"] else 0,
                        e["read_amplification"]))
            out.append("Start-up (header, footer and the first window of pages before the first batch) counts "
                       "in the epoch's time: %.1f s for the epoch." % e["seconds"])
            out.append("To close it: pack with fuller pages (larger pages relative to samples), and keep the "
                       "queue depth >= 2 reads per device throttle period.")
    elif scen.startswith("S3") or scen.startswith("HTTP"):
        tag = "s3" if scen.startswith("S3") else "http"
        d = load_json(os.path.join(rdir, "%s_ps.json" % tag))
        seq = load_json(os.path.join(rdir, "%s_seq.json" % tag))
        io = None
        try:
            for line in open(os.path.join(rdir, "%s_ioread.txt" % tag)):
                if "MiB/s=" in line:
                    io = float(line.rsplit("MiB/s=", 1)[1].split()[0]) * 1.048576
        except (OSError, ValueError):
            pass
        if d:
            ep = d["epochs"][1:] or d["epochs"]
            secs = sum(e["seconds"] for e in ep) or 1
            rd = sum(e["bytes_read"] for e in ep) / secs / 1e6
            wait = sum(e["workers_wait_storage_s"] for e in ep) / secs
            out.append("pagestream read %.1f MB/s of pages with %d retries, and its workers waited on pages %.0f%% "
                       "of the time: the loader is bound by reads, not by CPU." %
                       (rd, d.get("retries", 0), 100 * wait / max(1, ncores)))
            if io and io >= rd:
                out.append("Its %s backend alone (io_read, 8 sequential 4 MiB reads in flight) reached %.1f MB/s "
                           "= %.0f%% of the ceiling, so the backend %s; by Little's law the loader kept about %.1f "
                           "of its 8 reads in flight (8 x %.1f / %.1f)." %
                           (tag, io, 100 * io / ref, "is not the gap" if io >= 0.9 * ref else
                            "accounts for part of the gap", 8 * rd / io, rd, io))
            elif io:
                out.append("io_read (the %s backend alone) got only %.1f MB/s, less than the loader itself: the "
                           "server's throughput moved during the run (see the rounds), so this run cannot split "
                           "the gap between backend and loader." % (tag, io))
            srd = None
            window_limited = False
            if seq:
                sep = seq["epochs"][1:] or seq["epochs"]
                srd = sum(e["bytes_read"] for e in sep) / (sum(e["seconds"] for e in sep) or 1) / 1e6
            if srd and srd > 1.1 * rd:
                window_limited = True
                ahead = d.get("cache_slots", 0) - d.get("window_pages", 0)
                out.append("The same loader with --order sequential read %.1f MB/s (%.0f%% of the ceiling): the "
                           "loss is quasi_random's admission. Its cache of %d slots keeps %d pages in the "
                           "shuffle window and only %d for reading ahead (min(slots/4, 2 x depth)); a page slot "
                           "is freed only when the last of its samples drawn from the window is decoded, so with "
                           "~%.0f ms per read the queue of 8 runs dry between releases." %
                           (srd, 100 * srd / ref, d.get("cache_slots", 0), d.get("window_pages", 0), ahead,
                            1000 * 8 * 4.194304 / max(rd, 1)))
            elif srd:
                out.append("--order sequential read %.1f MB/s in its single run, no faster: in this run the "
                           "server, not the shuffle window, set the pace; %s" %
                           (srd, "Swift's proxy is Python and shares the 2 cores with the client, whose own CPU "
                            "(page CRCs, copying samples into batches) it competes with, unlike curl_ceiling."
                            if tag == "s3" else "nginx shares the 2 cores with the client."))
            if window_limited or not srd:
                out.append("To close it: size quasi_random's read-ahead share by the backend's bandwidth-delay "
                           "product rather than min(slots/4, 2 x depth) (e.g. 4 x depth slots when reads take tens "
                           "of ms); a larger --cache-size alone does not help (the share is capped at 2 x depth), a "
                           "larger --queue-depth does (it raises both the reads in flight and the cap).")
            else:
                out.append("To close it: first measure on a machine where the server does not share the client's "
                           "cores (compare the spread of the rounds in the evidence with the gap); the HTTP scenario, whose "
                           "server is cheap, isolates the loader's own share of such a gap.")
    if not out:
        out.append("No counter explains it in this run; see the evidence above.")
    return " ".join(out)


def main():
    rdir, out_md = sys.argv[1], sys.argv[2]
    machine = {}
    for line in open(os.path.join(rdir, "machine.txt")):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            machine[k] = v
    rows = read_tsv(os.path.join(rdir, "rows.tsv"), 8)
    notes = read_tsv(os.path.join(rdir, "notes.tsv"), 2)
    skipped = read_tsv(os.path.join(rdir, "skipped.tsv"), 2)
    mem = read_tsv(os.path.join(rdir, "memory.tsv"), 11)

    L = []
    L.append("# pagestream benchmark results")
    L.append("")
    L.append("Generated by `make bench` (bench/run.sh, bench/render.py) on %s; do not edit by hand." %
             machine.get("date", "?"))
    L.append("")
    L.append("**Machine:** %s cores (`nproc`), %s, %s RAM, kernel %s, %s. Load average %s at the start, %s at "
             "the end (the machine is shared: figures move with it, ratios less so since each pair ran back to "
             "back). Commit %s. Peer: %s. Run time %s s." %
             (machine.get("nproc"), machine.get("cpu"), machine.get("mem"), machine.get("kernel"),
              machine.get("os"), machine.get("load_start"), machine.get("load_end"), machine.get("commit"),
              machine.get("torch"), machine.get("seconds")))
    L.append("")
    L.append("![results](results.png)")
    L.append("")
    L.append("| scenario | figure | pagestream | peer or ceiling | ratio | goal | met |")
    L.append("|---|---|---|---|---|---|---|")
    misses = []
    for scen, fig, val, unit, refname, ref, goal, note in rows:
        v, r, g = num(val), num(ref), num(goal)
        ratio = v / r if v is not None and r else None
        if g is None:
            gtxt, met = "-", "(reported)"
        else:
            gtxt = ">= %.2fx" % g if g >= 1 else (">= %.0f%%" % (g * 100) if "within" not in note
                                                  else "within %.1fx" % (1 / g))
            met = "yes" if ratio is not None and ratio >= g - 1e-9 else "**no**"
            if met != "yes":
                misses.append((scen, fig, v, r, ratio, g))
        rtxt = "-" if ratio is None else ("%.2fx" % ratio if ratio >= 1.5 or "images" in unit else "%.1f%%" % (100 * ratio))
        L.append("| %s | %s | %s %s | %s %s (%s) | %s | %s | %s |" %
                 (scen, fig, "%.1f" % v if v is not None else "?", unit, "%.1f" % r if r is not None else "?",
                  unit, refname, rtxt, gtxt, met))
    if not rows:
        L.append("| (no scenario produced a figure) | | | | | | |")
    L.append("")
    if mem:
        L.append("### Memory and shuffle quality against --cache-size (EBS-like device, 1 GiB memory cgroup)")
        L.append("")
        L.append("quasi_random, RandomResizedCrop 224, batch 256, O_DIRECT, dataset %s. Bound = cache + fixed "
                 "(batch ring, tables) + 64 MiB (decoders, code and libraries; README \"Memory\"). Shuffle quality = "
                 "distinct classes per batch (1000 classes) against a full permutation of the same file: on the "
                 "dataset itself, packed class by class with `--no-shuffle` (the worst case: about one class per "
                 "4 MiB page), and on the same images packed with the default shuffle." %
                 machine.get("ebs_dataset", "?"))
        L.append("")
        L.append("| --cache-size | cache arena | fixed | peak RSS | bound | within | cgroup max usage | window pages "
                 "| classes/batch, class-sorted pack | full permutation | ratio | classes/batch, shuffled pack "
                 "| full permutation | ratio | payload MB/s |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for cs, arena, fixed, rss, cgmax, cls, ref, win, pay, shq, shref in mem:
            bound = float(arena) + float(fixed) + 64 * 1048576
            within = "yes" if float(rss) <= bound else "**no**"
            ratio = float(cls) / float(ref) if num(ref) else 0
            sh = "%.1f | %.1f | %.1f%%" % (float(shq), float(shref), 100 * float(shq) / float(shref)) \
                if num(shq) and num(shref) else "- | - | -"
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.1f%% | %s | %.1f |" %
                     (cs, mib(arena), mib(fixed), mib(rss), mib(bound), within, mib(cgmax), win, float(cls),
                      float(ref), 100 * ratio, sh, float(pay or 0)))
        L.append("")
    if notes:
        L.append("### Evidence (same run)")
        L.append("")
        for scen, text in notes:
            L.append("- **%s**: %s" % (scen, text))
        L.append("")
    if misses:
        L.append("### Goals not met: why, and what would close them")
        L.append("")
        for scen, fig, v, r, ratio, g in misses:
            L.append("- **%s, %s**: %s against a goal of %s. %s" %
                     (scen, fig, "%.1f%%" % (100 * ratio) if ratio is not None and ratio < 1.5
                      else "%.2fx" % (ratio or 0), ">= %.2fx" % g if g >= 1 else ">= %.0f%%" % (100 * g),
                      why(rdir, scen, fig, v, r, ratio, g, machine)))
        L.append("")
    if skipped:
        L.append("### Not measured in this run")
        L.append("")
        for what, reason in skipped:
            L.append("- %s: %s" % (what, reason))
        L.append("")
    dpath = os.path.join(rdir, "ram_doctor.txt")
    if os.path.exists(dpath) and os.path.getsize(dpath):
        L.append("### `pagestream doctor` on the ImageNet-like set")
        L.append("")
        L.append("```")
        L.extend(open(dpath).read().rstrip("\n").split("\n"))
        L.append("```")
        L.append("")
    L.append("How each scenario is set up: [README.md](README.md). Raw outputs of this run: `%s`." %
             os.path.relpath(rdir))
    open(out_md, "w").write("\n".join(L) + "\n")

    # plot data: memory
    with open(os.path.join(rdir, "plot_mem.dat"), "w") as f:
        for cs, arena, fixed, rss, cgmax, cls, ref, win, pay, shq, shref in mem:
            f.write("%s %.1f %.1f %.1f %.2f %.2f %s\n" % (cs, float(arena) / 1048576, float(rss) / 1048576,
                                                        (float(arena) + float(fixed) + 64 * 1048576) / 1048576,
                                                        float(cls), float(ref), shq if num(shq) else "NaN"))


if __name__ == "__main__":
    main()
