#!/usr/bin/python3
# peer_torch.py - the peer pagestream is compared with: PyTorch's DataLoader over a torchvision
# ImageFolder decoded by PIL, with the same work per image as `pagestream bench --transform rrc`
# (RandomResizedCrop + RandomHorizontalFlip, uint8 output through PILToTensor, no normalisation).
#   /usr/bin/python3 bench/peer_torch.py ROOT [--workers N] [--batch 256] [--epochs 3] [--crop 224]
# Prints one JSON object: per-epoch images/s and the steady-state figure (epochs after the first,
# which also pays for starting the workers).
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("root", help="ImageFolder directory (one sub-folder per class)")
    ap.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    torch.manual_seed(a.seed)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.crop),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])
    ds = datasets.ImageFolder(a.root, transform=tf)
    if len(ds) < a.batch:
        sys.exit("peer_torch: %s has %d images, fewer than one batch of %d" % (a.root, len(ds), a.batch))
    dl = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                    persistent_workers=a.workers > 0, pin_memory=False)
    epochs = []
    t_start = time.monotonic()
    for e in range(a.epochs):
        t0 = time.monotonic()
        n = 0
        nb = 0
        classes = 0
        for images, labels in dl:
            n += images.shape[0]
            nb += 1
            classes += len(torch.unique(labels))
            if images.dtype != torch.uint8 or images.shape[1:] != (3, a.crop, a.crop):
                sys.exit("peer_torch: unexpected batch %s %s" % (images.dtype, tuple(images.shape)))
        secs = time.monotonic() - t0
        epochs.append({"epoch": e, "images": n, "seconds": secs, "images_per_s": n / secs if secs > 0 else 0,
                       "classes_per_batch": classes / nb if nb else 0})
        print("peer_torch: epoch %d: %d images in %.2f s, %.0f images/s" % (e, n, secs, n / secs),
              file=sys.stderr, flush=True)
    steady = epochs[1:] or epochs
    imgs = sum(x["images"] for x in steady)
    secs = sum(x["seconds"] for x in steady)
    out = {
        "peer": "torch.utils.data.DataLoader + torchvision.datasets.ImageFolder + PIL",
        "torch": torch.__version__,
        "workers": a.workers,
        "batch_size": a.batch,
        "dataset_images": len(ds),
        "classes": len(ds.classes),
        "transform": "RandomResizedCrop(%d) + RandomHorizontalFlip + PILToTensor (uint8)" % a.crop,
        "epochs": epochs,
        "steady_images_per_s": imgs / secs if secs > 0 else 0,
        "total_seconds": time.monotonic() - t_start,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
