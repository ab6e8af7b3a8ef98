"""Building candidates: static gate, nvcc and Triton AOT compiles, the compile cache."""
