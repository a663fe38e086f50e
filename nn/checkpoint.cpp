// Checkpoints as one safetensors file with "section/" prefixes (Note [Checkpoint layout]).
#include <ampgrad/nn/checkpoint.h>

#include <algorithm>

#include <ampgrad/autograd/node.h>

namespace ampgrad::nn {

namespace {
constexpr const char* kFormat = "ampgrad-checkpoint";
constexpr const char* kVersion = "1";
}  // namespace

void save_checkpoint(const std::string& path, const std::map<std::string, optim::StateDict>& sections,
                     const std::map<std::string, std::string>& metadata) {
  std::map<std::string, std::string> meta = metadata;
  for (const char* key : {"format", "version", "sections"})
    AG_CHECK(!meta.count(key), "save_checkpoint: {}: metadata key '{}' is reserved", path, key);
  meta.emplace("format", kFormat);
  meta.emplace("version", kVersion);
  std::map<std::string, Tensor> tensors;
  std::string names;
  for (const auto& [section, sd] : sections) {
    AG_CHECK(!section.empty() && section.find_first_of("/,") == std::string::npos,
             "save_checkpoint: {}: section name '{}' must be non-empty and contain no '/' or ','", path, section);
    names += (names.empty() ? "" : ",") + section;
    for (const auto& [key, t] : sd) tensors[section + "/" + key] = t;
  }
  meta.emplace("sections", names);
  save_safetensors(path, tensors, meta);
}

std::map<std::string, optim::StateDict> load_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  const auto meta = [&](const char* key) {
    const auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string("(missing)") : "'" + it->second + "'";
  };
  AG_CHECK(meta("format") == fmt::format("'{}'", kFormat),
           "load_checkpoint: {}: not an ampgrad checkpoint (metadata 'format' is {}, expected '{}')", path,
           meta("format"), kFormat);
  AG_CHECK(meta("version") == fmt::format("'{}'", kVersion),
           "load_checkpoint: {}: checkpoint version {} is not supported (this build reads version '{}')", path,
           meta("version"), kVersion);

  // "sections" lists them all, including those without tensors; the names give the rest.
  std::map<std::string, optim::StateDict> sections;
  const std::string names = file.metadata.count("sections") ? file.metadata.at("sections") : "";
  for (size_t at = 0; at < names.size();) {
    const size_t comma = std::min(names.find(',', at), names.size());
    sections[names.substr(at, comma - at)];
    at = comma + 1;
  }
  for (auto& [name, t] : file.tensors) {
    const size_t slash = name.find('/');
    AG_CHECK(slash != std::string::npos && slash > 0,
             "load_checkpoint: {}: tensor '{}' has no '<section>/' prefix", path, name);
    sections[name.substr(0, slash)][name.substr(slash + 1)] = std::move(t);
  }
  return sections;
}

void load_into(optim::StateDict& target, const optim::StateDict& source, const std::string& what) {
  for (const auto& [key, t] : target) {
    const auto it = source.find(key);
    AG_CHECK(it != source.end() && it->second.defined(), "load_into({}): tensor '{}' is missing from the source", what,
             key);
    AG_CHECK(t.defined(), "load_into({}): target tensor '{}' is undefined", what, key);
    AG_CHECK(it->second.shape() == t.shape(), "load_into({}): tensor '{}' has shape {} in the source but {} in the target",
             what, key, shape_str(it->second.shape()), shape_str(t.shape()));
  }
  NoGradGuard no_grad;
  for (auto& [key, t] : target) t.copy_(source.at(key));
}

}  // namespace ampgrad::nn
