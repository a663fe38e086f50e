// Distributed training: rendezvous, sampler, launcher and the scaler's found-inf agreement on
// the CPU; the NCCL process group and DistributedDataParallel on CUDA, with a worker case
// that ampgrad-run starts once per GPU.
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "common.h"
#include <ampgrad/distributed/launch.h>

namespace dist = ag::distributed;

namespace {

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~EnvVar() {
    if (had_) ::setenv(name_, old_.c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// Two layers, of which forward uses only the first: DDP must name the unused one.
struct HalfUsed : ag::nn::Module {
  std::shared_ptr<ag::nn::Linear> used = register_module("used", std::make_shared<ag::nn::Linear>(12, 5));
  std::shared_ptr<ag::nn::Linear> idle = register_module("idle", std::make_shared<ag::nn::Linear>(12, 5));
  ag::Tensor forward(const ag::Tensor& x) override { return (*used)(x); }
};

std::shared_ptr<ag::nn::Sequential> small_mlp(ag::Device dev) {
  auto net = std::make_shared<ag::nn::Sequential>();
  net->push_back(std::make_shared<ag::nn::Linear>(12, 16));
  net->push_back(std::make_shared<ag::nn::ReLU>());
  net->push_back(std::make_shared<ag::nn::Linear>(16, 5));
  net->to(dev);
  return net;
}

}  // namespace

TEST_CASE("distributed: options come from the environment, with clear errors", "[distributed]") {
  {
    EnvVar r("RANK", "2"), w("WORLD_SIZE", "4"), l("LOCAL_RANK", "1"), a("MASTER_ADDR", "node7"),
        p("MASTER_PORT", "31234");
    const dist::Options o = dist::options_from_env();
    CHECK(o.rank == 2);
    CHECK(o.world_size == 4);
    CHECK(o.local_rank == 1);
    CHECK(o.master_addr == "node7");
    CHECK(o.master_port == 31234);
  }
  {
    EnvVar r("RANK", nullptr), w("WORLD_SIZE", "2");
    CHECK_THROWS_WITH_SUBSTR(dist::options_from_env(), "RANK is not set");
  }
  {
    EnvVar r("RANK", "2"), w("WORLD_SIZE", "2");
    CHECK_THROWS_WITH_SUBSTR(dist::options_from_env(), "RANK 2 is not below WORLD_SIZE 2");
  }
  {
    EnvVar r("RANK", "x1"), w("WORLD_SIZE", "2");
    CHECK_THROWS_WITH_SUBSTR(dist::options_from_env(), "RANK='x1' is not a non-negative integer");
  }
}

TEST_CASE("distributed: rank 0 hands its payload to every rank over TCP", "[distributed]") {
  dist::Options o;
  o.world_size = 3;
  o.master_port = dist::free_port();
  o.timeout = std::chrono::seconds(30);
  const std::vector<uint8_t> payload{7, 1, 2, 250, 0, 9};
  std::vector<std::vector<uint8_t>> got(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> ranks;
  for (int r = 2; r >= 0; --r) {  // rank 0 last: the others must wait for it
    ranks.emplace_back([&, r] {
      dist::Options mine = o;
      mine.rank = r;
      try {
        got[static_cast<size_t>(r)] = dist::broadcast_from_root(mine, r == 0 ? payload : std::vector<uint8_t>{});
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
    CHECK(got[static_cast<size_t>(r)] == payload);
  }
  // A rank that never comes is named, not waited for forever.
  o.world_size = 2;
  o.rank = 0;
  o.master_port = dist::free_port();
  o.timeout = std::chrono::seconds(1);
  CHECK_THROWS_WITH_SUBSTR(dist::broadcast_from_root(o, payload), "waiting on port");
}

TEST_CASE("distributed: DistributedSampler shards one global order across ranks", "[distributed]") {
  std::vector<int64_t> order(10);
  for (int64_t i = 0; i < 10; ++i) order[static_cast<size_t>(i)] = (7 * i + 3) % 10;  // any permutation
  std::multiset<int64_t> all;
  for (int r = 0; r < 3; ++r) {
    const std::vector<int64_t> mine = dist::DistributedSampler(3, r).shard(order);
    REQUIRE(mine.size() == 4);  // 10 padded to 12
    for (size_t k = 0; k < mine.size(); ++k) CHECK(mine[k] == order[(static_cast<size_t>(r) + 3 * k) % 10]);
    all.insert(mine.begin(), mine.end());
  }
  for (int64_t v = 0; v < 10; ++v) CHECK(all.count(v) >= 1);
  CHECK(dist::DistributedSampler(3, 1, /*drop_last=*/true).shard(order).size() == 3);
  // Two ranks with batch 2 each see, at every step, the examples of one process's batch of 4.
  for (int64_t step = 0; step < 2; ++step) {
    std::set<int64_t> together, single(order.begin() + step * 4, order.begin() + step * 4 + 4);
    for (int r = 0; r < 2; ++r) {
      const std::vector<int64_t> mine = dist::DistributedSampler(2, r).shard(order);
      together.insert(mine.begin() + step * 2, mine.begin() + step * 2 + 2);
    }
    CHECK(together == single);
  }
  CHECK_THROWS_WITH_SUBSTR(dist::DistributedSampler(2, 2), "rank 2 is not in [0, world size 2)");
  // A rank's epoch has the batches of its shard, not of the whole dataset (ampgrad train
  // --gpus 2 once indexed past its shard).
  ag::data::Dataset ds{ag::arange(0, 10, 1, ag::kFloat32).view({10, 1}), ag::arange(0, 10, 1, ag::kInt64)};
  ag::data::DataLoader loader(ds, ag::data::DataLoaderOptions(2));
  for (int r = 0; r < 2; ++r) {
    const std::vector<int64_t> mine = dist::DistributedSampler(2, r).shard(order);
    const ag::data::Epoch epoch(loader, mine);
    REQUIRE(epoch.size() == 3);  // 5 examples in batches of 2
    std::vector<int64_t> seen;
    for (const ag::data::Batch& b : epoch)
      for (int64_t v : b.labels.to_vector<int64_t>()) seen.push_back(v);
    CHECK(seen == mine);
  }
}

TEST_CASE("distributed: ampgrad-run's launcher sets each rank's environment and stops the rest on a failure",
          "[distributed]") {
  CHECK(dist::launch_local(3, {"sh", "-c",
                               "test \"$RANK\" = \"$LOCAL_RANK\" && test \"$RANK\" -lt \"$WORLD_SIZE\" && "
                               "test \"$WORLD_SIZE\" = 3 && test -n \"$MASTER_PORT\" && test \"$MASTER_ADDR\" = 127.0.0.1"}) ==
        0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(dist::launch_local(3, {"sh", "-c", "if [ \"$RANK\" = 1 ]; then exit 3; fi; sleep 60"}) == 3);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));  // the sleepers were stopped
  CHECK(dist::launch_local(1, {"/nonexistent/ampgrad-worker"}) == 127);
}

TEST_CASE("distributed: post-accumulate hooks see the accumulated gradient", "[distributed][autograd]") {
  ag::Tensor w = ag::full({3}, 2.0).requires_grad_();
  std::vector<double> seen;
  w.register_post_accumulate_grad_hook([&](const ag::Tensor& leaf) { seen.push_back(leaf.grad().sum().item<double>()); });
  (w * 3).sum().backward();
  (w * 1).sum().backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == 9.0);
  CHECK(seen[1] == 12.0);
  CHECK_THROWS_WITH_SUBSTR(ag::full({2}, 1.0).register_post_accumulate_grad_hook([](const ag::Tensor&) {}),
                           "expected a leaf that requires grad");
}

TEST_CASE("distributed: callbacks queued during backward run once, after its last node", "[distributed][autograd]") {
  ag::Tensor a = ag::full({2}, 1.0).requires_grad_(), b = ag::full({2}, 2.0).requires_grad_();
  std::vector<std::string> events;
  for (auto* t : {&a, &b})
    t->register_post_accumulate_grad_hook([&, t](const ag::Tensor&) {
      events.push_back(t == &a ? "a" : "b");
      if (events.size() == 1) ag::autograd::queue_callback([&] { events.push_back("end"); });
    });
  (a * b).sum().backward();
  REQUIRE(events.size() == 3);
  CHECK(events.back() == "end");
  CHECK_THROWS_WITH_SUBSTR(ag::autograd::queue_callback([] {}), "no backward is running");
}

TEST_CASE("distributed: the found-inf reducer makes a scaler skip a step another rank saw overflow",
          "[distributed][amp]") {
  // What init_process_group installs is an all-reduce with MAX; here the "other rank" says inf.
  ag::amp::set_found_inf_reducer([](const ag::Tensor& found_inf) {
    ag::Tensor flag = found_inf;
    flag.fill_(1.0);
  });
  struct Uninstall {
    ~Uninstall() { ag::amp::set_found_inf_reducer(nullptr); }
  } uninstall;
  ag::manual_seed(3);
  ag::Tensor p = ag::randn({4}).requires_grad_();
  const std::vector<double> before = p.to_vector<double>();
  ag::optim::SGD opt({p}, ag::optim::SGDOptions(0.1));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(1024));
  scaler.scale((p * p).sum()).backward();  // finite gradients here
  scaler.step(opt);
  scaler.update();
  CHECK(p.to_vector<double>() == before);  // skipped, as every rank does
  CHECK(scaler.get_scale() == 512.0);
  CHECK(scaler.last_decision().found_inf);
}

TEST_CASE("distributed: a CPU-only build refuses NCCL process groups clearly", "[distributed]") {
  if (ag::cuda::is_available()) return;  // the CUDA cases below cover a real group
  dist::Options o;
  o.master_port = dist::free_port();
  CHECK_THROWS_WITH_SUBSTR(std::make_unique<dist::ProcessGroup>(o), "CUDA");
}

// The worker: run by the next case through ampgrad-run, once per GPU (hidden from a plain run).
TEST_CASE("distributed worker: DDP averages gradients, replicas agree, an inf on one rank skips the step on all",
          "[.][ddp-worker]") {
  dist::ProcessGroup& pg = dist::init_process_group();
  const int rank = pg.rank(), world = pg.world_size();
  const ag::Device dev = pg.device();
  ag::manual_seed(100 + static_cast<uint64_t>(rank));  // different weights per rank: DDP must broadcast rank 0's
  auto net = small_mlp(dev);
  dist::DistributedDataParallel ddp(net, pg, dist::DDPOptions{0.0002});  // 200-byte buckets: several of them
  CHECK(ddp.num_buckets() > 1);
  auto agree = [&](const ag::Tensor& t) {  // every rank holds the same values
    ag::Tensor hi = t.detach().clone(), lo = -t.detach();
    pg.all_reduce(hi, dist::ReduceOp::Max);
    pg.all_reduce(lo, dist::ReduceOp::Max);
    return hi.cpu().to_vector<double>() == t.cpu().to_vector<double>() &&
           (-lo).cpu().to_vector<double>() == t.cpu().to_vector<double>();
  };
  for (const ag::Tensor& p : net->parameters()) CHECK(agree(p));
  // Each rank its own data; the gradients must be the mean of the ranks' own gradients.
  auto ref = small_mlp(dev);
  ref->load_state_dict(net->state_dict());
  ag::optim::SGD opt(net->parameters(), ag::optim::SGDOptions(0.05));
  ag::amp::GradScaler scaler(ag::amp::GradScalerOptions().init_scale(256));
  for (int step = 0; step < 2; ++step) {
    ag::manual_seed(1000 + static_cast<uint64_t>(10 * rank + step));
    ag::Tensor x = ag::randn({8, 12}, ag::TensorOptions().device(dev));
    ag::Tensor y = (ag::rand({8}, ag::TensorOptions().device(dev)) * 5.0).to(ag::kInt64);
    opt.zero_grad(false);
    ref->zero_grad();
    scaler.scale(ag::cross_entropy(ddp(x), y)).backward();
    ag::cross_entropy((*ref)(x), y).backward();
    const std::vector<ag::Tensor> ps = net->parameters(), rs = ref->parameters();
    for (size_t i = 0; i < ps.size(); ++i) {
      ag::Tensor mean = rs[i].grad().clone();
      pg.all_reduce(mean, dist::ReduceOp::Avg);
      const std::vector<double> got = (ps[i].grad() / scaler.get_scale()).cpu().to_vector<double>(),
                                want = mean.cpu().to_vector<double>();
      REQUIRE(got.size() == want.size());
      for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).margin(1e-6).epsilon(1e-4));
    }
    std::vector<std::vector<double>> before;
    for (const ag::Tensor& p : ps) before.push_back(p.cpu().to_vector<double>());
    // Step 1: an inf in one rank's gradient (the last rank), after the reduction.
    if (step == 1 && rank == world - 1) scaler.inject_fault(ps[0], /*at_step=*/1);
    scaler.step(opt);
    scaler.update();
    CHECK(scaler.last_decision().found_inf == (step == 1));
    for (size_t i = 0; i < ps.size(); ++i) {
      if (step == 1) CHECK(ps[i].cpu().to_vector<double>() == before[i]);  // skipped on every rank
      else CHECK(ps[i].cpu().to_vector<double>() != before[i]);
    }
    ref->load_state_dict(net->state_dict());
    for (const ag::Tensor& p : net->parameters()) CHECK(agree(p));
  }
  {
    auto half = std::make_shared<HalfUsed>();
    half->to(dev);
    dist::DistributedDataParallel unused(half, pg);
    ag::Tensor x = ag::randn({4, 12}, ag::TensorOptions().device(dev));
    CHECK_THROWS_WITH_SUBSTR(unused(x).sum().backward(), "gave no gradient to 'idle.weight', 'idle.bias'");
  }
  dist::destroy_process_group();
}

TEST_CASE("distributed: the DDP worker under ampgrad-run on every GPU of this machine", "[cuda]") {
  if (skip_without_cuda()) return;
  if (!dist::nccl_available()) {
    WARN("libnccl.so.2 cannot be opened (set AMPGRAD_NCCL_LIBRARY): skipped");
    return;
  }
  const int n = ag::cuda::device_count();
  const std::string self = "/proc/self/exe";
  INFO("ranks: " << n << " (one per visible GPU)");
  CHECK(dist::launch_local(n, {self, "[ddp-worker]"}) == 0);
  if (n < 2) WARN("one GPU: the DDP worker ran with world size 1; the multi-rank agreement checks need 2+ GPUs");
}
