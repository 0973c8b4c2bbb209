// Precompiled header shared by every teletron target: the heavy LibTorch and STL headers.
#pragma once
#include <torch/torch.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>
#include <string>
#include <vector>
#include <map>
#include <memory>
#include <optional>
