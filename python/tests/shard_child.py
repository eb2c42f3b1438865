"""One rank of the torchrun-like test: reads its share of one epoch and writes
what it got to OUTDIR/rank<RANK>.json. Rank and world size come from the
environment (torchrun's RANK / WORLD_SIZE), as in a real training script.

    shard_child.py URL OUTDIR BATCH_SIZE DROP_LAST ORDER [TENSORS]
"""
import json
import os
import sys

import pagestream


def main():
    url, outdir, bs, drop_last, order = sys.argv[1:6]
    tensors = sys.argv[6] if len(sys.argv) > 6 else "auto"
    with pagestream.Loader(url, batch_size=int(bs), drop_last=drop_last == "1", order=order, crop=32,
                           cache_size="1M", seed=11, threads=1, return_ids=True, tensors=tensors) as loader:
        batches = [ids.tolist() for _, _, ids in loader]
        out = {"rank": loader.rank, "world_size": loader.world_size, "local_rank": loader.local_rank,
               "len": len(loader), "batches": batches, "padded": loader.stats()["padded"]}
    with open(os.path.join(outdir, "rank%d.json" % out["rank"]), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
