"""Stand-in for deepspeed.runtime.fp16.loss_scaler: the loss scalers ZeRO optimizers pickle.

They are plain objects, pickled with protocol 2 as NEWOBJ (the class) then BUILD (the
instance __dict__). The attributes, in their order, are those DeepSpeed's constructors set.
"""

import torch


class LossScalerBase:
    """Base of the loss scalers (DeepSpeedConfigObject in DeepSpeed, a plain object)."""

    def __init__(self, cur_scale):
        self.cur_scale = cur_scale
        self.dynamic = False

    @property
    def loss_scale(self):
        return self.cur_scale


class LossScaler(LossScalerBase):
    """A static loss scale: bf16 runs hold LossScaler(1.0)."""

    def __init__(self, scale=1):
        super().__init__(scale)


class DynamicLossScaler(LossScalerBase):
    """The dynamic loss scale of fp16 runs."""

    def __init__(self,
                 init_scale,
                 scale_window,
                 min_scale,
                 delayed_shift,
                 consecutive_hysteresis,
                 raise_error_at_min_scale=True,
                 dtype=torch.half):
        super().__init__(init_scale)
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = 2.0
        self.scale_window = scale_window
        self.min_scale = min_scale
        self.delayed_shift = delayed_shift
        self.cur_hysteresis = delayed_shift
        self.consecutive_hysteresis = consecutive_hysteresis
        self.raise_error_at_min_scale = raise_error_at_min_scale
        self.dynamic = True
        self.dtype = dtype
