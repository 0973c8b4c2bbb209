// The cached-latent TrainingData source (see training_data.h).
#include "pipeline/training_data.h"

#include "core/content_hash.h"
#include "core/errors.h"
#include "core/file_io.h"

namespace tt {
namespace {

class LatentTrainingData : public TrainingData {
 public:
  explicit LatentTrainingData(const LatentDatasetOptions& options) : manifest_(options.manifest) {
    dataset_ = std::make_unique<LatentDataset>(options);
    ContentHash hash;
    hash.add(read_text_file(options.manifest));
    for (int64_t i = 0; i < dataset_->size(); ++i) hash.add_file_stamp(dataset_->file(i));
    content_hash_ = hash.hex();
  }
  int64_t size() const override { return dataset_->size(); }
  std::vector<int64_t> latent_shape() const override { return dataset_->latent_shape(); }
  int64_t text_length() const override { return dataset_->text_length(); }
  std::vector<int64_t> row_buckets() const override { return dataset_->row_buckets(); }
  std::vector<std::vector<int64_t>> bucket_latent_shapes() const override { return dataset_->bucket_shapes(); }
  std::string describe() const override {
    const size_t buckets = dataset_->bucket_shapes().size();
    return str_cat(manifest_, " (cached latents", buckets > 1 ? str_cat(", ", buckets, " latent shapes: one bucket each") : "",
                   ")");
  }
  LatentBatch get_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>&) override {
    return dataset_->get_batch(indices);
  }
  LatentSample load_one(int64_t index, int64_t) override { return dataset_->get(index); }
  std::pair<int64_t, std::string> row_origin(int64_t index) const override { return {index + 1, dataset_->file(index)}; }
  std::string content_hash() const override { return content_hash_; }
  std::string row_identity(int64_t index) const override {
    return str_cat(dataset_->file(index), " (", file_stamp(dataset_->file(index)), ")");
  }

 private:
  std::string manifest_;
  std::string content_hash_;
  std::unique_ptr<LatentDataset> dataset_;
};

}  // namespace

std::unique_ptr<TrainingData> make_latent_training_data(const LatentDatasetOptions& options) {
  return std::make_unique<LatentTrainingData>(options);
}

}  // namespace tt
