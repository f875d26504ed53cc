"""Stand-in for deepspeed.utils.tensor_fragment: the fragment_address dataclass.

ZeRO-1/2 optimizer states hold `param_slice_mappings`: per param group, parameter name ->
fragment_address(numel, start) of the piece of that parameter in the rank's partition.
"""

from dataclasses import dataclass


@dataclass
class fragment_address:  # pylint: disable=invalid-name (DeepSpeed's name)
    numel: int
    start: int
