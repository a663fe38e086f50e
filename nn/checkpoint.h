// Checkpoints: model, optimizer and scaler state dicts in one safetensors file, and
// load_into, which checks a whole state dict before it changes a single tensor.
#pragma once

#include <map>
#include <string>

#include <ampgrad/nn/safetensors.h>
#include <ampgrad/optim/optimizer.h>

namespace ampgrad::nn {

// Note [Checkpoint layout]
// One safetensors file. Each tensor is named "<section>/<key>": "model/fc1.weight",
// "optimizer/state.0.exp_avg", "scaler/scale". The metadata holds "format":
// "ampgrad-checkpoint", "version": "1" and "sections": the section names joined by ",",
// so that a section with no tensors survives the round trip, plus the caller's entries.
//
//   nn::save_checkpoint("ckpt.safetensors", {{"model", model_sd}, {"optimizer", opt.state_dict()},
//                                            {"scaler", scaler.state_dict()}}, {{"epoch", "3"}});
//   auto ckpt = nn::load_checkpoint("ckpt.safetensors");
//   nn::load_into(model_sd, ckpt.at("model"), "model");
//   opt.load_state_dict(ckpt.at("optimizer"));

// Section names must be non-empty and contain neither '/' nor ','; the metadata keys
// "format", "version" and "sections" are reserved.
void save_checkpoint(const std::string& path, const std::map<std::string, optim::StateDict>& sections,
                     const std::map<std::string, std::string>& metadata = {});

// Every section of the checkpoint, its tensors on the CPU. Throws when the file is not an
// ampgrad checkpoint of a version this build reads.
std::map<std::string, optim::StateDict> load_checkpoint(const std::string& path);

// Copies source's values into target's tensors in place (copy_ under NoGradGuard: target
// tensors may be parameters, on any device, of any dtype). First checks that every key of
// target is in source with the same shape, and throws naming `what` and the tensor if not,
// so that a mismatched checkpoint leaves target unchanged. Keys only in source are ignored.
void load_into(optim::StateDict& target, const optim::StateDict& source, const std::string& what);

}  // namespace ampgrad::nn
