#!/usr/bin/env python3
"""Keeps one GPU busy for a while, as another process would: bf16 matmuls and 3D convolutions in a
loop (both on the GPU's SMs; the convolutions through cuDNN, like the VAE's), holding a few GiB.
Used by scripts/gpu_issue11.sh to run the stream tests on a loaded GPU.

usage: gpu_load.py SECONDS
"""
import signal
import sys
import time

import torch


def main() -> None:
    seconds = float(sys.argv[1])
    device = torch.device("cuda")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 64, 16, 96, 96, device=device, dtype=torch.bfloat16)
    conv = torch.nn.Conv3d(64, 64, 3, padding=1).to(device, torch.bfloat16)
    hold = torch.empty(int(4 * 2**30), dtype=torch.uint8, device=device)  # 4 GiB held
    end = time.time() + seconds
    loops = 0
    start = time.time()

    def report(*_):  # also when stopped early (the scripts end it with SIGTERM)
        print(f"gpu_load: {loops} loops in {time.time() - start:.0f} s (held {hold.numel() / 2**30:.0f} GiB)",
              flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, report)
    print(f"gpu_load: started on {torch.cuda.get_device_name()}", flush=True)
    with torch.no_grad():
        while time.time() < end:
            for _ in range(4):
                a = torch.tanh(a @ a * 1e-4)
                x = torch.tanh(conv(x))
            torch.cuda.synchronize()
            loops += 1
    report()


if __name__ == "__main__":
    main()
