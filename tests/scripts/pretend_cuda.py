"""A module that stands for one that initialises CUDA at import (on a
machine without a GPU): torch.cuda.is_initialized() says True from now on.
tests/forkserver_test.py preloads it to see the forkserver refuse."""
import torch

torch.cuda.is_initialized = lambda: True
