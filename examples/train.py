#!/usr/bin/env python3
"""Train a small CNN on a pagestream dataset, on the CPU (a GPU when asked).

    # a local file
    PYTHONPATH=python /usr/bin/python3 examples/train.py build/demo/demo.pgs --epochs 4
    # S3 (any S3-compatible store: pass its endpoint; keys from the usual variables)
    AWS_ACCESS_KEY_ID=test:tester AWS_SECRET_ACCESS_KEY=testing \\
      /usr/bin/python3 examples/train.py s3://demo/train.pgs --endpoint http://127.0.0.1:8085
    # several processes (DistributedDataParallel over gloo); each rank reads its own share.
    # (--redirects 1 --tee 1: works around Debian's torch 1.13 launcher on Python 3.11)
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 \\
      examples/train.py build/demo/demo.pgs

Prints, per epoch: mean loss, accuracy on the training batches, images/s of the
whole step (load + forward + backward) and the time spent waiting for data.
With --checkpoint FILE the model, optimiser and loader position are saved
after each epoch and a restarted run continues from there.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))  # run from the source tree without installing

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import pagestream  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = nn.Conv2d(3, 24, 3, stride=2, padding=1)
        self.b1 = nn.BatchNorm2d(24)
        self.c2 = nn.Conv2d(24, 48, 3, stride=2, padding=1)
        self.b2 = nn.BatchNorm2d(48)
        self.c3 = nn.Conv2d(48, 96, 3, stride=2, padding=1)
        self.b3 = nn.BatchNorm2d(96)
        self.fc = nn.Linear(96, classes)

    def forward(self, x):
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        x = F.relu(self.b3(self.c3(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MEAN = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)
STD = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("url", help="dataset: a path, http(s)://, s3://bucket/key, nfs://...")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--cache-size", default="256M")
    ap.add_argument("--threads", type=int, default=None, help="decode threads (default: all cores)")
    ap.add_argument("--torch-threads", type=int, default=None, help="PyTorch compute threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--endpoint", default=None, help="S3 endpoint URL (default $AWS_ENDPOINT_URL, else AWS)")
    ap.add_argument("--region", default=None)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--max-batches", type=int, default=0, help="stop each epoch after N batches (0: all)")
    ap.add_argument("--checkpoint", default=None, help="save after each epoch; resume from it when present")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("gloo")

    loader = pagestream.Loader(args.url, batch_size=args.batch_size, cache_size=args.cache_size, crop=args.crop,
                               layout="NCHW", seed=args.seed, threads=args.threads, endpoint=args.endpoint,
                               region=args.region, device=args.device)
    classes = loader.classes or []
    nclasses = len(classes) or loader.stats()["nclasses"] or 1000
    dev = torch.device(args.device)
    model = SmallCNN(nclasses).to(dev)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    steps_per_epoch = len(loader) if not args.max_batches else min(len(loader), args.max_batches)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, epochs=args.epochs,
                                                steps_per_epoch=max(steps_per_epoch, 1))
    first_epoch = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        ck = torch.load(args.checkpoint)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        sched.load_state_dict(ck["sched"])
        loader.load_state_dict(ck["loader"])
        first_epoch = ck["loader"]["epoch"]
        if rank == 0:
            print("resumed from %s at epoch %d batch %d" % (args.checkpoint, first_epoch, ck["loader"]["batch"]))
    mean, std = MEAN.to(dev), STD.to(dev)
    if rank == 0:
        print("%s: %d samples, %d classes, %d batches of %d per epoch and rank, world %d, crop %d" % (
            args.url, loader.stats()["nsamples"], nclasses, len(loader), args.batch_size, world, args.crop),
            flush=True)

    for epoch in range(first_epoch, args.epochs):
        loader.set_epoch(epoch)
        model.train()
        t0 = time.perf_counter()
        wait0 = loader.stats()["wait_batch_s"]
        tot_loss = tot_ok = n = 0
        for i, (images, labels) in enumerate(loader):
            x = (images.float() - mean) / std   # uint8 NCHW straight from the loader's buffer
            out = model(x)
            loss = F.cross_entropy(out, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched.last_epoch + 1 < sched.total_steps:
                sched.step()
            tot_loss += loss.item() * labels.numel()
            tot_ok += (out.argmax(1) == labels).sum().item()
            n += labels.numel()
            if args.max_batches and i + 1 >= args.max_batches:
                break
        dt = time.perf_counter() - t0
        waited = loader.stats()["wait_batch_s"] - wait0
        stats = torch.tensor([tot_loss, tot_ok, n, dt, waited], dtype=torch.float64)
        if world > 1:
            dist.all_reduce(stats)
        if rank == 0:
            tl, tok, tn, tdt, tw = stats.tolist()
            if tn == 0:
                sys.exit("train.py: the epoch had no batches (dataset smaller than one batch per rank? "
                         "lower --batch-size)")
            print("epoch %d  loss %.4f  accuracy %.3f  %.0f images/s  (%d images in %.2f s, waiting for data "
                  "%.2f s)" % (epoch, tl / tn, tok / tn, tn / (tdt / world), tn, tdt / world, tw / world), flush=True)
        if args.checkpoint and rank == 0:
            # loader position of the next epoch's start, whatever the loop consumed
            st = loader.state_dict()
            if args.max_batches:
                st.update(epoch=epoch + 1, batch=0)
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "loader": st}, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
    s = loader.stats()
    if rank == 0:
        print("loader: %d batches, %.1f MB read, cache hits %d / misses %d, peak RSS %.0f MB" % (
            s["batches"], s["bytes_read"] / 1e6, s["cache_hits"], s["cache_misses"], s["peak_rss"] / 1e6))
    loader.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except pagestream.Error as e:  # storage, credentials, dataset: the message says which
        sys.exit("train.py: %s" % e)
