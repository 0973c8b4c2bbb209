// TensorBoard Event messages to and from bytes, behind a header that names no protobuf type, so
// that code built against LibTorch (whose pip wheel ships older protobuf headers on its include
// path) can use them: only event_codec.cpp and the code protoc generates from event.proto and
// summary.proto see the distro's protobuf headers, in the teletron_tensorboard_proto target.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt::tensorboard {

/// One Summary.Value.simple_value (TensorBoard's scalars are float32).
struct ScalarValue {
  std::string tag;
  float value = 0.0f;
};

/// One Summary.Value.image: an encoded PNG/GIF/JPEG with its size.
struct ImageValue {
  std::string tag;
  int32_t height = 0;
  int32_t width = 0;
  int32_t colorspace = 3;   // 3 = RGB
  std::string encoded;      // the image file's bytes
};

/// What teletron writes in one Event (a parsed one may hold several kinds; others are ignored).
struct EventData {
  double wall_time = 0.0;  // seconds since the Unix epoch
  int64_t step = 0;
  std::string file_version;  // "brain.Event:2" in a file's first event, else empty
  bool session_start = false;  // SessionLog.status == START
  std::vector<ScalarValue> scalars;
  std::vector<ImageValue> images;
};

// No tt::Error here: this target does not link teletron_core (which links it); the callers in
// core/tensorboard.cpp turn a false into TT_ERR_*.

/// Serialises `event` as a tensorboard.Event into `out`: file_version, a session_log START or a
/// summary with every scalar and image. False when not exactly one of the three kinds is set.
bool encode_event(const EventData& event, std::string* out);

/// Parses a tensorboard.Event into `event`; false when the bytes are not one.
bool decode_event(const std::string& bytes, EventData* event);

}  // namespace tt::tensorboard
