// The loss modules, as torch.nn's: each holds its options (public fields, as PyTorch's module
// attributes) and calls its op (ops/nn_ops.h). The class weights of CrossEntropyLoss, NLLLoss
// and MultiMarginLoss are buffers, so they move with the module and are saved in its state_dict.
#pragma once

#include <ampgrad/nn/module.h>
#include <ampgrad/ops/nn_ops.h>

namespace ampgrad::nn {

// A loss of an input and a target: loss(input, target).
class Loss : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
};

// A loss of two inputs and a target: loss(input1, input2, target) (MarginRankingLoss,
// CosineEmbeddingLoss) or of three inputs (TripletMarginLoss: anchor, positive, negative).
class Loss3 : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& a, const Tensor& b, const Tensor& c) = 0;
  Tensor operator()(const Tensor& a, const Tensor& b, const Tensor& c) { return forward(a, b, c); }
};

class L1Loss : public Loss {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : Loss("L1Loss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override { return l1_loss(input, target, reduction); }
  Reduction reduction;
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : Loss("MSELoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override { return mse_loss(input, target, reduction); }
  Reduction reduction;
};

class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::Mean, double beta = 1.0)
      : Loss("SmoothL1Loss"), reduction(reduction), beta(beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return smooth_l1_loss(input, target, reduction, beta);
  }
  Reduction reduction;
  double beta;
};

class HuberLoss : public Loss {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::Mean, double delta = 1.0)
      : Loss("HuberLoss"), reduction(reduction), delta(delta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return huber_loss(input, target, reduction, delta);
  }
  Reduction reduction;
  double delta;
};

class SoftMarginLoss : public Loss {
 public:
  explicit SoftMarginLoss(Reduction reduction = Reduction::Mean) : Loss("SoftMarginLoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return soft_margin_loss(input, target, reduction);
  }
  Reduction reduction;
};

class KLDivLoss : public Loss {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::Mean, bool log_target = false)
      : Loss("KLDivLoss"), reduction(reduction), log_target(log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return kl_div(input, target, reduction, log_target);
  }
  Reduction reduction;
  bool log_target;
};

class PoissonNLLLoss : public Loss {
 public:
  explicit PoissonNLLLoss(bool log_input = true, bool full = false, double eps = 1e-8,
                          Reduction reduction = Reduction::Mean)
      : Loss("PoissonNLLLoss"), log_input(log_input), full(full), eps(eps), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return poisson_nll_loss(input, target, log_input, full, eps, reduction);
  }
  bool log_input, full;
  double eps;
  Reduction reduction;
};

class HingeEmbeddingLoss : public Loss {
 public:
  explicit HingeEmbeddingLoss(double margin = 1.0, Reduction reduction = Reduction::Mean)
      : Loss("HingeEmbeddingLoss"), margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return hinge_embedding_loss(input, target, margin, reduction);
  }
  double margin;
  Reduction reduction;
};

class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::Mean) : Loss("BCEWithLogitsLoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return binary_cross_entropy_with_logits(input, target, reduction);
  }
  Reduction reduction;
};

class BCELoss : public Loss {
 public:
  explicit BCELoss(Reduction reduction = Reduction::Mean) : Loss("BCELoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return binary_cross_entropy(input, target, reduction);
  }
  Reduction reduction;
};

class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(int64_t ignore_index = -100, double label_smoothing = 0.0)
      : CrossEntropyLoss(Tensor(), ignore_index, Reduction::Mean, label_smoothing) {}
  explicit CrossEntropyLoss(Tensor weight, int64_t ignore_index = -100, Reduction reduction = Reduction::Mean,
                            double label_smoothing = 0.0)
      : Loss("CrossEntropyLoss"), ignore_index(ignore_index), reduction(reduction), label_smoothing(label_smoothing) {
    if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
  }
  Tensor weight;
  int64_t ignore_index;
  Reduction reduction;
  double label_smoothing;
};

class NLLLoss : public Loss {
 public:
  explicit NLLLoss(int64_t ignore_index = -100) : NLLLoss(Tensor(), ignore_index) {}
  explicit NLLLoss(Tensor weight, int64_t ignore_index = -100, Reduction reduction = Reduction::Mean)
      : Loss("NLLLoss"), ignore_index(ignore_index), reduction(reduction) {
    if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return nll_loss(input, target, weight, ignore_index, reduction);
  }
  Tensor weight;
  int64_t ignore_index;
  Reduction reduction;
};

class MultiMarginLoss : public Loss {
 public:
  explicit MultiMarginLoss(int64_t p = 1, double margin = 1.0, Tensor weight = Tensor(),
                           Reduction reduction = Reduction::Mean)
      : Loss("MultiMarginLoss"), p(p), margin(margin), reduction(reduction) {
    if (weight.defined()) this->weight = register_buffer("weight", std::move(weight));
  }
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return multi_margin_loss(input, target, p, margin, weight, reduction);
  }
  int64_t p;
  double margin;
  Tensor weight;
  Reduction reduction;
};

class MultiLabelMarginLoss : public Loss {
 public:
  explicit MultiLabelMarginLoss(Reduction reduction = Reduction::Mean)
      : Loss("MultiLabelMarginLoss"), reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) override {
    return multilabel_margin_loss(input, target, reduction);
  }
  Reduction reduction;
};

class MarginRankingLoss : public Loss3 {
 public:
  explicit MarginRankingLoss(double margin = 0.0, Reduction reduction = Reduction::Mean)
      : Loss3("MarginRankingLoss"), margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target) override {
    return margin_ranking_loss(input1, input2, target, margin, reduction);
  }
  double margin;
  Reduction reduction;
};

class CosineEmbeddingLoss : public Loss3 {
 public:
  explicit CosineEmbeddingLoss(double margin = 0.0, Reduction reduction = Reduction::Mean)
      : Loss3("CosineEmbeddingLoss"), margin(margin), reduction(reduction) {}
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target) override {
    return cosine_embedding_loss(input1, input2, target, margin, reduction);
  }
  double margin;
  Reduction reduction;
};

class TripletMarginLoss : public Loss3 {
 public:
  explicit TripletMarginLoss(double margin = 1.0, double p = 2, double eps = 1e-6, bool swap = false,
                             Reduction reduction = Reduction::Mean)
      : Loss3("TripletMarginLoss"), margin(margin), p(p), eps(eps), swap(swap), reduction(reduction) {}
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative) override {
    return triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap, reduction);
  }
  double margin, p, eps;
  bool swap;
  Reduction reduction;
};

}  // namespace ampgrad::nn
