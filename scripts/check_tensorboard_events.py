#!/usr/bin/env python3
"""Reads teletron's TensorBoard event files with the tensorboard package's own reader and checks them.

Three ways to call it:
  --events DIR --expect EXPECTED.json   the scalars and GIF images listed in EXPECTED.json, exactly
  --events DIR --metrics METRICS.jsonl  every numeric field of every metrics.jsonl row (not "step")
                                        as a scalar at the row's step, and nothing else
  --writer TESTS_EXECUTABLE             runs the hidden Catch2 case "[.tensorboard_demo]" of
                                        teletron_tests_pipeline into a temporary folder (it writes
                                        scalars, an animated GIF and expected.json), then as --expect
                                        (ctest's tensorboard_events_read_by_tensorboard test)

EXPECTED.json: {"scalars": {TAG: [[STEP, VALUE], ...]},
                "images": {TAG: [{"step": S, "frames": T, "height": H, "width": W,
                                  "colours": [[R, G, B], ...]}]}}   (colours: each frame's mean)
Scalars compare exactly as float32 (TensorBoard's simple_value); a GIF must decode (Pillow) with
that frame count and size, and each frame's mean colour within 12 of the expected (0-255; the GIF's
252-colour palette is dithered). Exits 0 when everything matches, 1 with the differences, 4 (ctest's
skip code) when the tensorboard package is not installed.
"""
import argparse
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 4


def load(folder):
    """EventAccumulator over the folder, keeping every event (size_guidance 0 = all)."""
    from tensorboard.backend.event_processing import event_accumulator

    accumulator = event_accumulator.EventAccumulator(
        folder, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.IMAGES: 0})
    accumulator.Reload()
    return accumulator


def f32(value):
    return struct.unpack("<f", struct.pack("<f", value))[0]


def check(folder, expected):
    problems = []
    accumulator = load(folder)
    tags = accumulator.Tags()
    want_scalars = expected.get("scalars", {})
    if sorted(tags["scalars"]) != sorted(want_scalars):
        problems.append(f"scalar tags {sorted(tags['scalars'])}, expected {sorted(want_scalars)}")
    for tag, points in want_scalars.items():
        if tag not in tags["scalars"]:
            continue
        got = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        want = [(int(step), f32(value)) for step, value in points]
        if got != want:
            problems.append(f"scalar {tag}: got {got}, expected {want}")
    want_images = expected.get("images", {})
    if sorted(tags["images"]) != sorted(want_images):
        problems.append(f"image tags {sorted(tags['images'])}, expected {sorted(want_images)}")
    for tag, images in want_images.items():
        if tag not in tags["images"]:
            continue
        got = accumulator.Images(tag)
        if len(got) != len(images):
            problems.append(f"image {tag}: {len(got)} events, expected {len(images)}")
            continue
        for event, want in zip(got, images):
            problems += check_gif(tag, event, want)
    return problems


def check_gif(tag, event, want):
    from PIL import Image

    where = f"image {tag} at step {event.step}"
    problems = []
    if event.step != want["step"]:
        problems.append(f"{where}: expected step {want['step']}")
    if (event.height, event.width) != (want["height"], want["width"]):
        problems.append(f"{where}: summary says {event.height}x{event.width}, expected {want['height']}x{want['width']}")
    data = event.encoded_image_string
    if not data.startswith(b"GIF89a"):
        return problems + [f"{where}: not a GIF89a ({data[:6]!r})"]
    image = Image.open(io.BytesIO(data))
    frames = getattr(image, "n_frames", 1)
    if (image.height, image.width) != (want["height"], want["width"]):
        problems.append(f"{where}: GIF is {image.height}x{image.width}, expected {want['height']}x{want['width']}")
    if frames != want["frames"]:
        problems.append(f"{where}: {frames} GIF frames, expected {want['frames']}")
    for index, colour in enumerate(want.get("colours", [])[:frames]):
        image.seek(index)
        pixels = image.convert("RGB").tobytes()
        count = len(pixels) // 3
        mean = [sum(pixels[c::3]) / count for c in range(3)]
        if max(abs(m - c) for m, c in zip(mean, colour)) > 12:
            problems.append(f"{where}: frame {index} mean colour {[round(m, 1) for m in mean]}, expected {colour}")
    return problems


def expected_from_metrics(path):
    scalars = {}
    with open(path) as rows:
        for line in rows:
            row = json.loads(line)
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    scalars.setdefault(key, []).append([row["step"], value])
    return {"scalars": scalars}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", help="folder holding the events.out.tfevents.* files")
    parser.add_argument("--expect", help="expected.json (see above)")
    parser.add_argument("--metrics", help="a metrics.jsonl whose scalars the events must equal")
    parser.add_argument("--writer", help="teletron_tests_pipeline: write the demo events, then check them")
    args = parser.parse_args()
    try:
        import tensorboard  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as error:
        print(f"SKIP: {error} (pip install tensorboard): TensorBoard's reader not checked here")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tt_tensorboard_") as scratch:
        if args.writer:
            env = dict(os.environ, TELETRON_TB_DEMO_DIR=scratch)
            run = subprocess.run([args.writer, "[.tensorboard_demo]"], env=env, capture_output=True, text=True)
            if run.returncode != 0:
                print(run.stdout + run.stderr)
                print(f"FAIL: {args.writer} [.tensorboard_demo] exited with {run.returncode}")
                return 1
            folder, expect = scratch, os.path.join(scratch, "expected.json")
        else:
            folder, expect = args.events, args.expect
        if args.metrics:
            expected = expected_from_metrics(args.metrics)
        else:
            with open(expect) as text:
                expected = json.load(text)
        problems = check(folder, expected)
    count = sum(len(points) for points in expected.get("scalars", {}).values())
    images = sum(len(events) for events in expected.get("images", {}).values())
    if problems:
        print("FAIL: TensorBoard's EventAccumulator read other values:\n  " + "\n  ".join(problems))
        return 1
    import tensorboard

    print(f"OK: tensorboard {tensorboard.__version__}'s EventAccumulator read {count} scalar points "
          f"({len(expected.get('scalars', {}))} tags) and {images} GIF image(s) exactly as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
