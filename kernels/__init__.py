"""The CUDA C templates of xgemm, shipped inside the wheel as the package ``xgemm.kernels``."""
