#!/usr/bin/env python3
"""Does a convolution give the same bits on every thread? LibTorch keeps cuDNN's chosen execution
plans per thread (a thread_local cache in ATen's cudnn/Conv_v8.cpp). With cudnn.benchmark on, each
new thread times the candidate plans itself and keeps the fastest; on a busy GPU the timings move,
so two threads may keep different plans, and different plans round bf16 results differently. With
benchmark off every thread takes the heuristic's first plan.

This is the mechanism behind issue 11's prefetch flake (batches encoded by the producer's thread
differed in the last bits from those of the main thread). Run it while scripts/gpu_load.py loads
the GPU; a thread of this process also runs matmuls meanwhile, as the training loop's consumer does.

usage: cudnn_thread_choice.py THREADS
prints, for benchmark on and for benchmark off: how many fresh threads gave outputs that differ
bitwise from the first one's, per convolution shape.
"""
import sys
import threading

import torch
import torch.nn.functional as F

# Shapes like the tiny VAE's causal 3D convolutions at 9x64x64 (batch 2; inputs already padded):
# (in channels, out channels, frames, height, width, stride).
SHAPES = [
    (3, 16, 11, 66, 66, 1),
    (16, 16, 11, 66, 66, 1),
    (16, 16, 11, 66, 66, 2),
    (16, 32, 7, 34, 34, 1),
    (32, 32, 7, 34, 34, 2),
    (32, 32, 5, 18, 18, 1),
    (32, 32, 5, 10, 10, 1),
    (32, 32, 3, 10, 10, 1),
]


def make_inputs(device):
    generator = torch.Generator(device="cpu").manual_seed(7)
    inputs = []
    for cin, cout, t, h, w, stride in SHAPES:
        x = torch.randn(2, cin, t, h, w, generator=generator).to(device, torch.bfloat16)
        weight = torch.randn(cout, cin, 3, 3, 3, generator=generator).to(device, torch.bfloat16) * 0.1
        inputs.append((x.contiguous(memory_format=torch.channels_last_3d),
                       weight.contiguous(memory_format=torch.channels_last_3d), stride))
    return inputs


def run_all(inputs):
    with torch.no_grad():
        outputs = [F.conv3d(x, w, stride=s) for x, w, s in inputs]
    torch.cuda.synchronize()
    return outputs


def in_fresh_thread(inputs):
    result = {}
    worker = threading.Thread(target=lambda: result.update(out=run_all(inputs)))
    worker.start()
    worker.join()
    return result["out"]


def trial(benchmark: bool, threads: int, inputs):
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.deterministic = True
    reference = in_fresh_thread(inputs)  # a thread of its own: the plan cache is per thread
    differing = [0] * len(SHAPES)
    threads_differing = 0
    stop = threading.Event()

    def busy():  # the consumer's work on its own stream
        a = torch.randn(1024, 1024, device="cuda")
        with torch.cuda.stream(torch.cuda.Stream()):
            while not stop.is_set():
                for _ in range(20):
                    a = torch.tanh(a @ a * 1e-3)
                torch.cuda.synchronize()

    consumer = threading.Thread(target=busy)
    consumer.start()
    for _ in range(threads):
        diff = [not torch.equal(a, b) for a, b in zip(in_fresh_thread(inputs), reference)]
        threads_differing += any(diff)
        differing = [d + int(x) for d, x in zip(differing, diff)]
    stop.set()
    consumer.join()
    return threads_differing, differing


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    inputs = make_inputs(torch.device("cuda"))
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    for benchmark in (True, False):
        total, per_shape = trial(benchmark, threads, inputs)
        print(f"cudnn.benchmark={benchmark}: {total} of {threads} fresh threads differed bitwise from the "
              f"first; per shape {per_shape}", flush=True)


if __name__ == "__main__":
    main()
