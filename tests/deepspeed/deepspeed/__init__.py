"""A stand-in for the few DeepSpeed classes its checkpoints pickle (tests only).

DeepSpeed cannot be installed next to Debian's torch 1.13, but its checkpoint files name
classes of the `deepspeed` package. These modules define exactly those classes under their
real module paths, with the attributes DeepSpeed 0.19 gives them, so that
tests/deepspeed/make_deepspeed_checkpoint.py writes pickles that name them as real files do.
Nothing else of DeepSpeed is here.
"""

__version__ = "0.19.0"
