"""FP8 (e4m3) for the transformers engine: real FP8 matrix products through ``torch._scaled_mm``.

Weights and activations are quantized per tensor to float8_e4m3fn (dynamic activation scales, like
vLLM's default FP8 path) and multiplied by the GPU's FP8 tensor cores; the embedding and lm_head stay
in bfloat16. Only hardware with FP8 (compute capability 8.9 or higher) runs it: an emulation would
measure the rounding but not the kernels, so anything else is reported as unavailable.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from typing import Any

from ..catalog.base import EngineUnavailable

FP8_MIN_CAPABILITY = (8, 9)
KEEP_HIGH_PRECISION = ("lm_head",)


def require_fp8(torch: Any, device: str) -> None:
    if not device.startswith("cuda") or not torch.cuda.is_available():
        raise EngineUnavailable(f"hf fp8 needs an FP8-capable GPU (compute capability >= 8.9); device is {device}")
    index = torch.device(device).index or 0
    capability = torch.cuda.get_device_capability(index)
    if tuple(capability) < FP8_MIN_CAPABILITY:
        raise EngineUnavailable(
            f"hf fp8 needs compute capability >= 8.9; {torch.cuda.get_device_name(index)} has "
            f"{capability[0]}.{capability[1]}"
        )
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise EngineUnavailable(f"hf fp8 needs torch with float8 and _scaled_mm; this is torch {torch.__version__}")


def quantize_linears(model: Any) -> int:
    """Replace every nn.Linear except the lm_head by an FP8 linear; returns how many were replaced."""
    import torch

    class FP8Linear(torch.nn.Module):
        weight_fp8: torch.Tensor  # buffers, registered in __init__
        weight_scale: torch.Tensor

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            fp8_max = torch.finfo(torch.float8_e4m3fn).max
            weight = linear.weight.detach().float()
            scale = (weight.abs().max().clamp(min=1e-12) / fp8_max).reshape(())
            self.register_buffer("weight_fp8", (weight / scale).clamp(-fp8_max, fp8_max).to(torch.float8_e4m3fn))
            self.register_buffer("weight_scale", scale.float())
            self.bias = linear.bias
            self.out_features = linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            fp8_max = torch.finfo(torch.float8_e4m3fn).max
            shape = x.shape
            flat = x.reshape(-1, shape[-1]).float()
            rows = flat.shape[0]
            pad = (-rows) % 16
            if pad:
                flat = torch.nn.functional.pad(flat, (0, 0, 0, pad))
            x_scale = (flat.abs().max().clamp(min=1e-12) / fp8_max).reshape(())
            x_fp8 = (flat / x_scale).clamp(-fp8_max, fp8_max).to(torch.float8_e4m3fn)
            out = torch._scaled_mm(x_fp8, self.weight_fp8.t(), scale_a=x_scale, scale_b=self.weight_scale,
                                   out_dtype=torch.bfloat16)
            if isinstance(out, tuple):  # older torch returned (out, amax)
                out = out[0]
            out = out[:rows]
            if self.bias is not None:
                out = out + self.bias.to(out.dtype)
            return out.reshape(*shape[:-1], self.out_features).to(x.dtype)

    replaced = 0
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, torch.nn.Linear) and not any(k in full for k in KEEP_HIGH_PRECISION):
                setattr(module, child_name, FP8Linear(child))
                replaced += 1
    return replaced
