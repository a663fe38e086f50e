// The `ampgrad` command: ops, explain, bench (tiny CPU sweeps), train (short CPU runs,
// resume), and bad arguments. Runs the built binary; JSON outputs are parsed.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Run {
  int status = 0;
  std::string out;  // stdout and stderr together
};

Run run(const std::string& args) {
  Run r;
  // The binary built beside this test, or $AMPGRAD_CLI where the binaries were carried elsewhere.
  const char* env = std::getenv("AMPGRAD_CLI");
  // A timeout, so that a hang (a rank waiting in NCCL) fails the test instead of stalling it.
  const std::string cmd = "timeout 300 " + std::string(env && *env ? env : AMPGRAD_CLI_PATH) + " " + args + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / "ampgrad_test_cli";
  fs::create_directories(d);
  return d / name;
}

const char* kData = "/usr/share/datasets/fashion-mnist";

// Per-step losses of a CSV metrics file, by epoch.
std::map<int, std::vector<double>> losses_by_epoch(const fs::path& csv) {
  std::map<int, std::vector<double>> out;
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);  // header
  while (std::getline(f, line)) {
    int epoch = 0;
    long step = 0;
    double loss = 0;
    REQUIRE(std::sscanf(line.c_str(), "%d,%ld,%lf", &epoch, &step, &loss) == 3);
    out[epoch].push_back(loss);
  }
  return out;
}

}  // namespace

TEST_CASE("ampgrad ops lists every registered op with its category", "[cli]") {
  Run r = run("ops --json");
  REQUIRE(r.status == 0);
  json ops = json::parse(r.out);
  REQUIRE(ops.size() == ag::op_registry().size());
  std::set<std::string> names;
  for (const auto& e : ops) names.insert(e["op"].get<std::string>());
  for (const ag::OpInfo* op : ag::op_registry()) {
    INFO(op->name);
    CHECK(names.count(std::string(op->name)) == 1);
  }
  Run table = run("ops");
  CHECK(table.status == 0);
  CHECK_THAT(table.out, Catch::Contains("binary_cross_entropy") && Catch::Contains("banned") &&
                            Catch::Contains("tensor cores"));
}

TEST_CASE("ampgrad explain lists the ops that ran and the scaler's decision", "[cli]") {
  Run r = run("explain --device cpu --json --data /nonexistent --batch-size 8");
  REQUIRE(r.status == 0);
  json e = json::parse(r.out);
  std::vector<std::string> ops;
  for (const auto& o : e["ops"]) ops.push_back(o["op"].get<std::string>());
  // Linear + ReLU run as one op (Note [Linear + ReLU]).
  CHECK(ops == std::vector<std::string>{"reshape", "linear_relu", "linear", "cross_entropy"});
  CHECK(e["ops"][1]["output_dtype"] == "float16");
  CHECK(e["ops"][3]["output_dtype"] == "float32");
  CHECK(e["ops"][3]["read_16bit"] == 1);
  CHECK(e["scaler"]["found_inf"] == false);
  CHECK(e["scaler"]["step_taken"] == true);
  CHECK(e["gradients"].size() == 4);
  Run bad = run("explain --device cpu --json --data /nonexistent --batch-size 8 --inject-inf 1.bias");
  REQUIRE(bad.status == 0);
  json b = json::parse(bad.out);
  CHECK(b["scaler"]["found_inf"] == true);
  CHECK(b["scaler"]["step_taken"] == false);
  CHECK(b["scaler"]["next_scale"].get<double>() == b["scaler"]["scale"].get<double>() / 2);
  CHECK(b["gradients"][1]["nonfinite"] == true);
  Run typo = run("explain --device cpu --data /nonexistent --inject-inf nope");
  CHECK(typo.status != 0);
  CHECK_THAT(typo.out, Catch::Contains("no parameter named 'nope'") && Catch::Contains("1.weight"));
}

TEST_CASE("ampgrad explain --anomaly names the op whose gradient overflowed first, and by how much", "[cli][anomaly]") {
  Run r = run("explain --device cpu --json --data /nonexistent --batch-size 8 --anomaly --init-scale 1e7");
  REQUIRE(r.status == 0);
  json e = json::parse(r.out);
  CHECK(e["scaler"]["step_taken"] == false);
  const json& a = e["anomaly"];
  REQUIRE(a["overflowed"] == true);
  // cross_entropy reads the float16 logits as they are and writes their float16 gradient:
  // 1e7 / 8 times (softmax - one hot) is past 65504 (Note [Anomaly detection]).
  CHECK(a["op"] == "cross_entropy");
  CHECK(a["backward"] == true);
  CHECK(a["position"] == 4);  // the trace's row
  CHECK(e["ops"][3]["op"] == "cross_entropy");
  CHECK(a["input"] == 0);
  CHECK(a["tensor"] == "float16 [8, 10]");
  CHECK(a["inf"].get<int64_t>() > 0);
  CHECK(a["wide_dtype"] == "float32");
  CHECK(a["wide_max_abs"].get<double>() > 65504.0);
  CHECK(a["wide_max_abs"].get<double>() < 1e7);
  CHECK(a["reached"].size() == 4);
  Run plain = run("explain --device cpu --data /nonexistent --batch-size 8 --anomaly");
  REQUIRE(plain.status == 0);
  CHECK_THAT(plain.out, Catch::Contains("No gradient held inf or NaN"));
  Run both = run("explain --device cpu --data /nonexistent --anomaly --inject-inf 1.bias");
  CHECK(both.status != 0);
}

TEST_CASE("ampgrad explain --amp fp8 shows each tensor's scale, amax, saturated and flushed values", "[cli][fp8]") {
  Run r = run("explain --device cpu --json --amp fp8 --data /nonexistent --batch-size 16");
  REQUIRE(r.status == 0);
  json e = json::parse(r.out);
  CHECK(e["amp_dtype"] == "float8_e4m3fn");
  REQUIRE(e["steps"].size() == 2);
  const json& ops = e["steps"][0]["ops"];
  REQUIRE(ops.size() == 4);
  CHECK(ops[1]["op"] == "linear_relu");
  CHECK_THAT(ops[1]["path"].get<std::string>(), Catch::Contains("FP8 GEMM") && Catch::Contains("delayed"));
  CHECK(ops[2]["op"] == "linear");  // N = 10: not a multiple of 16
  CHECK_THAT(ops[2]["path"].get<std::string>(), Catch::Contains("bfloat16, not FP8"));
  auto find = [](const json& step, const std::string& role) {
    for (const auto& t : step["tensors"])
      if (t["role"] == role) return t;
    FAIL("no tensor with role " << role);
    return json();
  };
  const json& s0 = e["steps"][0];
  const json& s1 = e["steps"][1];
  REQUIRE(s0["tensors"].size() == 3);  // 1.weight's input, weight and output gradient
  for (const auto& t : s0["tensors"]) {
    CHECK(t["parameter"] == "1.weight");
    CHECK(t["scale"].get<double>() == 1.0);  // no history yet
  }
  const json in0 = find(s0, "input"), in1 = find(s1, "input");
  CHECK(in0["quantized"] == 16 * 784);
  CHECK(find(s0, "weight")["quantized"] == 256 * 784);
  const json g0 = find(s0, "grad_output"), g1 = find(s1, "grad_output");
  CHECK(g0["dtype"] == "float8_e5m2");
  CHECK(g0["quantized"] == 16 * 256);
  // Step 2 quantizes the same batch with the scale step 1's amax gave: its amax lands on 448.
  CHECK(in1["amax"].get<double>() == Approx(in0["amax"].get<double>()));
  CHECK(in1["scale"].get<double>() == Approx(448.0 / in0["amax"].get<double>()));
  CHECK(in1["amax"].get<double>() * in1["scale"].get<double>() == Approx(448.0).epsilon(1e-5));
  CHECK(in1["saturated"].get<int64_t>() <= 1);
  CHECK(g1["scale"].get<double>() == Approx(57344.0 / g0["amax"].get<double>()));
  CHECK(g1["scale"].get<double>() > 1000.0);  // the gradients are small: scale 1 wasted e5m2's range
  CHECK(g1["flushed"].get<int64_t>() <= g0["flushed"].get<int64_t>());
  Run text = run("explain --device cpu --amp fp8 --data /nonexistent --batch-size 16");
  REQUIRE(text.status == 0);
  CHECK_THAT(text.out, Catch::Contains("Step 2") && Catch::Contains("float8_e5m2") && Catch::Contains("amax x scale"));
  Run bad = run("explain --device cpu --amp fp8 --data /nonexistent --anomaly");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("without"));
}

TEST_CASE("gradient health on a crafted gradient", "[cli]") {
  // scale 1024; true gradients: 0, 1e-6, 1e-5, 1e-3, 1, 2 (the last two scaled past 65504? no: 2048)
  ag::Tensor scaled = ag::tensor({0.0f, 1e-6f * 1024, 1e-5f * 1024, 1e-3f * 1024, 1.0f * 1024, 70.0f * 1024,
                                  1e-8f * 1024, -3e-5f * 1024});
  auto h = ag::amp::grad_health(scaled, 1024);
  CHECK(h.numel == 8);
  CHECK(h.zero == Approx(1.0 / 8));
  CHECK(h.underflow_unscaled == Approx(4.0 / 8));  // 1e-6, 1e-5, 1e-8, 3e-5 are below 6.1e-5
  CHECK(h.underflow_scaled == Approx(1.0 / 8));    // only 1e-8 * 1024 stays below it
  CHECK(h.max_scaled == Approx(70.0 * 1024));      // above 65504: the scaler would back off
  CHECK_FALSE(h.nonfinite);
  CHECK(ag::amp::grad_health(ag::tensor({1.f, INFINITY}), 1).nonfinite);
}

TEST_CASE("ampgrad bench runs a tiny sweep on the CPU and writes JSON", "[cli]") {
  const fs::path out = scratch("bench.json");
  Run r = run("bench all --quick --device cpu --reps 2 --json " + out.string());
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("running on the CPU"));
  json rows = json::parse(slurp(out));
  std::set<std::string> suites;
  for (const auto& row : rows) {
    suites.insert(row["suite"].get<std::string>());
    CHECK(row["device"] == "cpu");
    if (row["suite"] == "matmul") {
      CHECK(row["tflops"].get<double>() > 0);
      CHECK(row["rel_error"].get<double>() > 0);
      CHECK(row["rel_error"].get<double>() < (row["precision"] == "f32" ? 1e-5 : 1e-1));
      CHECK(row.contains("pct_of_peak"));
    }
    if (row["suite"] == "conv") CHECK(row["fwd_ms"].get<double>() > 0);
    if (row["suite"] == "step") {
      CHECK(row["images_per_s"].get<double>() > 0);
      // On the CPU the host does all the work: queuing a step is the step.
      CHECK(row["host_ms"].get<double>() > 0);
      CHECK(row["host_ms"].get<double>() == row["ms"].get<double>());
    }
    if (row["suite"] == "optim") CHECK(row["gb_per_s"].get<double>() > 0);
    if (row["suite"] == "attention") {
      CHECK(row["ms"].get<double>() > 0);
      CHECK(row["rel_error"].get<double>() > 0);
      CHECK(row["rel_error"].get<double>() < 3e-2);  // float16 and bfloat16 against float64
      CHECK(row["path"] == "math path: not a CUDA tensor");
    }
  }
  CHECK(suites == std::set<std::string>{"matmul", "conv", "step", "optim", "attention"});
}

TEST_CASE("ampgrad train: a short CPU run lowers the loss, and resume continues identically", "[cli]") {
  if (!fs::exists(kData)) {
    std::printf("[train] skipped: no Fashion-MNIST at %s (scripts/setup.sh installs it)\n", kData);
    return;
  }
  // A constant schedule: with cosine, the learning rate depends on --epochs, which differs
  // between the interrupted run and the full one.
  const std::string common =
      std::string("train --model mlp --device cpu --amp bf16 --limit 512 --batch-size 64 --lr 0.002 --schedule constant --data ") + kData;
  const fs::path full = scratch("full.csv"), part = scratch("part.csv"), ckpt = scratch("ckpt.safetensors");
  fs::remove(ckpt);
  Run a = run(common + " --epochs 3 --metrics " + full.string());
  REQUIRE(a.status == 0);
  CHECK_THAT(a.out, Catch::Contains("test accuracy"));
  auto la = losses_by_epoch(full);
  REQUIRE(la.size() == 3);
  const double first = (la[1][0] + la[1][1]) / 2, last = (la[3][6] + la[3][7]) / 2;
  CHECK(last < first * 0.7);
  // Two epochs and a checkpoint, then resume for the third.
  Run b1 = run(common + " --epochs 2 --save " + ckpt.string() + " --metrics " + part.string());
  REQUIRE(b1.status == 0);
  Run b2 = run(common + " --epochs 3 --resume " + ckpt.string() + " --metrics " + part.string());
  REQUIRE(b2.status == 0);
  CHECK_THAT(b2.out, Catch::Contains("resumed from"));
  auto lb = losses_by_epoch(part);
  REQUIRE(lb.size() == 3);
  CHECK(lb[3] == la[3]);  // bit-identical third epoch
}

TEST_CASE("ampgrad train --model gpt learns from real text, and ampgrad sample continues a prompt", "[cli][gpt]") {
  const char* text = "/usr/share/games/fortunes/fortunes";
  if (!fs::exists(text)) {
    std::printf("[gpt] skipped: no %s (scripts/setup.sh installs Debian's fortunes)\n", text);
    return;
  }
  const fs::path ckpt = scratch("gpt.safetensors"), metrics = scratch("gpt.jsonl");
  const Run t = run(std::string("train --model gpt --device cpu --steps 60 --data ") + text + " --save " +
                    ckpt.string() + " --metrics " + metrics.string());
  INFO(t.out);
  REQUIRE(t.status == 0);
  CHECK_THAT(t.out, Catch::Contains("unigram entropy"));
  // The validation loss at least 0.1 below what the character frequencies alone give.
  CHECK_THAT(t.out, Catch::Contains("the model uses its context"));
  std::ifstream m(metrics);
  std::string line;
  std::vector<double> val;
  while (std::getline(m, line)) val.push_back(json::parse(line).at("validation_loss").get<double>());
  REQUIRE(val.size() == 10);
  CHECK(val.back() < val.front());

  const Run s = run("sample --device cpu --checkpoint " + ckpt.string() + " --prompt 'The ' --length 40 --seed 3");
  INFO(s.out);
  REQUIRE(s.status == 0);
  CHECK(s.out.rfind("The ", 0) == 0);
  CHECK(s.out.size() >= 4 + 40);
  CHECK(run("sample --device cpu --checkpoint " + ckpt.string() + " --prompt 'The ' --length 40 --seed 3").out == s.out);

  const Run bad = run("sample --device cpu --checkpoint " + ckpt.string() + " --prompt 'a@b'");
  CHECK(bad.status != 0);
  CHECK_THAT(bad.out, Catch::Contains("\"@\" (byte 64)") && Catch::Contains("position 1") &&
                          Catch::Contains("not in the model's vocabulary"));
  const Run wrong = run("train --model gpt --device cpu --resume " + ckpt.string());
  CHECK(wrong.status != 0);
  CHECK_THAT(wrong.out, Catch::Contains("--resume is for the Fashion-MNIST models"));
  const Run steps = run("train --model mlp --device cpu --steps 5");
  CHECK(steps.status != 0);
  CHECK_THAT(steps.out, Catch::Contains("--steps is for --model gpt"));
}

TEST_CASE("ampgrad train: killed (SIGKILL) at any moment, --resume continues bit-exactly", "[cli]") {
  if (!fs::exists(kData)) {
    std::printf("[train] skipped: no Fashion-MNIST at %s (scripts/setup.sh installs it)\n", kData);
    return;
  }
  const char* env = std::getenv("AMPGRAD_CLI");
  const std::string cli = env && *env ? env : AMPGRAD_CLI_PATH;
  const std::string common = std::string(" train --model mlp --device cpu --amp bf16 --limit 512 --batch-size 64 "
                                         "--lr 0.002 --schedule constant --epochs 3 --data ") + kData;
  const fs::path full = scratch("kill_full.csv");
  REQUIRE(run(common + " --metrics " + full.string()).status == 0);
  const auto want = losses_by_epoch(full);
  REQUIRE(want.size() == 3);
  int compared = 0;
  // Killed at moments after the first epoch's checkpoint appeared (start-up and data loading
  // take most of a short run): in the second epoch, in the third, while saving.
  for (int after_ms : {0, 30, 90, 200}) {
    const fs::path ckpt = scratch("killed.safetensors"), resumed = scratch("kill_resumed.csv");
    fs::remove(ckpt);
    fs::remove(resumed);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      const std::string cmd = "exec " + cli + common + " --save " + ckpt.string() + " > /dev/null 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    int status = 0;
    bool reaped = false;
    for (int waited = 0; !fs::exists(ckpt) && waited < 60000 && !reaped; waited += 2) {
      reaped = ::waitpid(pid, &status, WNOHANG) == pid;
      ::usleep(2000);
    }
    if (!reaped) {
      ::usleep(static_cast<useconds_t>(after_ms) * 1000);
      ::kill(pid, SIGKILL);
      REQUIRE(::waitpid(pid, &status, 0) == pid);
    }
    INFO("killed " << after_ms << " ms after the first checkpoint");
    if (!fs::exists(ckpt)) continue;  // killed before the first epoch's checkpoint
    // A resumed run appends to its run's metrics (no header of its own).
    std::ofstream(resumed) << "epoch,step,loss,scale,skipped,lr,images_per_s\n";
    const Run r = run(common + " --resume " + ckpt.string() + " --metrics " + resumed.string());
    REQUIRE(r.status == 0);
    for (const auto& [epoch, losses] : losses_by_epoch(resumed)) {
      CHECK(losses == want.at(epoch));  // the epochs after the checkpoint, bit-identical
      ++compared;
    }
  }
  CHECK(compared > 0);
}

TEST_CASE("ampgrad train: bad arguments give clear messages and exit codes", "[cli]") {
  Run model = run("train --model resnet");
  CHECK(model.status != 0);
  CHECK_THAT(model.out, Catch::Contains("--model") && Catch::Contains("resnet"));
  Run lr = run("train --lr -1");
  CHECK(lr.status != 0);
  CHECK_THAT(lr.out, Catch::Contains("--lr"));
  Run data = run("train --device cpu --data /nonexistent/dir");
  CHECK(data.status == 1);
  CHECK_THAT(data.out, Catch::Contains("error:") && Catch::Contains("/nonexistent/dir"));
  Run master = run("train --device cpu --amp off --master-weights");
  CHECK(master.status == 1);
  CHECK_THAT(master.out, Catch::Contains("--master-weights needs --amp fp16 or bf16"));
  if (!ag::cuda::is_available()) {
    Run cuda = run("train --device cuda");
    CHECK(cuda.status == 1);
    CHECK_THAT(cuda.out, Catch::Contains("no CUDA device"));
  }
  Run none = run("");
  CHECK(none.status != 0);
}

TEST_CASE("ampgrad train --gpus: data-parallel training matches one process with the same global batch", "[cuda]") {
  if (skip_without_cuda()) return;
  if (!ag::distributed::nccl_available()) {
    WARN("libnccl.so.2 cannot be opened (set AMPGRAD_NCCL_LIBRARY): skipped");
    return;
  }
  const char* env = std::getenv("AMPGRAD_TEST_DATA");
  const std::string data = env && *env ? env : kData;
  if (!fs::exists(data)) {
    WARN("no Fashion-MNIST at " << data << " (set AMPGRAD_TEST_DATA): skipped");
    return;
  }
  const std::string common =
      " --model mlp --epochs 1 --limit 4096 --batch-size 256 --amp off --optimizer sgd --data " + data;
  const fs::path one_csv = scratch("gpus1.csv"), two_csv = scratch("gpus2.csv");
  // One rank: a process group of one over NCCL, DistributedDataParallel, end to end.
  const Run one = run("train --gpus 1" + common + " --metrics " + one_csv.string());
  INFO(one.out);
  REQUIRE(one.status == 0);
  CHECK_THAT(one.out, Catch::Contains("1 GPUs (DistributedDataParallel, NCCL)"));
  const auto l1 = losses_by_epoch(one_csv);
  REQUIRE(l1.at(1).size() == 16);
  if (ag::cuda::device_count() < 2) {
    WARN("one GPU: --gpus 2 against --gpus 1 needs a second GPU; skipped");
    return;
  }
  // Two ranks with 128 images each per step: the same global batches, the same losses.
  const Run two = run("train --gpus 2" + common + " --metrics " + two_csv.string());
  INFO(two.out);
  REQUIRE(two.status == 0);
  const auto l2 = losses_by_epoch(two_csv);
  REQUIRE(l2.at(1).size() == l1.at(1).size());
  for (size_t i = 0; i < l1.at(1).size(); ++i) CHECK(l2.at(1)[i] == Approx(l1.at(1)[i]).epsilon(1e-3));
}
