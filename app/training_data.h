// Where training batches come from, chosen by data.source: cached latents (pipeline/training_data)
// or raw videos (pipeline/video_training_data), their options mapped from the config here.
// app/prefetch runs get_batch ahead of the step on its own thread and CUDA stream; prepare() lets
// data_pipeline.workers threads decode the clips of later batches meanwhile.
#pragma once

#include <torch/types.h>

#include <memory>

#include "app/config.h"
#include "model/hunyuan_config.h"
#include "pipeline/training_data.h"

namespace tt {

/// From config.data.source; checks every row up front (TT_ERR_DATA naming the row). With `stored`
/// whose content_hash matches the data's and whose row_buckets is set, the video source takes that
/// bucket assignment (one entry per row, TT_ERR_CHECKPOINT when it does not fit the config)
/// instead of opening every file to derive it.
std::unique_ptr<TrainingData> make_training_data(const Config& config, const HunyuanVideoConfig& model,
                                                 torch::Device device, const StoredDataState* stored = nullptr);

}  // namespace tt
