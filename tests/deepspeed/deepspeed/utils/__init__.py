"""Stand-in for deepspeed.utils: only tensor_fragment.fragment_address is pickled."""
