/* reference.c: training without zoe. Plain arrays for every state, the host compute functions
 * (compute_host.c, the same as the zoe run's on the host device) for forward and backward, and
 * zoe's optimizer step written out: the gradients summed over the micro-batches in fp32, the
 * global norm of the averaged gradient from per-parameter sums of squares in double, DeepSpeed's
 * unscale-and-clip folded into Adam's grad_scale (engine/src/engine.cpp, offload_engine::step), and
 * the AdamW update of kernels/src/arith/adam.inl with its constants rounded as
 * kernels/src/adam.cpp's make_adam_scalars rounds them. Built with -ffp-contract=off, as zoe's
 * kernels are, so no multiply-add is fused. */
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "config.h"
#include "data.h"
#include "mlp_math.h"
#include "model.h"
#include "report.h"

typedef struct adam_scalars {
  float grad_scale, l2, beta1, one_minus_beta1, beta2, one_minus_beta2, inv_sqrt_bc2, eps, lr_wd, step_size;
} adam_scalars;

/* make_adam_scalars: powers and quotients in double, each constant rounded to float once. */
static adam_scalars make_scalars(float lr, float grad_scale, long step) {
  const float beta1 = (float)ZOE_MLP_BETA1;
  const float beta2 = (float)ZOE_MLP_BETA2;
  const float wd = (float)ZOE_MLP_WEIGHT_DECAY;
  const double t = (double)step;
  const double bc1 = 1.0 - pow((double)beta1, t);
  const double bc2 = 1.0 - pow((double)beta2, t);
  adam_scalars s;
  s.grad_scale = grad_scale;
  s.l2 = 0.0f; /* AdamW: decoupled decay */
  s.beta1 = beta1;
  s.one_minus_beta1 = (float)(1.0 - (double)beta1);
  s.beta2 = beta2;
  s.one_minus_beta2 = (float)(1.0 - (double)beta2);
  s.inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
  s.eps = (float)ZOE_MLP_EPS;
  s.lr_wd = (float)((double)lr * (double)wd);
  s.step_size = (float)((double)lr / bc1);
  return s;
}

/* adam_update of adam.inl, lane by lane. */
static void adam(const adam_scalars* c, float* p, const float* grad, float* m, float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float g = grad[i] * c->grad_scale;
    g = g + p[i] * c->l2;
    m[i] = m[i] * c->beta1 + g * c->one_minus_beta1;
    v[i] = v[i] * c->beta2 + (g * g) * c->one_minus_beta2;
    const float denom = sqrtf(v[i]) * c->inv_sqrt_bc2 + c->eps;
    p[i] = p[i] - (p[i] * c->lr_wd + c->step_size * (m[i] / denom));
  }
}

static double sum_of_squares(const float* g, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) s += (double)g[i] * (double)g[i];
  return s;
}

/* One parameter's states. */
typedef struct ref_param {
  size_t n;
  float* p;
  float* g;
  float* m;
  float* v;
  float* scratch; /* this micro-batch's gradient before it is summed into g */
} ref_param;

static int param_alloc(ref_param* q, size_t n) {
  q->n = n;
  q->p = calloc(n, sizeof(float));
  q->g = calloc(n, sizeof(float));
  q->m = calloc(n, sizeof(float));
  q->v = calloc(n, sizeof(float));
  q->scratch = calloc(n, sizeof(float));
  return (q->p && q->g && q->m && q->v && q->scratch) ? 0 : -1;
}

static void param_free(ref_param* q) {
  free(q->p);
  free(q->g);
  free(q->m);
  free(q->v);
  free(q->scratch);
}

int mlp_reference_run(const mlp_options* o, size_t micro_batches) {
  const size_t h = o->hidden;
  const size_t layers = o->layers;
  const size_t rows = o->batch / micro_batches;
  int rc = 1;
  mlp_compute* c = mlp_compute_host_create();
  ref_param* w = calloc(layers, sizeof *w);
  ref_param* b = calloc(layers, sizeof *b);
  float** act = calloc(layers + 1, sizeof *act); /* act[l]: layer l's input; act[layers]: the output */
  float* dz = malloc(rows * h * sizeof(float));
  float* dx = malloc(rows * h * sizeof(float));
  if (c == NULL || w == NULL || b == NULL || act == NULL || dz == NULL || dx == NULL) goto out_of_memory;
  for (size_t l = 0; l <= layers; ++l) {
    act[l] = malloc(rows * h * sizeof(float));
    if (act[l] == NULL) goto out_of_memory;
  }
  for (size_t l = 0; l < layers; ++l) {
    if (param_alloc(&w[l], h * h) != 0 || param_alloc(&b[l], h) != 0) goto out_of_memory;
    if (mlp_model_initial(h, o->seed, l, 0, w[l].p) != ZOE_SUCCESS ||
        mlp_model_initial(h, o->seed, l, 1, b[l].p) != ZOE_SUCCESS) {
      fprintf(stderr, "zoe-train-mlp: zoe_initializer_fill: %s\n", zoe_last_error());
      goto done;
    }
  }

  mlp_report_header(o->json);
  long optimizer_steps = 0;
  double total_after_first = 0.0;
  double first = 0.0;
  for (long step = 1; step <= o->steps; ++step) {
    const double t0 = mlp_now();
    double loss = 0.0;
    for (size_t mb = 0; mb < micro_batches; ++mb) {
      uint64_t row0 = 0;
      mlp_micro_batch_rows(o->batch, micro_batches, mb, &row0);
      c->ops->inputs(c, act[0], o->seed, (uint64_t)step, row0, rows, h);
      for (size_t l = 0; l < layers; ++l)
        c->ops->forward(c, act[l], w[l].p, b[l].p, act[l + 1], rows, h, l + 1 < layers);
      double sum_sq = 0.0;
      const uint64_t n = (uint64_t)rows * h;
      c->ops->loss(c, act[layers], dz, o->seed, (uint64_t)step, row0, rows, h, mlp_mse_coef(n, 1.0), &sum_sq);
      loss += sum_sq;
      float* grad_in = dz;
      float* grad_out = dx;
      for (size_t l = layers; l-- > 0;) {
        c->ops->backward(c, act[l], w[l].p, grad_in, w[l].scratch, b[l].scratch, l > 0 ? grad_out : NULL, rows, h);
        /* Summed into the fp32 gradient state, as zoe's gradient path sums each micro-batch's. */
        ref_param* both[2] = {&w[l], &b[l]};
        for (int k = 0; k < 2; ++k) {
          ref_param* q = both[k];
          for (size_t i = 0; i < q->n; ++i) q->g[i] = mb == 0 ? q->scratch[i] : q->g[i] + q->scratch[i];
        }
        if (l > 0) {
          c->ops->relu_grad(c, grad_out, act[l], rows * h);
          float* t = grad_in;
          grad_in = grad_out;
          grad_out = t;
        }
      }
    }
    loss /= (double)o->batch * (double)h; /* the squared errors over every element, as zoe's run divides them */

    /* The step: the norm of the averaged, unscaled gradient; clipping folded into grad_scale. */
    double total = 0.0;
    for (size_t l = 0; l < layers; ++l) total += sum_of_squares(w[l].g, w[l].n) + sum_of_squares(b[l].g, b[l].n);
    const double loss_scale = 1.0;
    const double k = (double)micro_batches;
    const double averaged_norm = sqrt(total) / k;
    double combined = loss_scale;
    if (ZOE_MLP_GRADIENT_CLIPPING > 0) {
      const double coefficient = (averaged_norm / loss_scale + 1e-6) / ZOE_MLP_GRADIENT_CLIPPING;
      if (coefficient > 1) combined = coefficient * loss_scale;
    }
    ++optimizer_steps;
    const adam_scalars s = make_scalars((float)o->lr, (float)(1 / (k * combined)), optimizer_steps);
    for (size_t l = 0; l < layers; ++l) {
      adam(&s, w[l].p, w[l].g, w[l].m, w[l].v, w[l].n);
      adam(&s, b[l].p, b[l].g, b[l].m, b[l].v, b[l].n);
    }
    const double seconds = mlp_now() - t0;
    if (step > 1) total_after_first += seconds;
    if (step == 1) first = seconds;
    const mlp_step_line line = {step, o->steps, loss, 0, averaged_norm / loss_scale, seconds};
    mlp_report_step(o->json, &line);
  }
  const double step_s = o->steps > 1 ? total_after_first / (double)(o->steps - 1) : first;
  mlp_report_reference_summary(o->json, step_s, mlp_peak_rss_bytes());
  rc = 0;
  goto done;

out_of_memory:
  fprintf(stderr, "zoe-train-mlp: --reference: out of memory for a model of %zu layers of %zu\n", layers, h);
done:
  for (size_t l = 0; act != NULL && l <= layers; ++l) free(act[l]);
  for (size_t l = 0; w != NULL && b != NULL && l < layers; ++l) {
    param_free(&w[l]);
    param_free(&b[l]);
  }
  free(act);
  free(w);
  free(b);
  free(dz);
  free(dx);
  if (c != NULL) c->ops->destroy(c);
  return rc;
}
