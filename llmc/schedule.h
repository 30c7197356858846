/*
Learning-rate schedule: linear warmup from lr/warmup to lr over `warmup` steps, then cosine decay to
lr * final_frac at the last step (docs/baselines.md's convergence recipe).
*/
#ifndef LLMC_SCHEDULE_H
#define LLMC_SCHEDULE_H
#include <math.h>

static float lr_at_step(int step, int max_steps, float lr, int warmup, float final_frac) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    if (max_steps <= warmup + 1) return lr;
    float progress = (float)(step - warmup) / (float)(max_steps - 1 - warmup);
    if (progress > 1.0f) progress = 1.0f;
    float min_lr = lr * final_frac;
    return min_lr + 0.5f * (1.0f + cosf(3.14159265358979f * progress)) * (lr - min_lr);
}
#endif
