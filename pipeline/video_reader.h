// The CPU decode path: one video file opened with libavformat, its best video stream described
// (VideoInfo), a per-file frame index built by demuxing packets only (exact frame counts, frame
// times for variable frame rate), and decode(indices), which seeks to the keyframe before the first
// needed frame, decodes forward with frame threading and keeps only the needed frames as raw
// 4:2:0 planes in the NV12/P010 layout that NVDEC produces. Two decode paths fill the same
// DecodedFrames: NVDEC (FFmpeg's CUDA hwaccel; frames stay on the GPU) and the CPU path (frame
// threading).
//
// Path choice (VideoInfo::decode_path / decode_reason say which and why): with options.device a
// CUDA device, NVDEC is used when nvdec::support() says the GPU takes the stream — asked up front
// from the driver (cuvidGetDecoderCaps), because NVDEC can fail silently (on the H200, H.264 10-bit
// gave zero frames and no error). Otherwise — no GPU asked for, a codec/bit depth/size NVDEC does not
// take (H200: H.264 10-bit, AV1, HEVC below 144 px), no NVDEC in this build — the CPU path decodes
// and the frames are copied to the device once. Should NVDEC still refuse a file mid-way (FFmpeg
// drops to software formats, or a needed frame does not come out), the reader logs the reason once,
// switches that file to the CPU path for good and decodes the request again: no frame is lost.
// Both paths index frames from the same demuxed packets, so frame counts are equal by construction.
//
// Ordering on the GPU: FFmpeg writes NVDEC pictures on a stream of the reader's own (an
// OwnedCudaStream: not the legacy default stream, nor one of LibTorch's pool); decode() makes that
// stream wait for the caller's current stream before writing into the new tensors, and the current
// stream wait for the copies before it returns (CUDA events), so kernels the caller queues next see
// finished frames.
//
// Policies (what callers can rely on):
// - Errors: a missing path, a directory or an unreadable file is kIo. Anything FFmpeg cannot use
//   (not a media file, no video stream, no decoder for the codec in this FFmpeg build — e.g. AV1
//   without dav1d/libaom —, damaged headers, a needed frame the decoder never produces) is kDecode
//   naming the file and FFmpeg's reason (av_strerror) with a hint. Nothing in a file can crash it.
// - Damaged data: FFmpeg's error concealment stays on, as in the ffmpeg CLI. A packet the decoder
//   rejects, a demuxer read error mid-file (truncation) or a frame flagged corrupt is logged once
//   per reader as a warning and decoding goes on; the frame index only lists packets that were
//   demuxed. A needed frame that still never comes out of the decoder is kDecode. Set
//   VideoReaderOptions::fail_on_corrupt to turn concealed (corrupt-flagged) needed frames into
//   kDecode as well. FFmpeg's own log is set to fatal-only on first use (it would print every
//   concealed macroblock); the reader's warnings replace it.
//   Seen on corrupted.mp4: packet 30 of 50 is undecodable (the ffmpeg CLI also gives 49 frames);
//   asking for frame 30 is kDecode, every other frame decodes, bit-identical to the CLI's output.
// - Rotation: VideoInfo::rotation is the clockwise turn (0/90/180/270) that displays the frames
//   upright, the same turn ffmpeg's autorotate applies; decode() returns frames as coded (not
//   rotated), decode_rgb() returns them rotated. Flips in the display matrix are ignored.
// - Colour: matrix from color_space (BT.709, BT.2020 NCL/CL, everything else — untagged, 470BG,
//   SMPTE170M, ... — BT.601); range full for color_range JPEG or a yuvj* pixel format, else limited.
#pragma once

#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cuda/colour.h"

namespace tt {

enum class VideoMatrix { kBt601, kBt709, kBt2020Ncl, kBt2020Cl };

/// "bt601", "bt709", "bt2020ncl", "bt2020cl".
const char* video_matrix_name(VideoMatrix matrix);

/// How decode_rgb turns planes into RGB.
enum class RgbConverter {
  kColourKernel,  // tt::yuv420_to_rgb (cuda/ops.h): the pipeline's converter (CPU: its reference)
  kSwscale,       // libswscale, bicubic chroma: equals the ffmpeg CLI's rgb24 output
};

class VideoFileNotes;  // below: what readers of one dataset share

struct VideoReaderOptions {
  /// Stream to read; -1 picks the best video stream (av_find_best_stream).
  int stream_index = -1;
  /// Decoder threads (frame threading); 0 lets FFmpeg choose from the CPU count.
  int thread_count = 0;
  /// When true, a needed frame that FFmpeg flags as corrupt (concealed) is kDecode, not a warning.
  bool fail_on_corrupt = false;
  /// Where decode() returns frames. A CUDA device selects NVDEC when the GPU supports the stream.
  torch::Device device = torch::kCPU;
  /// False keeps a CUDA-device reader on the CPU decode path (frames still end up on the device).
  bool allow_nvdec = true;
  /// Frames no request needs and nothing references (non-reference B-frames) are not decoded at
  /// all (libavcodec's skip_frame = AVDISCARD_NONREF, set per packet).
  bool skip_unneeded_frames = true;
  /// A later GOP is reached by seeking only when at least this many frames lie between the last
  /// decoded frame and that GOP's keyframe; shorter gaps are decoded through (unneeded
  /// non-reference frames skipped). A seek flushes the decoder, and FFmpeg's H.264/HEVC decoders
  /// then rebuild their state on the next picture — with NVDEC, destroying and creating the hardware
  /// decoder, which the driver serialises across sessions. -1 (auto): 48 frames on NVDEC, 1 on
  /// the CPU path, where rebuilding the software decoder is cheaper than decoding the gap.
  int64_t reseek_gap = -1;
  /// Whether a seek flushes the decoder: 1 yes, 0 no, -1 (auto) no for H.264 on NVDEC, yes
  /// otherwise. Without a flush the decoder goes on from the keyframe it is fed; pictures still
  /// queued from before the seek come out tagged with an older seek generation and are dropped. On
  /// NVDEC this keeps FFmpeg's H.264 decoder from re-creating the hardware decoder at every seek.
  /// Only for H.264: an HEVC CRA keyframe reached without a flush leaves its leading pictures
  /// undecodable (seen: a needed frame never came out).
  int flush_on_seek = -1;
  /// No log warnings about damage; problems() still lists them (validate-data reports them itself).
  bool quiet = false;
  /// Shared by the readers of one dataset (see VideoFileNotes); none: each reader on its own.
  std::shared_ptr<VideoFileNotes> notes;
};

/// One stream of the container, for `teletron probe`.
struct StreamSummary {
  int index = 0;
  std::string type;   // "video", "audio", "subtitle", "data", ...
  std::string codec;  // "h264", "aac", ...
  int width = 0;      // video only
  int height = 0;
};

struct VideoInfo {
  std::string path;
  std::string container;     // libavformat's name, e.g. "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"
  int stream_index = -1;     // the stream that is decoded
  std::vector<StreamSummary> streams;
  std::string codec;         // codec name, e.g. "h264"
  std::string decoder;       // the libavcodec decoder used, e.g. "h264", "libdav1d"
  std::string profile;       // e.g. "High", "Main 10"; empty when unknown
  int width = 0;             // coded frame size (before rotation)
  int height = 0;
  std::string pixel_format;  // e.g. "yuv420p", "yuvj420p", "yuv420p10le"
  int bit_depth = 8;         // luma bits per sample of the stream
  int rotation = 0;          // clockwise degrees to display upright: 0, 90, 180 or 270
  /// Sample (pixel) aspect ratio of the coded frame, width over height of one pixel (1:1 when the
  /// file gives none): anamorphic video (DVD, HDV 1440x1080) stores 4:3 or 16:9 pictures in pixels
  /// that are not square.
  int sar_num = 1, sar_den = 1;
  VideoMatrix matrix = VideoMatrix::kBt601;
  bool full_range = false;
  std::string color_space_tag;  // FFmpeg's names of the raw tags, "unknown" when untagged
  std::string color_range_tag;
  std::string color_primaries_tag;
  std::string color_transfer_tag;
  double frame_rate = 0.0;        // average frames per second (0 when unknown)
  double duration_seconds = 0.0;  // stream (or container) duration; without one, the frame index's span
  int64_t header_frame_count = 0; // what the container header says (0 = not stored, e.g. Matroska)
  int64_t frame_count = 0;        // from the frame index: exact
  std::string decode_path;        // "nvdec" or "cpu"
  std::string decode_reason;      // why that path, e.g. the cuvidGetDecoderCaps answer
  /// Empty where frames are found by seeking to a keyframe and by their timestamps; otherwise why
  /// frame i is the i-th frame out of the decoder from the start of the file instead (every request
  /// then decodes from the start: slow on long files; a remux into MP4/MKV restores seeks). Set
  /// when the index is built, or by the first seek that lands on another packet than indexed.
  std::string decodes_from_start;

  /// The size as displayed: width and height swapped for 90/270 degree rotations.
  int displayed_width() const { return rotation == 90 || rotation == 270 ? height : width; }
  int displayed_height() const { return rotation == 90 || rotation == 270 ? width : height; }
  /// Width over height of one pixel of the rotated frames (the sample aspect, inverted by a 90 or
  /// 270 degree turn).
  double pixel_aspect() const {
    const double sar = static_cast<double>(sar_num) / static_cast<double>(sar_den);
    return rotation == 90 || rotation == 270 ? 1.0 / sar : sar;
  }
  /// The rotated frame's width on screen, its height kept: displayed_width() * pixel_aspect().
  int64_t shown_width() const {
    return std::max<int64_t>(1, std::llround(static_cast<double>(displayed_width()) * pixel_aspect()));
  }
};

/// What to do about a file whose VideoInfo::decodes_from_start is set (probe, validate-data).
inline constexpr const char* kDecodesFromStartHint =
    "a long clip loads slowly; re-encode it into MP4 (e.g. ffmpeg -i IN -c:v libx264 -crf 18 OUT.mp4), or remux "
    "a raw H.264/HEVC stream (ffmpeg -framerate FPS -i IN -c copy OUT.mkv)";

/// Every frame of the stream in presentation order, from demuxing packets (no decoding).
struct FrameIndex {
  std::vector<int64_t> pts;     // (N) in stream time base, ascending
  std::vector<uint8_t> keyframe;  // (N) 1 where the packet is a keyframe (a seek point)
  /// (N) each frame's packet's decode timestamp (AV_NOPTS_VALUE where the container gives none):
  /// the seek target in containers that seek by it (MPEG-TS / PS land past a keyframe sought by pts).
  std::vector<int64_t> dts;
  /// (N) each frame's packet's size in bytes: a seek that lands elsewhere shows in the first packet.
  std::vector<int64_t> packet_size;
  /// The demuxer seeks through FFmpeg's generic index (raw streams, image pipes, IVF, Ogg), whose
  /// byte positions can be those of the read chunk a frame began in rather than of the frame: the
  /// first packet after each seek is checked against the index (decode falls back to counting from
  /// the start when it is not the one indexed).
  bool check_seeks = false;
  /// Frames reordered (B-frames) in a container whose timestamps cannot name them (AVI: no
  /// presentation times; MPEG program streams: stamps misplaced after a seek): frame i is the i-th
  /// frame out of the decoder, decoding from the start of the file, not found by timestamp. Also
  /// set for streams without any timestamps (raw .h264 / .hevc elementary streams) and for streams
  /// where two frames share one timestamp.
  bool count_outputs = false;
  double time_base = 0.0;       // seconds per pts tick
  /// Seconds of frame i (pts * time_base, the same number as ffprobe's pts_time).
  double seconds(int64_t i) const { return static_cast<double>(pts[i]) * time_base; }
  /// seconds(i) of every frame: what the frame sampler takes.
  std::vector<double> times() const {
    std::vector<double> out(pts.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = seconds(static_cast<int64_t>(i));
    return out;
  }
  int64_t size() const { return static_cast<int64_t>(pts.size()); }
};

/// What the readers of one dataset learn about its files, shared among them (training opens a fresh
/// reader per sample): each warning is logged once per file rather than once per reader; a file
/// found unable to seek (a seek that landed on other packets than indexed) is read by counting from
/// its next open on, without the wasted seek; and each file's frame index is built once (it demuxes
/// every packet: the whole file's bytes, 0.2 s for a 2-minute 720p clip from the page cache) and
/// reused while the file's size and modification time (file_stamp) stay the same, up to kIndexBudgetFrames frames
/// kept (the oldest go first). Thread-safe; owned by whoever opens the readers (a training run's
/// data), never process-wide.
class VideoFileNotes {
 public:
  /// A frame index as VideoReader built it, with what building it found and the file it describes.
  struct Indexed {
    FrameIndex index;
    int stream_index = -1;
    std::string decodes_from_start;  // VideoInfo's, as the index left it
    std::string read_problem;        // the demuxer stopped early (empty: read to the end)
    std::string stamp;               // core/content_hash.h file_stamp taken before the file was opened
  };
  /// About 25 bytes a frame: 8M frames are ~200 MB.
  static constexpr int64_t kIndexBudgetFrames = 8'000'000;

  /// True the first time this message is given for this file.
  bool first_warning(const std::string& path, const std::string& message);
  void set_decodes_from_start(const std::string& path, const std::string& reason);
  /// Empty when nothing was learned.
  std::string decodes_from_start(const std::string& path) const;
  /// The file's file_stamp, empty where it cannot be read (then no index is kept or reused).
  static std::string stamp_of(const std::string& path);
  /// The index kept for this file and stream while the file's stamp is still `stamp`, or null.
  std::shared_ptr<const Indexed> index(const std::string& path, const std::string& stamp, int stream_index) const;
  /// Kept unless its stamp is empty or it alone exceeds the budget.
  void keep_index(const std::string& path, Indexed indexed);

 private:
  mutable std::mutex mutex_;
  std::set<std::pair<std::string, std::string>> warned_;
  std::map<std::string, std::string> decodes_from_start_;
  std::map<std::string, std::shared_ptr<const Indexed>> indexes_;
  std::deque<std::string> index_order_;  // oldest first
  int64_t indexed_frames_ = 0;
};

/// Decoded frames in the unified 4:2:0 layout (what NVDEC gives: NV12 for 8-bit, P010 for 10-bit).
/// What decoding every frame of a file found (VideoReader::scan).
struct ScanReport {
  int64_t frames_indexed = 0;   // packets of the stream (the frame index)
  int64_t frames_decoded = 0;   // frames the decoder produced
  int64_t corrupt_frames = 0;   // of those, flagged corrupt (concealed) by FFmpeg
  int64_t decoder_errors = 0;   // packets the decoder rejected or errors it reported
  bool read_error = false;      // the demuxer stopped with an error before the end (truncated/damaged)
  /// The file's problems in words, in the order found (empty for a clean file).
  std::vector<std::string> problems;
  bool clean() const { return problems.empty(); }
};

/// y and uv on the reader's device (options.device); indices and seconds on the CPU.
struct DecodedFrames {
  torch::Tensor y;        // (T, H, W) uint8, or uint16 holding the 10-bit value << 6 (P010)
  torch::Tensor uv;       // (T, ceil(H/2), ceil(W/2), 2) same dtype, U then V interleaved
  torch::Tensor indices;  // (T) int64 frame indices (presentation order)
  torch::Tensor seconds;  // (T) float64 frame times (pts * time_base)
  int bit_depth = 8;      // 8 or 10: the meaning of the values in y/uv
  VideoMatrix matrix = VideoMatrix::kBt601;
  bool full_range = false;
};

class VideoReader {
 public:
  /// Opens the file, picks the stream, opens its decoder and builds the frame index.
  explicit VideoReader(const std::string& path, VideoReaderOptions options = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const VideoInfo& info() const;
  const FrameIndex& index() const;

  /// Frames `indices` (sorted, unique, each in [0, frame_count)) as raw 4:2:0 planes, not rotated.
  /// Seeks (AVSEEK_FLAG_BACKWARD) to the keyframe at or before the first needed frame, decodes
  /// forward matching each frame's best_effort_timestamp against the index, converts only the
  /// needed frames, and seeks again when the next needed frame lies in a later GOP than the one
  /// being decoded. If a demuxer lands after the wanted frame, it retries from the keyframe before.
  /// An index out of range is kData.
  DecodedFrames decode(const std::vector<int64_t>& indices);

  /// Frames `indices` as (T, H', W', 3) uint8 RGB after display rotation (H', W' swapped for
  /// 90/270), converted with the stream's matrix and range set explicitly.
  torch::Tensor decode_rgb(const std::vector<int64_t>& indices,
                           RgbConverter converter = RgbConverter::kColourKernel);

  /// Decodes every frame once without keeping them and reports damage (for `teletron
  /// validate-data`). On NVDEC, a file that NVDEC refuses or decodes short is scanned again on the
  /// CPU path (the reader stays there, decode_reason says so) so the report is about the file.
  ScanReport scan();

  /// Where the demuxer seeks through FFmpeg's generic index (FrameIndex::check_seeks), whether its
  /// seeks land where the index says shows only on a seek: decodes two frames alone (past the
  /// middle, then the second-last), so that info().decodes_from_start is known before training
  /// reads the file (validate-data). Does nothing for other files. Returns decodes_from_start.
  /// Call it first: once a reader has decoded the whole file (scan), FFmpeg's generic index holds
  /// exact positions and its seeks land right, where a freshly opened reader's (training's) do not.
  const std::string& try_seeks();

  /// Whether this reader's frame index came from options.notes (an earlier reader built it).
  bool index_reused() const;
  /// How many decoder seeks the last decode() made (for tests and benchmarks).
  int last_seek_count() const;
  /// How many frames the decoder produced in the last decode() (needed or not; for benchmarks).
  int64_t last_decoded_count() const;
  /// How many times NVDEC's hardware decoder was set up for this file so far (FFmpeg re-creates it
  /// on the first picture after every seek's flush; 0 on the CPU path). For benchmarks.
  int64_t nvdec_decoder_inits() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Raw planes → (T, H, W, 3) uint8 RGB with libswscale (bicubic chroma upsampling, the ffmpeg
/// CLI's default, so the result matches `ffmpeg -pix_fmt rgb24` with the same matrix and range).
torch::Tensor yuv420_to_rgb_swscale(const DecodedFrames& frames);

/// The colour description of decoded planes for cuda/colour.h (BT.2020 CL is treated as NCL).
YuvFormat yuv_format(const DecodedFrames& frames);

/// Applies a clockwise display rotation (0/90/180/270) to (T, H, W, C) frames.
torch::Tensor rotate_frames(const torch::Tensor& frames, int rotation);

}  // namespace tt
