"""pytest-gpucompat: know which GPU x driver x CUDA x engine combinations work before production does."""

__version__ = "0.1.0"
