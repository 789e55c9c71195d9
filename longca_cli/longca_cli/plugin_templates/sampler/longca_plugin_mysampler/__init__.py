"""longca sampler plugin `mysampler`."""
