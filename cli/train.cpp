// `ampgrad train`: trains the MLP or the CNN on Fashion-MNIST, with or without AMP (the GPT:
// cli/train_gpt.cpp).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include <ampgrad/ampgrad.h>
#include "cli/commands.h"
#include "cli/gpt.h"
#include "cli/models.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include <ampgrad/distributed/launch.h>

namespace ampgrad::cli {

namespace {

struct TrainArgs {
  std::string model = "cnn";
  int64_t steps = 0;  // gpt only
  std::string amp = "auto";
  bool master_weights = false;
  std::string optimizer = "adam";
  double lr = 1e-3;
  std::string schedule = "cosine";
  int epochs = 5;
  int64_t batch_size = 128;
  std::string device = "auto";
  uint64_t seed = 0;
  std::string data = data::kFashionMnistDebianDir;
  int64_t limit = 0;  // 0: every image
  int gpus = 0;        // 0: one process, no process group
  std::string save, resume, metrics, plot;
  std::vector<std::string> given;  // the options on the command line, by name ("--steps")
  bool was_given(const std::string& name) const { return std::find(given.begin(), given.end(), name) != given.end(); }
};

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainArgs& a, const std::vector<Tensor>& params) {
  if (a.optimizer == "sgd") return std::make_unique<optim::SGD>(params, optim::SGDOptions(a.lr).momentum(0.9));
  if (a.optimizer == "adamw") return std::make_unique<optim::AdamW>(params, optim::AdamWOptions(a.lr));
  return std::make_unique<optim::Adam>(params, optim::AdamOptions(a.lr));
}

// Accuracy on a dataset, in batches, counted on the device (one read at the end).
// A step's autocast: amp_dtype's, or FP8 autocast with `fp8` (Note [FP8 autocast] in amp/autocast.h).
void enter_autocast(std::optional<amp::AutocastGuard>& g, DeviceType type, bool use_amp, DType amp_dtype,
                    amp::Fp8Recipe* fp8) {
  if (fp8) g.emplace(type, kFloat8_e4m3fn, *fp8);
  else g.emplace(type, amp_dtype, use_amp);
}

double evaluate(nn::Module& net, const data::Dataset& ds, Device dev, bool use_amp, DType amp_dtype,
                amp::Fp8Recipe* fp8) {
  NoGradGuard no_grad;
  net.eval();
  Tensor correct = zeros({}, TensorOptions(kInt64).device(dev));
  const int64_t batch = dev.is_cuda() ? 1000 : 250;  // on the CPU, activations stay in cache
  for (int64_t start = 0; start < ds.size(); start += batch) {
    const int64_t n = std::min<int64_t>(batch, ds.size() - start);
    Tensor x = ds.images.narrow(0, start, n).to(dev), y = ds.labels.narrow(0, start, n).to(dev);
    std::optional<amp::AutocastGuard> autocast;
    enter_autocast(autocast, dev.type, use_amp, amp_dtype, fp8);
    correct = correct + sum(eq(argmax(net(x), 1), y));
  }
  net.train();
  return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(ds.size());
}

struct StepLog {
  std::vector<Tensor> loss, scale, found_inf;  // device tensors, read once per epoch
  size_t counted = 0;                          // found_inf flags counted into skipped so far
  int64_t skipped = 0;
};

void write_metrics(std::ofstream& f, bool csv, int epoch, int64_t first_step, const std::vector<double>& loss,
                   const std::vector<double>& scale, const std::vector<double>& skipped, double lr, double ips) {
  for (size_t i = 0; i < loss.size(); ++i) {
    const int64_t step = first_step + static_cast<int64_t>(i);
    if (csv) {
      f << fmt::format("{},{},{:.6f},{:g},{},{:g},{:.1f}\n", epoch, step, loss[i], scale[i], skipped[i] != 0 ? 1 : 0,
                       lr, ips);
    } else {
      f << fmt::format(R"({{"epoch": {}, "step": {}, "loss": {:.6f}, "scale": {:g}, "skipped": {}, "lr": {:g}, "images_per_s": {:.1f}}})",
                       epoch, step, loss[i], scale[i], skipped[i] != 0 ? "true" : "false", lr, ips)
        << '\n';
    }
  }
}

std::vector<double> read_all(const std::vector<Tensor>& ts) {
  if (ts.empty()) return {};
  return stack(ts, 0).to(kFloat64).cpu().to_vector<double>();
}

// This process's command line, to start it again on every GPU (`--gpus N` outside a launcher).
std::vector<std::string> own_argv() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t i = 0; i < all.size();) {
    const size_t end = all.find('\0', i);
    args.push_back(all.substr(i, end - i));
    i = end == std::string::npos ? all.size() : end + 1;
  }
  if (!args.empty()) args[0] = "/proc/self/exe";
  return args;
}

// --gpus N: the process group of this rank (one process per GPU; `ampgrad-run -n N` or this
// command itself start them), or null without --gpus.
distributed::ProcessGroup* join_process_group(const TrainArgs& a) {
  if (a.gpus == 0) return nullptr;
  // Checked before any rank starts, so that a mistake is reported once.
  AG_CHECK(a.device == "auto" || a.device == "cuda", "--gpus {} trains on CUDA devices; --device {} conflicts",
           a.gpus, a.device);
  AG_CHECK(a.batch_size % a.gpus == 0, "--gpus {}: --batch-size {} (the global batch) must divide evenly", a.gpus,
           a.batch_size);
  distributed::ProcessGroup* pg = nullptr;
  if (std::getenv("RANK") == nullptr) {
    if (a.gpus > 1) std::exit(distributed::launch_local(a.gpus, own_argv()));  // the ranks do the work
    distributed::Options o;
    o.master_port = distributed::free_port();
    pg = &distributed::init_process_group(o);
  } else {
    pg = &distributed::init_process_group();
  }
  AG_CHECK(pg->world_size() == a.gpus, "--gpus {}: this process group has WORLD_SIZE {}", a.gpus, pg->world_size());
  if (pg->rank() != 0) AG_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "cannot silence rank {}", pg->rank());
  return pg;
}

void run_train(const TrainArgs& a) {
  if (a.model == "gpt") {
    for (const char* o : {"--resume", "--gpus", "--master-weights", "--limit", "--optimizer", "--schedule", "--epochs"})
      AG_CHECK(!a.was_given(o), "ampgrad train --model gpt: {} is for the Fashion-MNIST models (mlp, cnn) only; the "
               "GPT trains with AdamW, warm-up + cosine, for --steps", o);
    GptTrainArgs g;
    if (a.was_given("--data")) g.data = a.data;
    g.device = a.device;
    g.amp = a.amp;
    g.steps = a.steps;
    g.batch_size = a.was_given("--batch-size") ? a.batch_size : 0;
    g.lr = a.lr;
    g.seed = a.seed;
    g.save = a.save;
    g.metrics = a.metrics;
    g.plot = a.plot;
    run_train_gpt(g);
    return;
  }
  AG_CHECK(!a.was_given("--steps"), "ampgrad train --model {}: --steps is for --model gpt (mlp and cnn count --epochs)",
           a.model);
  distributed::ProcessGroup* pg = join_process_group(a);
  const bool rank0 = pg == nullptr || pg->rank() == 0;
  const Device dev = pg ? pg->device() : resolve_device(a.device);
  TrainArgs args = a;
  if (args.amp == "auto") args.amp = dev.is_cuda() ? "fp16" : "bf16";  // as torch.autocast's defaults
  const bool use_amp = args.amp != "off";
  const DType amp_dtype = args.amp == "bf16" ? kBFloat16 : kFloat16;
  AG_CHECK(!a.master_weights || (use_amp && args.amp != "fp8"), "--master-weights needs --amp fp16 or bf16");
  // FP8 autocast: FP8 GEMMs for the linear layers, bfloat16 elsewhere (convolutions included),
  // delayed scaling, no loss scaler (Note [FP8 autocast]).
  std::unique_ptr<amp::Fp8Recipe> fp8;
  if (args.amp == "fp8") fp8 = std::make_unique<amp::Fp8Recipe>();
  std::optional<int64_t> limit;
  if (a.limit > 0) limit = a.limit;
  manual_seed(a.seed);
  data::Dataset train = data::load_fashion_mnist(a.data, true, limit);
  data::Dataset test = data::load_fashion_mnist(a.data, false);
  auto net = make_model(a.model, dev);
  // Master weights: the model is stored in 16 bits; the optimizer keeps float32 masters.
  if (a.master_weights) net->to(amp_dtype);
  // Before the optimizer: its master weights must copy rank 0's broadcast weights.
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (pg) ddp = std::make_unique<distributed::DistributedDataParallel>(net, *pg);
  auto opt = make_optimizer(a, net->parameters());
  if (a.master_weights) opt->use_master_weights();
  // bf16 has float32's range: no loss scaling needed, as in PyTorch.
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(use_amp && amp_dtype == kFloat16 && !fp8));
  // With --gpus, each rank takes its share of the same global order (DistributedSampler) in
  // batches of batch-size / N: together one global batch per step.
  const int64_t rank_batch = pg ? a.batch_size / pg->world_size() : a.batch_size;
  data::DataLoader loader(train, data::DataLoaderOptions(rank_batch).shuffle(true).seed(a.seed).device(dev));
  std::optional<distributed::DistributedSampler> sampler;
  if (pg) sampler.emplace(pg->world_size(), pg->rank());

  int start_epoch = 0;
  int64_t global_step = 0, skipped_total = 0;
  if (!a.resume.empty()) {
    auto ckpt = nn::load_checkpoint(a.resume);
    net->load_state_dict(ckpt.at("model"));
    opt->load_state_dict(ckpt.at("optimizer"));
    if (scaler.is_enabled()) {
      scaler.scale(zeros({}, TensorOptions().device(dev)));
      scaler.load_state_dict(ckpt.at("scaler"));
    }
    const auto& meta = ckpt.at("progress");
    start_epoch = static_cast<int>(meta.at("epoch").item<double>());
    global_step = static_cast<int64_t>(meta.at("step").item<double>());
    skipped_total = static_cast<int64_t>(meta.at("skipped").item<double>());
    std::printf("resumed from %s after epoch %d (step %lld)\n", a.resume.c_str(), start_epoch,
                static_cast<long long>(global_step));
  }

  std::printf("training %s on %s: %lld images, batch %lld, %s lr %g, amp %s%s, %d epochs\n", a.model.c_str(),
              pg ? fmt::format("{} GPUs (DistributedDataParallel, NCCL)", pg->world_size()).c_str() : dev.str().c_str(), static_cast<long long>(train.size()), static_cast<long long>(a.batch_size),
              a.optimizer.c_str(), a.lr, args.amp.c_str(), a.master_weights ? " (master weights)" : "", a.epochs);
  std::ofstream metrics;
  const bool csv = a.metrics.size() > 4 && a.metrics.substr(a.metrics.size() - 4) == ".csv";
  if (!a.metrics.empty() && rank0) {
    metrics.open(a.metrics, start_epoch > 0 ? std::ios::app : std::ios::trunc);
    AG_CHECK(metrics.good(), "--metrics: cannot write {}", a.metrics);
    if (csv && start_epoch == 0) metrics << "epoch,step,loss,scale,skipped,lr,images_per_s\n";
  }
  if (dev.is_cuda()) cuda::reset_peak_memory_stats(dev.index);
  std::vector<double> all_loss, all_scale;
  double total_time = 0, last_acc = 0;
  int64_t images_seen = 0;
  const bool terminal = stdout_is_terminal();
  for (int epoch = start_epoch; epoch < a.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    // Dropout draws from the default generator: seeding it per epoch makes a resumed run
    // draw the same masks as an uninterrupted one.
    // With --gpus, each rank its own dropout masks (rank 0 draws what one process would).
    manual_seed(a.seed * 1000003ull + static_cast<uint64_t>(epoch) + 1 +
                (pg ? 7919ull * static_cast<uint64_t>(pg->rank()) : 0));
    data::Epoch batches = sampler ? data::Epoch(loader, sampler->shard(loader.permutation(epoch))) : loader.epoch(epoch);
    Progress progress(epoch + 1, a.epochs, terminal);
    StepLog log;
    StepStats st;
    st.steps = batches.size();
    for (int64_t i = 0; i < batches.size(); ++i) {
      data::Batch b = batches.batch(i);
      if (a.schedule == "cosine") {
        // Cosine decay to zero over the whole run, per step (a host-side number: no sync).
        const double t = static_cast<double>(epoch * batches.size() + i) / static_cast<double>(a.epochs * batches.size());
        opt->set_lr(a.lr * 0.5 * (1 + std::cos(M_PI * t)));
      }
      opt->zero_grad();
      Tensor loss;
      {
        std::optional<amp::AutocastGuard> autocast;
        enter_autocast(autocast, dev.type, use_amp, amp_dtype, fp8.get());
        loss = cross_entropy(ddp ? (*ddp)(b.images) : (*net)(b.images), b.labels);
      }
      scaler.scale(loss).backward();
      scaler.step_and_update(*opt);  // step() then update(), in one launch where it can
      if (pg && pg->world_size() > 1) {  // log the global batch's loss: the mean over ranks
        loss = loss.detach().clone();
        pg->all_reduce(loss, distributed::ReduceOp::Avg);
      }
      log.loss.push_back(loss.detach());
      if (scaler.is_enabled()) {
        log.scale.push_back(scaler.scale_tensor().clone());
        log.found_inf.push_back(scaler.last_found_inf());
      }
      st.step = i + 1;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      st.images_per_s = static_cast<double>((i + 1) * a.batch_size) / std::max(secs, 1e-9);
      // Reading values synchronizes: only when the bar or a line is due.
      if (progress.due(st.step, st.steps)) {
        st.loss = loss.item<double>();
        st.scale = scaler.is_enabled() ? scaler.get_scale() : 0;
        st.skipped = skipped_total;
        if (log.counted < log.found_inf.size()) {  // only the flags since the last line: a stack copies each
          const std::vector<Tensor> fresh(log.found_inf.begin() + static_cast<std::ptrdiff_t>(log.counted),
                                          log.found_inf.end());
          log.skipped += sum(ne(stack(fresh, 0), 0.0)).item<int64_t>();
          log.counted = log.found_inf.size();
        }
        st.skipped += log.skipped;
        progress.update(st);
      }
    }
    std::vector<double> losses = read_all(log.loss), scales = read_all(log.scale), infs = read_all(log.found_inf);
    if (scales.empty()) scales.assign(losses.size(), 0.0), infs.assign(losses.size(), 0.0);
    int64_t skipped = 0;
    for (double f : infs) skipped += f != 0;
    skipped_total += skipped;
    st.skipped = skipped_total;
    progress.finish(st);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_time += secs;
    images_seen += batches.size() * a.batch_size;
    const double ips = static_cast<double>(batches.size() * a.batch_size) / secs;
    if (metrics.is_open()) write_metrics(metrics, csv, epoch + 1, global_step + 1, losses, scales, infs, opt->lr(), ips);
    global_step += static_cast<int64_t>(losses.size());
    all_loss.insert(all_loss.end(), losses.begin(), losses.end());
    all_scale.insert(all_scale.end(), scales.begin(), scales.end());
    if (ddp) ddp->sync_buffers();  // rank 0's BatchNorm statistics for evaluation and saving
    if (rank0) last_acc = evaluate(*net, test, dev, use_amp, amp_dtype, fp8.get());
    std::printf("epoch %d/%d: test accuracy %.2f%%, %.1f s, %.0f images/s, %lld skipped steps\n", epoch + 1, a.epochs,
                100 * last_acc, secs, ips, static_cast<long long>(skipped));
    if (!a.save.empty() && rank0) {
      optim::StateDict progress_sd{{"epoch", tensor(std::vector<double>{double(epoch + 1)}, {})},
                                   {"step", tensor(std::vector<double>{double(global_step)}, {})},
                                   {"skipped", tensor(std::vector<double>{double(skipped_total)}, {})}};
      nn::save_checkpoint(a.save,
                          {{"model", net->state_dict()}, {"optimizer", opt->state_dict()},
                           {"scaler", scaler.state_dict()}, {"progress", progress_sd}},
                          {{"model", a.model}, {"amp", args.amp}, {"optimizer", a.optimizer}});
    }
  }
  std::string peak = "-";
  if (dev.is_cuda()) peak = fmt::format("{:.1f} MiB", cuda::memory_stats(dev.index).peak_allocated / 1048576.0);
  std::printf("\n| model | device | amp | test accuracy | time | images/s | peak device memory | final scale | skipped steps |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %s | %s%s | %.2f%% | %.1f s | %.0f | %s | %s | %lld |\n", a.model.c_str(), dev.str().c_str(),
              args.amp.c_str(), a.master_weights ? "+master" : "", 100 * last_acc, total_time,
              total_time > 0 ? images_seen / total_time : 0.0, peak.c_str(),
              scaler.is_enabled() ? fmt::format("{:g}", scaler.get_scale()).c_str() : "-",
              static_cast<long long>(skipped_total));
  if (!a.save.empty()) std::printf("checkpoint: %s\n", a.save.c_str());
  if (!a.metrics.empty()) std::printf("metrics: %s\n", a.metrics.c_str());
  if (!a.plot.empty() && rank0) {
    plot_training(a.plot, all_loss, all_scale,
                  fmt::format("ampgrad train --model {} --amp {} ({})", a.model, args.amp, dev.str()));
    std::printf("plot: %s\n", a.plot.c_str());
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "Train a network on Fashion-MNIST (or a GPT on text), with or without mixed precision");
  cmd->add_option("--model", a->model,
                  "mlp (784-512-512-10) or cnn (2 conv blocks + 2 linear) on Fashion-MNIST, or gpt (a character-level "
                  "transformer on the text of --data, default /usr/share/games/fortunes)")
      ->check(CLI::IsMember({"mlp", "cnn", "gpt"}))->capture_default_str();
  cmd->add_option("--steps", a->steps, "gpt: training steps (default 2000 on CUDA, 300 on the CPU)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--amp", a->amp,
                  "autocast dtype: fp16 (with loss scaling), bf16, fp8 (FP8 GEMMs for linear layers, delayed scaling, bf16 "
                  "elsewhere), off (float32), or auto (fp16 on CUDA, bf16 on the CPU)")
      ->check(CLI::IsMember({"auto", "fp16", "bf16", "fp8", "off"}))->capture_default_str();
  cmd->add_flag("--master-weights", a->master_weights,
                "store the model in 16 bits and keep float32 master weights in the optimizer");
  cmd->add_option("--optimizer", a->optimizer, "sgd (momentum 0.9), adam or adamw (mlp and cnn; gpt trains with AdamW)")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))->capture_default_str();
  cmd->add_option("--lr", a->lr, "learning rate (the peak of the schedule)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--schedule", a->schedule, "learning-rate schedule: cosine (decay to 0 over all steps) or constant (mlp and cnn; gpt: warm-up + cosine)")
      ->check(CLI::IsMember({"cosine", "constant"}))->capture_default_str();
  cmd->add_option("--epochs", a->epochs, "passes over the training set (mlp and cnn; gpt counts --steps)")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch-size", a->batch_size, "images per step (gpt: windows per step, default 32 on CUDA, 16 on the CPU)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--device", a->device, "auto (CUDA when present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--seed", a->seed, "seed for initialization, shuffling and dropout")->capture_default_str();
  cmd->add_option("--data", a->data,
                  "folder with the Fashion-MNIST (or MNIST) IDX files, .gz or plain (gpt: a text file or a folder of them)")
      ->capture_default_str();
  cmd->add_option("--limit", a->limit, "train on the first N images (0: all of them)");
  cmd->add_option("--save", a->save, "write a checkpoint (safetensors) after each epoch");
  cmd->add_option("--resume", a->resume, "continue from a checkpoint written by --save");
  cmd->add_option("--metrics", a->metrics, "per-step metrics: CSV if the name ends in .csv, else JSON lines");
  cmd->add_option("--plot", a->plot, "PNG of training loss and loss scale over steps (needs gnuplot)");
  cmd->add_option("--gpus", a->gpus,
                  "data-parallel over N GPUs (NCCL, one process each; --batch-size is the global batch). Started "
                  "by itself or by ampgrad-run -n N")
      ->check(CLI::Range(1, 1024));
  cmd->callback([a, cmd] {
    for (const CLI::Option* o : cmd->get_options())
      if (o->count() > 0) a->given.push_back(o->get_name());
    run_train(*a);
  });
}

}  // namespace ampgrad::cli
