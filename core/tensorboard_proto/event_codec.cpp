// tensorboard.Event messages (event_codec.h) with the classes protoc generates from event.proto.
#include "core/tensorboard_proto/event_codec.h"

#include <utility>

#include "core/tensorboard_proto/event.pb.h"

namespace tt::tensorboard {
namespace pb = ::tensorboard;  // the generated classes (package tensorboard)

bool encode_event(const EventData& event, std::string* out) {
  const int kinds = static_cast<int>(!event.file_version.empty()) + static_cast<int>(event.session_start) +
                    static_cast<int>(!event.scalars.empty() || !event.images.empty());
  if (kinds != 1) return false;
  pb::Event message;
  message.set_wall_time(event.wall_time);
  message.set_step(event.step);
  if (!event.file_version.empty()) {
    message.set_file_version(event.file_version);
  } else if (event.session_start) {
    message.mutable_session_log()->set_status(pb::SessionLog::START);
  } else {
    pb::Summary* summary = message.mutable_summary();
    for (const ScalarValue& scalar : event.scalars) {
      pb::Summary::Value* value = summary->add_value();
      value->set_tag(scalar.tag);
      value->set_simple_value(scalar.value);
    }
    for (const ImageValue& image : event.images) {
      pb::Summary::Value* value = summary->add_value();
      value->set_tag(image.tag);
      pb::Summary::Image* out = value->mutable_image();
      out->set_height(image.height);
      out->set_width(image.width);
      out->set_colorspace(image.colorspace);
      out->set_encoded_image_string(image.encoded);
    }
  }
  return message.SerializeToString(out);
}

bool decode_event(const std::string& bytes, EventData* out) {
  pb::Event message;
  if (!message.ParseFromString(bytes)) return false;
  EventData event;
  event.wall_time = message.wall_time();
  event.step = message.step();
  switch (message.what_case()) {
    case pb::Event::kFileVersion:
      event.file_version = message.file_version();
      break;
    case pb::Event::kSessionLog:
      event.session_start = message.session_log().status() == pb::SessionLog::START;
      break;
    case pb::Event::kSummary:
      for (const pb::Summary::Value& value : message.summary().value()) {
        if (value.value_case() == pb::Summary::Value::kSimpleValue) {
          event.scalars.push_back({value.tag(), value.simple_value()});
        } else if (value.value_case() == pb::Summary::Value::kImage) {
          const pb::Summary::Image& image = value.image();
          event.images.push_back(
              {value.tag(), image.height(), image.width(), image.colorspace(), image.encoded_image_string()});
        }
      }
      break;
    default:
      break;
  }
  *out = std::move(event);
  return true;
}

}  // namespace tt::tensorboard
