"""The GPU itself: CUDA driver, MPS, health probe, environment, power, the kernel loader."""
