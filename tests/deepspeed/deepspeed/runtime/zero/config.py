"""Stand-in for deepspeed.runtime.zero.config: the ZeRO stage enum ZeRO optimizers pickle.

Real checkpoints hold `zero_stage` as a member of this int Enum. How it is pickled depends
on the Python that saved it: ZeroStageEnum(2) (REDUCE of the class on the value) for most
versions, getattr(ZeroStageEnum, 'gradients') for Python 3.11.0 to 3.11.6. The generator
chooses the form explicitly with a reducer; this class leaves pickling to the default.
"""

from enum import Enum


class ZeroStageEnum(int, Enum):
    """ZeRO stages, as deepspeed.runtime.zero.config defines them."""
    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3
    max_stage = 3
