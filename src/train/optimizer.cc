#include "train/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

#include "core/error.h"

namespace glint {

void AdamWOptions::validate(const std::string& where) const {
  GLINT_CHECK(beta1 >= 0 && beta1 < 1, where, ": beta1 must be in [0, 1), got ", beta1);
  GLINT_CHECK(beta2 >= 0 && beta2 < 1, where, ": beta2 must be in [0, 1), got ", beta2);
  GLINT_CHECK(eps > 0, where, ": eps must be positive, got ", eps);
  GLINT_CHECK(weight_decay >= 0, where, ": weight_decay must be >= 0, got ", weight_decay);
}

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  options_.validate("AdamW");
  at::NoGradGuard no_grad;
  for (const auto& p : params_) {
    auto opts = p.options().dtype(at::kFloat);
    m_.push_back(at::zeros(p.sizes(), opts));
    v_.push_back(at::zeros(p.sizes(), opts));
    const bool narrow = p.scalar_type() != at::kFloat && p.scalar_type() != at::kDouble;
    master_.push_back(narrow ? p.detach().to(at::kFloat) : at::Tensor());
  }
}

int64_t AdamW::state_bytes() const {
  auto bytes = [](const at::Tensor& t) { return t.defined() ? int64_t(t.numel()) * int64_t(t.element_size()) : 0; };
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) n += bytes(m_[i]) + bytes(v_[i]) + bytes(master_[i]);
  return n;
}

void AdamW::set_options(const AdamWOptions& options) {
  options.validate("AdamW");
  options_ = options;
}

void AdamW::copy_state_from(const AdamW& other) {
  GLINT_ASSERT(other.params_.size() == params_.size(), "copy_state_from: another optimizer's shape");
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    m_[i].copy_(other.m_[i]);
    v_[i].copy_(other.v_[i]);
    if (master_[i].defined()) master_[i].copy_(other.master(i));
  }
  step_ = other.step_;
}

void AdamW::step(double lr) {
  at::NoGradGuard no_grad;
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double bc1 = 1.0 - std::pow(b1, double(step_));
  const double bc2 = 1.0 - std::pow(b2, double(step_));
  // One block of a parameter: its gradient, moments and master (or the parameter).
  auto update = [&](const at::Tensor& grad, const at::Tensor& m, const at::Tensor& v, const at::Tensor& w) {
    at::Tensor g = grad.to(at::kFloat);
    m.mul_(b1).add_(g, 1.0 - b1);
    v.mul_(b2).addcmul_(g, g, 1.0 - b2);
    // p <- p - lr * wd * p - lr * m_hat / (sqrt(v_hat) + eps)
    at::Tensor denom = (v / bc2).sqrt_().add_(options_.eps);
    at::Tensor step = (m / bc1).div_(denom);
    if (options_.weight_decay > 0) w.mul_(1.0 - lr * options_.weight_decay);
    w.add_(step, -lr);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const at::Tensor& grad = p.grad();
    at::Tensor& w = master_[i].defined() ? master_[i] : p;
    const int64_t n = p.numel();
    if (n > kAdamWBlockElements && grad.is_contiguous() && w.is_contiguous()) {
      at::Tensor gf = grad.view({-1}), mf = m_[i].view({-1}), vf = v_[i].view({-1}), wf = w.view({-1});
      for (int64_t at = 0; at < n; at += kAdamWBlockElements) {
        const int64_t len = std::min(kAdamWBlockElements, n - at);
        update(gf.narrow(0, at, len), mf.narrow(0, at, len), vf.narrow(0, at, len), wf.narrow(0, at, len));
      }
    } else {
      update(grad, m_[i], v_[i], w);
    }
    if (master_[i].defined()) p.copy_(w);
  }
}

void AdamW::zero_grad() {
  for (auto& p : params_)
    if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

double LrSchedule::at(int64_t step) const {
  if (warmup_steps > 0 && step <= warmup_steps)
    return peak_lr * double(step) / double(warmup_steps);
  int64_t decay_steps = total_steps - warmup_steps;
  if (decay_steps <= 0) return peak_lr;
  // The first step after warmup runs at the peak; progress reaches (n-1)/n at the end.
  double progress = double(step - warmup_steps - 1) / double(decay_steps);
  progress = std::min(1.0, std::max(0.0, progress));
  double min_lr = peak_lr * min_lr_ratio;
  return min_lr + (peak_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace glint
