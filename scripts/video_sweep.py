#!/usr/bin/env python3
"""Decoding parity with the ffmpeg CLI over randomly drawn video files (formats nobody picked).

  video_sweep.py --teletron build/teletron [--files 16] [--seed 0] [--work DIR] [--keep]

Each draw makes a short clip with the ffmpeg CLI from a moving, slightly blurred test pattern: a codec
(H.264, H.265, VP9, AV1, MPEG-2, MPEG-4 part 2, MJPEG, ProRes, FFV1) with one of its pixel formats
(4:2:0 / 4:2:2 / 4:4:4, 8 or 10 bits, grey, full-range JPEG), a container it goes in, a size (odd
where the format allows), a frame rate (integer or NTSC), now and then B-frames, variable frame
timing, a rotation in the display matrix, a pixel aspect ratio, colour tags (BT.601 / BT.709 /
BT.2020, limited or full range), a start-time offset or an audio stream in front of the video.
Then `teletron probe --device cpu --frames ... --dump` must agree with ffmpeg's own decode of the
same file:
  - the frame count with `ffprobe -count_frames`, and each dumped frame's time with ffprobe's
    best-effort timestamp of that frame (1 ms);
  - the dumped pixels (after rotation) with `ffmpeg -vf select ... -pix_fmt rgb24` of the same
    frames, twice: through libswscale as the CLI (`--rgb swscale`: equal but for rounding, mean
    |diff| <= 0.5, 99th percentile <= 1), and through the pipeline's colour kernel (mean <= 2, the
    uniform bias of libswscale's fixed-point arithmetic; p99 <= 4); see BOUNDS. teletron's frames
    are 4:2:0 (4:2:2 / 4:4:4 / grey go through libswscale to 4:2:0 first), so the reference of those
    takes the same conversion before its rgb24.
  - AVI has no presentation times and is compared by frame order and pixels only.
A draw the ffmpeg CLI cannot encode is drawn again. One line per file; exit status 1 if any file
differs, 4 when the ffmpeg CLI or torch is missing (ctest counts it as skipped).

--record DIR also saves each clip with its ffprobe answers and the CLI's frames; --replay DIR checks
those again where there is no ffmpeg CLI, e.g. `--device cuda` on the GPU machine (NVDEC and the
CUDA colour kernel): `video_sweep.py --teletron build/teletron --files 24 --seed 3 --codecs
libx264,libx265,libvpx-vp9,libsvtav1,mpeg4 --record .videosweep` here (the decoders and demuxers the
GPU machine's FFmpeg build has: scripts/prepare_device.sh makes it), carry `.videosweep`, then
`video_sweep.py --teletron build-device/teletron --replay .videosweep --device cuda` there.
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as error:
    print(f"video_sweep: skipped ({error})")
    sys.exit(4)

# codec -> pixel formats, containers, whether width/height must be even, the smallest side, B-frames.
CODECS = {
    "libx264": (["yuv420p", "yuv422p", "yuv444p", "yuv420p10le"], ["mp4", "mkv", "mov", "ts", "h264", "flv"], True, 16, True),
    "libx265": (["yuv420p", "yuv420p10le", "yuv444p"], ["mp4", "mkv", "hevc"], True, 64, True),
    "libvpx-vp9": (["yuv420p", "yuv444p", "yuv420p10le"], ["webm", "mkv", "ivf"], False, 16, False),
    "libsvtav1": (["yuv420p", "yuv420p10le"], ["mkv", "mp4", "ivf"], True, 64, False),
    "mpeg2video": (["yuv420p", "yuv422p"], ["ts", "mkv", "mpg", "m2v", "mxf"], True, 16, True),
    "mpeg4": (["yuv420p"], ["avi", "mp4", "mkv", "m4v"], True, 16, True),
    "mjpeg": (["yuvj420p", "yuvj422p", "yuvj444p"], ["avi", "mkv", "mov", "mjpeg"], False, 16, False),
    "prores_ks": (["yuv422p10le", "yuv444p10le"], ["mov"], True, 16, False),
    "ffv1": (["yuv420p", "yuv444p", "gray", "yuv420p10le", "yuv422p"], ["mkv", "avi"], False, 16, False),
    "wmv2": (["yuv420p"], ["wmv"], True, 16, False),
    "libtheora": (["yuv420p", "yuv422p", "yuv444p"], ["ogv"], True, 16, False),
    "wrapped_avframe": (["yuv420p", "yuv422p", "yuv444p", "gray"], ["y4m"], False, 16, False),
}
# Elementary streams without a container (no timestamps: frames are counted in decoding output,
# their times come from the frame rate) and raw YUV4MPEG.
RAW = ("h264", "hevc", "m2v", "m4v", "mjpeg", "y4m")
RATES = ["24", "25", "30", "30000/1001", "12", "60"]
# (colorspace, primaries, transfer) tags as the ffmpeg CLI names them.
COLOURS = [("bt709", "bt709", "bt709"), ("smpte170m", "smpte170m", "smpte170m"), ("bt470bg", "bt470bg", "gamma28"),
           ("bt2020nc", "bt2020", "bt2020-10")]


def draw(rng, codecs=None, allowed=None):
    usable = [c for c in sorted(codecs or CODECS) if not allowed or set(CODECS[c][1]) & set(allowed)]
    codec = rng.choice(usable)
    formats, containers, even, smallest, bframes = CODECS[codec]
    containers = [c for c in containers if not allowed or c in allowed]
    spec = {"codec": codec, "pix_fmt": rng.choice(formats), "container": rng.choice(containers)}
    odd_ok = not even and spec["pix_fmt"] in ("yuv444p", "gray", "yuvj444p")
    sides = []
    for _ in range(2):
        side = rng.randint(smallest, 200)
        if not odd_ok:
            side -= side % 2
        sides.append(side)
    spec["width"], spec["height"] = sides
    spec["frames"] = rng.randint(3, 40)
    spec["rate"] = rng.choice(RATES)
    spec["bframes"] = rng.choice([0, 2, 3]) if bframes else 0
    spec["vfr"] = spec["container"] not in ("avi", "mpg") + RAW and rng.random() < 0.3
    spec["rotate"] = rng.choice([0, 90, 180, 270]) if spec["container"] in ("mp4", "mov") and rng.random() < 0.4 else 0
    spec["sar"] = rng.choice(["1/1", "4/3", "10/11", "16/15"]) if rng.random() < 0.3 else ""
    spec["colour"] = rng.choice(COLOURS) if rng.random() < 0.6 else None
    spec["full_range"] = spec["pix_fmt"].startswith("yuvj") or (spec["pix_fmt"] != "gray" and rng.random() < 0.15)
    spec["offset"] = rng.choice([0.0, 0.0, 1.5, 10.25]) if spec["container"] in ("mkv", "mp4", "mov", "ts") else 0.0
    spec["audio_first"] = spec["container"] in ("mkv", "mp4", "mov") and rng.random() < 0.2
    # Fragmented MP4 / MOV (moof boxes, as streaming and some cameras write them).
    spec["fragmented"] = spec["container"] in ("mp4", "mov") and rng.random() < 0.25
    return spec


def describe(spec):
    parts = [spec["codec"], spec["pix_fmt"], spec["container"], f"{spec['width']}x{spec['height']}",
             f"{spec['frames']}f@{spec['rate']}"]
    if spec["bframes"]:
        parts.append(f"bf{spec['bframes']}")
    if spec["vfr"]:
        parts.append("vfr")
    if spec["rotate"]:
        parts.append(f"rot{spec['rotate']}")
    if spec["sar"]:
        parts.append(f"sar{spec['sar']}")
    if spec["colour"]:
        parts.append(spec["colour"][0])
    if spec["full_range"]:
        parts.append("full")
    if spec["offset"]:
        parts.append(f"+{spec['offset']}s")
    if spec["audio_first"]:
        parts.append("audio-first")
    if spec.get("fragmented"):
        parts.append("fragmented")
    return " ".join(parts)


def eval_rate(rate):
    numerator, _, denominator = rate.partition("/")
    return float(numerator) / float(denominator or 1)


def make(spec, path):
    """The ffmpeg CLI command that writes the clip; None when it fails."""
    rate = spec["rate"]
    # Finite sources: with an audio stream beside it, an endless one never lets the muxer finish.
    seconds = spec["frames"] / eval_rate(rate) + 0.5
    source = f"testsrc2=size={spec['width']}x{spec['height']}:rate={rate}:duration={seconds:.2f}"
    command = ["ffmpeg", "-v", "error", "-y"]
    if spec["audio_first"]:
        command += ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=16000:duration={seconds:.2f}"]
    command += ["-f", "lavfi", "-i", source]
    video_input = 1 if spec["audio_first"] else 0
    filters = ["gblur=sigma=1.2"]
    if spec["vfr"]:
        # Every third gap twice as long: timestamps that no constant rate describes.
        filters.append(f"setpts=(N+floor(N/3))/({rate})/TB")
    if spec["sar"]:
        filters.append(f"setsar={spec['sar']}")
    filters.append(f"format={spec['pix_fmt']}")
    command += ["-vf", ",".join(filters), "-frames:v", str(spec["frames"])]
    if spec["audio_first"]:
        command += ["-map", "0:a", "-map", f"{video_input}:v", "-c:a", "aac" if spec["container"] != "mkv" else "flac"]
    command += ["-c:v", spec["codec"]]
    codec = spec["codec"]
    if codec == "libx264":
        command += ["-preset", "ultrafast" if not spec["bframes"] else "fast", "-bf", str(spec["bframes"])]
    elif codec == "libx265":
        command += ["-preset", "ultrafast", "-x265-params", f"bframes={spec['bframes']}:log-level=error"]
        if spec["container"] in ("mp4", "mov"):
            command += ["-tag:v", "hvc1"]
    elif codec == "libvpx-vp9":
        command += ["-deadline", "realtime", "-cpu-used", "8", "-b:v", "400k"]
    elif codec == "libsvtav1":
        command += ["-preset", "12"]
    elif codec in ("mpeg2video", "mpeg4"):
        command += ["-bf", str(spec["bframes"]), "-q:v", "3"]
    elif codec == "mjpeg":
        command += ["-q:v", "3"]
    elif codec == "prores_ks":
        command += ["-profile:v", "3" if "444" not in spec["pix_fmt"] else "4"]
    if spec["vfr"]:
        command += ["-fps_mode", "passthrough"]
    if spec["colour"]:
        space, primaries, transfer = spec["colour"]
        command += ["-colorspace", space, "-color_primaries", primaries, "-color_trc", transfer]
    if spec["pix_fmt"] != "gray":
        command += ["-color_range", "pc" if spec["full_range"] else "tv"]
    if spec["rotate"]:
        command += ["-metadata:s:v:0", f"rotate={spec['rotate']}"]
    if spec["offset"]:
        command += ["-output_ts_offset", str(spec["offset"])]
    if spec.get("fragmented"):
        command += ["-movflags", "frag_keyframe+empty_moov"]
    if spec["container"] == "m4v":
        command += ["-f", "m4v"]  # the raw MPEG-4 part 2 stream (by extension the CLI writes MP4)
    command.append(path)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:  # seen: an endless audio source beside a limited video one
        if os.path.exists(path):
            os.remove(path)
        return None, ["the ffmpeg CLI did not finish within 60 s"]
    if result.returncode != 0 or not os.path.exists(path) or os.path.getsize(path) == 0:
        if os.path.exists(path):
            os.remove(path)  # what the CLI left of a clip it could not make
        return None, result.stderr.strip().splitlines()[-1:] if result.stderr else []
    return command, []


def ffprobe_frames(path):
    """The first video stream's frames in output order: each one's pts in seconds (None where it has
    none), with missing packet pts generated from the packets after them (`-fflags +genpts`, as
    teletron's index does: an MPEG program stream stamps only some pictures)."""
    result = subprocess.run(["ffprobe", "-v", "error", "-fflags", "+genpts", "-select_streams", "v:0", "-show_entries",
                             "frame=pts_time", "-of", "json", path], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        return None
    frames = json.loads(result.stdout).get("frames", [])
    return [float(f["pts_time"]) if "pts_time" in f else None for f in frames]


# teletron's frames are 4:2:0 (NV12 / P010, what NVDEC gives): other layouts go through libswscale's
# bicubic conversion to 4:2:0 first (pipeline/video_reader_planes.cpp), so their reference does too.
# The range stays the stream's as decoded (an encoder may not keep the one asked for; grey untagged
# is full range, as libswscale reads it); deeper than 8 bits becomes 10.
def via_420(stream):
    pix_fmt, colour_range = stream.get("pix_fmt", ""), stream.get("color_range", "unknown")
    if pix_fmt in ("yuv420p", "yuvj420p", "yuv420p10le"):
        return ""
    full = colour_range == "pc" or pix_fmt.startswith("yuvj") or (pix_fmt.startswith("gray") and colour_range != "tv")
    target = "yuv420p" if pix_fmt in ("gray", "yuvj422p", "yuvj444p") or pix_fmt.endswith("p") else "yuv420p10le"
    ranges = "pc" if full else "tv"
    return f",scale=flags=bicubic:in_range={ranges}:out_range={ranges},format={target}"


def ffprobe_stream(path):
    """The first video stream's decoded pixel format and colour range as ffprobe reports them."""
    result = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                             "stream=pix_fmt,color_range", "-of", "json", path], capture_output=True, text=True,
                            timeout=120)
    streams = json.loads(result.stdout).get("streams", []) if result.returncode == 0 else []
    return streams[0] if streams else {}


def reference_frames(path, indices, width, height, stream):
    """ffmpeg's rgb24 of those frames (autorotated), as a (T, H, W, 3) uint8 tensor."""
    select = "+".join(f"eq(n\\,{i})" for i in indices)
    chain = f"select='{select}'" + via_420(stream)
    result = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-vf", chain,
                             "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                            capture_output=True, timeout=120)
    if result.returncode != 0:
        return None
    data = torch.frombuffer(bytearray(result.stdout), dtype=torch.uint8)
    frame_bytes = width * height * 3
    if frame_bytes == 0 or data.numel() % frame_bytes != 0:
        return None
    return data.reshape(-1, height, width, 3)


def read_safetensors(path):
    dtypes = {"U8": torch.uint8, "I64": torch.int64, "F64": torch.float64}
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def probe_dump(args, path, wanted, dump, converter):
    """`teletron probe --dump` of those frames with that RGB converter: (stdout, None) or (None, why)."""
    try:
        probe = subprocess.run([args.teletron, "probe", path, "--device", args.device, "--frames",
                                ",".join(map(str, wanted)), "--rgb", converter, "--dump", dump],
                               capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return None, "teletron probe did not finish within 120 s"
    if probe.returncode != 0:
        tail = (probe.stderr or probe.stdout).strip().splitlines()
        return None, f"teletron probe exit {probe.returncode}: {tail[-1] if tail else ''}"
    return probe.stdout, None


# Pixel bounds (0-255) against the CLI's rgb24, per converter:
# - swscale: teletron's frames through the same libswscale call the CLI makes, with the matrix and
#   range teletron read from the file: equal but for rounding (seen: exactly equal). A wrong frame,
#   a misread matrix or range, a wrong 4:2:0 conversion miss this by far.
# - kernel (the pipeline's colour kernel): it rounds the exact formula where libswscale's fixed-point
#   arithmetic sits lower, by a bias that is uniform over the frame and 0.7-2.0 per channel (0.7-1.2 on
#   footage, cuda/colour.cu; up to 2.0 on this pattern's saturated colours at 10 bits): mean <= 2.
#   Beyond the bias the two agree: p99 <= 4. A wrong matrix, range or chroma siting in the kernel
#   gives errors of 10 and more on saturated colours.
BOUNDS = {"swscale": (0.5, 1.0), "kernel": (2.0, 4.0)}


def wanted_frames(args, count, number):
    rng = random.Random(args.seed * 100003 + number)
    return sorted({0, count - 1, rng.randrange(count), rng.randrange(count)})


def check(args, spec, path, work, wanted, times, reference=None):
    """The list of disagreements for one file (empty when teletron agrees with ffmpeg), and the
    CLI's reference frames (made here when not given: a replay brings them recorded)."""
    problems = []
    count = len(times)
    for converter in ("swscale", "kernel"):
        dump = os.path.join(work, f"dump_{converter}.safetensors")
        stdout, why = probe_dump(args, path, wanted, dump, converter)
        if why:
            return problems + [why], reference
        dumped = read_safetensors(dump)
        ours = dumped["frames"]
        if converter == "swscale":
            frames_line = [line for line in stdout.splitlines() if line.startswith("frames:")]
            teletron_count = int(frames_line[0].split()[1]) if frames_line else -1
            if teletron_count != count:
                problems.append(f"{teletron_count} frames, ffprobe decodes {count}")
            # AVI has no presentation times: its timestamps count packets, and FFmpeg's guesses for
            # reordered frames trail by the decoder's delay, so there is nothing to compare times with.
            seconds = dumped["seconds"].tolist() if spec["container"] != "avi" else []
            for index, second in zip(wanted, seconds):
                if times[index] is not None and abs(second - times[index]) > 1e-3:
                    problems.append(f"frame {index} at {second:.4f} s, ffprobe {times[index]:.4f} s")
                    break
            if reference is None:
                reference = reference_frames(path, wanted, ours.shape[2], ours.shape[1], ffprobe_stream(path))
            if reference is None or reference.shape != ours.shape:
                problems.append(f"dump {tuple(ours.shape)}, ffmpeg's frames "
                                f"{'unreadable at that size' if reference is None else tuple(reference.shape)}")
                return problems, None
        bound_mean, bound_p99 = BOUNDS[converter]
        for k, index in enumerate(wanted):
            diff = (ours[k].to(torch.int16) - reference[k].to(torch.int16)).abs().flatten().to(torch.float32)
            mean = diff.mean().item()
            p99 = torch.quantile(diff[:: max(1, diff.numel() // 200000)], 0.99).item()
            if mean > bound_mean or p99 > bound_p99:
                problems.append(f"frame {index} ({converter}): mean |diff| {mean:.2f}, p99 {p99:.0f}, "
                                f"max {diff.max().item():.0f}")
    return problems, reference


def report(number, spec, problems):
    print(f"{'ok  ' if not problems else 'FAIL'} {number:3d} {describe(spec)}"
          + ("" if not problems else "\n       " + "\n       ".join(problems)), flush=True)


def sweep(args, work):
    rng = random.Random(args.seed)
    failures = 0
    made = 0
    attempts = 0
    while made < args.files:
        attempts += 1
        if attempts > 4 * args.files + 8:
            print(f"video_sweep: only {made} of {args.files} clips could be encoded in {attempts - 1} draws")
            return 1
        spec = draw(rng, args.codecs, args.containers)
        name = f"clip_{made:03d}.{spec['container']}"
        path = os.path.join(work, name)
        command, why = make(spec, path)
        if command is None:
            print(f"  (not encodable, drawn again: {describe(spec)}: {' '.join(why)})")
            continue
        made += 1
        times = ffprobe_frames(path)
        if not times:
            problems, reference = ["ffprobe reads no frames"], None
        else:
            wanted = wanted_frames(args, len(times), made)
            problems, reference = check(args, spec, path, work, wanted, times)
        if problems:
            failures += 1
        report(made, spec, problems)
        if args.record and reference is not None:
            # The clip, what ffprobe and the CLI made of it: a machine without the CLI replays it.
            shutil.copy(path, os.path.join(args.record, name))
            torch.save(reference.clone(), os.path.join(args.record, name + ".reference.pt"))
            with open(os.path.join(args.record, name + ".json"), "w") as f:
                json.dump({"number": made, "spec": spec, "wanted": wanted, "times": times}, f)
        if not args.keep:
            os.remove(path)
    print(f"video_sweep: {made - failures}/{made} files decode as ffmpeg does (seed {args.seed})")
    return 1 if failures else 0


def replay(args, work):
    """The recorded clips of --record, checked again (e.g. --device cuda on the GPU machine)."""
    records = sorted(name for name in os.listdir(args.replay) if name.endswith(".json"))
    if not records:
        print(f"video_sweep: no recorded clips in {args.replay} (make them with --record)")
        return 1
    failures = 0
    for record in records:
        with open(os.path.join(args.replay, record)) as f:
            saved = json.load(f)
        path = os.path.join(args.replay, record[: -len(".json")])
        reference = torch.load(path + ".reference.pt")
        problems, _ = check(args, saved["spec"], path, work, saved["wanted"], saved["times"], reference)
        failures += bool(problems)
        report(saved["number"], saved["spec"], problems)
    print(f"video_sweep: {len(records) - failures}/{len(records)} recorded files decode as ffmpeg does "
          f"(--device {args.device})")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", help="keep the clips here (with --keep) instead of a temporary folder")
    parser.add_argument("--keep", action="store_true", help="keep each clip after its check")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="teletron probe's decode path (cuda: NVDEC where it takes the file)")
    parser.add_argument("--codecs", type=lambda text: text.split(","),
                        help=f"draw only these encoders (comma-separated; of {', '.join(sorted(CODECS))})")
    parser.add_argument("--containers", type=lambda text: text.split(","),
                        help="draw only these containers (file extensions, comma-separated; e.g. the ones "
                             "another FFmpeg build demuxes)")
    parser.add_argument("--record", help="also save each clip, its ffprobe answers and the CLI's frames here")
    parser.add_argument("--replay", help="check the clips saved by --record instead (no ffmpeg CLI needed)")
    args = parser.parse_args()
    unknown = sorted(set(args.codecs or []) - set(CODECS))
    if unknown:
        parser.error(f"--codecs: unknown {', '.join(unknown)} (choose from {', '.join(sorted(CODECS))})")
    if args.containers and not any(set(CODECS[c][1]) & set(args.containers) for c in (args.codecs or CODECS)):
        parser.error("--containers: none of them is written by the codecs drawn")
    if args.replay:
        with tempfile.TemporaryDirectory(prefix="tt_video_sweep_") as work:
            return replay(args, work)
    if args.record:
        os.makedirs(args.record, exist_ok=True)
    if not shutil.which("ffmpeg") or not shutil.which("ffprobe"):
        print("video_sweep: skipped (needs the ffmpeg CLI: ffmpeg and ffprobe on PATH)")
        return 4
    if args.work:
        os.makedirs(args.work, exist_ok=True)
        return sweep(args, args.work)
    with tempfile.TemporaryDirectory(prefix="tt_video_sweep_") as work:
        return sweep(args, work)


if __name__ == "__main__":
    sys.exit(main())
