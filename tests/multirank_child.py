#!/usr/bin/env python3
"""One rank of tests/it_multirank.sh: reads its share of one epoch of a dataset
and writes what it got to OUTDIR/rank<RANK>.json.

    multirank_child.py URL OUTDIR [--batch-size N] [--cache-size SIZE] [--crop N] ...

Rank, world size and local rank come from torchrun's environment (RANK,
WORLD_SIZE, LOCAL_RANK; pagestream.Loader reads them itself). When PyTorch is
there and MASTER_ADDR is set, the ranks join a gloo process group, as a DDP
job does: they start the epoch together (barrier) and all-reduce a tensor
after every batch, the way DDP syncs gradients, so unequal batch counts
would show up here as a hang (bounded by --timeout) rather than pass.
"""
import argparse
import json
import os
import socket
import sys
import time

import pagestream


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("outdir")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--cache-size", default="8M")
    ap.add_argument("--crop", type=int, default=112)
    ap.add_argument("--order", default="quasi_random")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--keep-last", action="store_true", help="drop_last=False: deliver every sample")
    ap.add_argument("--endpoint", default=None)
    ap.add_argument("--timeout", type=float, default=60, help="seconds a collective may wait")
    a = ap.parse_args()

    dist = None
    if os.environ.get("MASTER_ADDR") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        try:
            import datetime
            import torch
            import torch.distributed as tdist
            if tdist.is_available():
                torch.set_num_threads(1)
                tdist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
                dist = tdist
        except ImportError:
            dist = None

    t_open = time.time()
    loader = pagestream.Loader(a.url, batch_size=a.batch_size, cache_size=a.cache_size, crop=a.crop,
                               order=a.order, seed=a.seed, threads=a.threads, drop_last=not a.keep_last,
                               endpoint=a.endpoint, return_ids=True)
    if dist is not None:
        dist.barrier()  # every rank starts the epoch at the same moment: the aggregate rate is honest
    t0 = time.time()
    batches = []
    labels_seen = 0
    for images, labels, ids in loader:
        assert images.shape[0] == len(ids) and tuple(images.shape[1:]) == (a.crop, a.crop, 3), images.shape
        batches.append([int(i) for i in ids.tolist()])
        labels_seen += int((labels >= 0).sum())
        if dist is not None:
            import torch
            t = torch.ones(1)
            dist.all_reduce(t)  # the step every DDP rank must take together
            if int(t.item()) != dist.get_world_size():
                raise SystemExit("all_reduce gave %s" % t.item())
        del images, labels, ids
    t1 = time.time()
    s = loader.stats()
    nsamples = sum(len(b) for b in batches)
    out = {
        "rank": loader.rank, "world_size": loader.world_size, "local_rank": loader.local_rank,
        "host": socket.gethostname(), "pid": os.getpid(),
        "launcher": "torchrun" if os.environ.get("TORCHELASTIC_RUN_ID") else "env",
        "process_group": dist is not None,
        "len": len(loader), "nbatches": len(batches), "batches": batches, "samples": nsamples,
        "labels": labels_seen, "padded": s["padded"], "dataset_samples": s["nsamples"],
        "npages": s["npages"], "page_size": s["page_size"], "bytes_read": s["bytes_read"],
        "reads": s["reads"], "cache_size": s["mem_arena"], "cache_slots": s["cache_slots"], "peak_rss": s["peak_rss"],
        "t_open": t_open, "t_start": t0, "t_end": t1,
        "images_per_s": nsamples / (t1 - t0) if t1 > t0 else 0.0,
    }
    loader.close()
    if dist is not None:
        dist.barrier()
        dist.destroy_process_group()
    tmp = os.path.join(a.outdir, "rank%d.json.tmp" % out["rank"])
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, os.path.join(a.outdir, "rank%d.json" % out["rank"]))
    print("rank %d/%d (local %s): %d batches, %d samples, %.0f images/s" % (
        out["rank"], out["world_size"], out["local_rank"], out["nbatches"], nsamples, out["images_per_s"]),
        flush=True)


if __name__ == "__main__":
    try:
        main()
    except pagestream.Error as e:
        sys.exit("multirank_child.py: %s" % e)
