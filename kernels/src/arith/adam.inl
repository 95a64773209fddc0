// The Adam / AdamW update of one lane, written once over the lane policy P. No fused multiply-adds
// anywhere: SSE4 has none, so using them on wider paths would change the bits. Included inside a
// namespace (see prelude.hpp).

template <class P>
struct adam_coeffs {
  typename P::F grad_scale, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, lr_wd, step_size;

  ZOE_ARITH explicit adam_coeffs(const ::zoe::kernels::detail::adam_scalars& s)
      : grad_scale(P::f(s.grad_scale)),
        l2(P::f(s.l2)),
        beta1(P::f(s.beta1)),
        one_minus_beta1(P::f(s.one_minus_beta1)),
        beta2(P::f(s.beta2)),
        one_minus_beta2(P::f(s.one_minus_beta2)),
        inv_sqrt_bc2(P::f(s.inv_sqrt_bc2)),
        eps(P::f(s.eps)),
        lr_wd(P::f(s.lr_wd)),
        step_size(P::f(s.step_size)) {}
};

// PyTorch's formulation: denom = sqrt(v)/sqrt(1 - beta2^t) + eps, p -= lr/(1 - beta1^t) * m/denom.
// Decoupled decay subtracts p*lr*wd rather than multiplying by (1 - lr*wd): when lr*wd is below
// half an ulp of 1 the factor would round to 1 and the decay vanish.
template <class P>
ZOE_ARITH void adam_update(const adam_coeffs<P>& c, typename P::F& p, typename P::F g, typename P::F& m,
                           typename P::F& v) {
  using F = typename P::F;
  g = g * c.grad_scale;
  g = g + p * c.l2;
  m = m * c.beta1 + g * c.one_minus_beta1;
  v = v * c.beta2 + (g * g) * c.one_minus_beta2;
  const F denom = P::sqrt(v) * c.inv_sqrt_bc2 + c.eps;
  p = p - (p * c.lr_wd + c.step_size * P::div(m, denom));
}
