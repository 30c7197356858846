/*
The reference model in double precision (see gradcheck.h): its backward and its finite differences
for the gradient checks of test_ref.h. A translation unit of its own so that LLAMA_REF_DOUBLE
changes only this copy of llama_ref.h's static functions.
*/
#define LLAMA_REF_DOUBLE
#include "llama_ref.h"
#include "gradcheck.h"

static double mean_loss(RefModel *model, const int *inputs, const int *targets, int grad_accum) {
    size_t BT = (size_t)model->B * model->T;
    double loss = 0.0;
    for (int k = 0; k < grad_accum; k++) loss += ref_forward(model, inputs + k * BT, targets + k * BT);
    return loss / grad_accum;
}

void ref_gradcheck_double(const LlamaConfig *cfg, int B, int T, int grad_accum, int doc_start_id, const float *params,
                          const int *inputs, const int *targets, double *grads, double *fd_grads) {
    RefModel model;
    ref_init(&model, cfg, B, T, 0, 0, 0, 0, 0);
    if (doc_start_id >= 0) ref_set_doc_mask(&model, doc_start_id);
    for (size_t i = 0; i < model.num_params; i++) model.params[i] = params[i];
    ref_compute_grads(&model, inputs, targets, grad_accum);
    memcpy(grads, model.grads, model.num_params * sizeof(double));
    // Central differences: error ~ h^2 f''' (truncation) + 1e-16 |f| / h (rounding), both ~1e-10
    // for O(1) weights and losses at this h, far below the gradients checked.
    for (size_t i = 0; i < model.num_params; i++) {
        double p = model.params[i], h = 1e-5 * (fabs(p) > 1.0 ? fabs(p) : 1.0);
        double plus = p + h, minus = p - h;
        model.params[i] = plus;
        double loss_plus = mean_loss(&model, inputs, targets, grad_accum);
        model.params[i] = minus;
        double loss_minus = mean_loss(&model, inputs, targets, grad_accum);
        model.params[i] = p;
        fd_grads[i] = (loss_plus - loss_minus) / (plus - minus);
    }
    ref_free(&model);
}
