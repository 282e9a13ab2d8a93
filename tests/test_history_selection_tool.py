"""tools/_history_selection.py: the selection read by running a release's own selector code, on a small package
shaped like vLLM's (priority list per capability, backends validated by their own methods, a FlashInfer import that
fails without FlashInfer, a layer asserting on the KV-cache dtype at forward, an implementation refusing one at
init), then walked by kb.predict as the committed data is."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from _history_ast import Project  # noqa: E402
from _history_selection import extract_selection, factor, progressions  # noqa: E402

from pytest_gpucompat.kb.predict import Setting, load_selection, predict  # noqa: E402

PKG = {
    "pkg/__init__.py": "",
    "pkg/config/cache.py": """
        from typing import Literal
        CacheDType = Literal["auto", "fp8", "fp8_e5m2"]
    """,
    "pkg/platforms/__init__.py": "",
    "pkg/platforms/interface.py": """
        from typing import NamedTuple

        class DeviceCapability(NamedTuple):
            major: int
            minor: int

            def to_int(self) -> int:
                return self.major * 10 + self.minor

        class Platform:
            @classmethod
            def has_device_capability(cls, capability):
                current = cls.get_device_capability()
                if isinstance(capability, tuple):
                    return current >= capability
                return current.to_int() >= capability

            @classmethod
            def is_device_capability_family(cls, capability):
                return cls.get_device_capability().to_int() // 10 == capability // 10
    """,
    "pkg/platforms/cuda.py": """
        from typing import TYPE_CHECKING
        from pkg.platforms.interface import DeviceCapability, Platform
        from pkg.backends.registry import Backend
        if TYPE_CHECKING:
            from pkg.config import VllmConfig

        def _get_backend_priorities(use_mla, device_capability, kv_cache_dtype=None):
            if device_capability.major == 10:
                return [Backend.FAST, Backend.SAFE]
            return [Backend.FAST if kv_cache_dtype == "auto" else Backend.FI, Backend.FI, Backend.SAFE]

        class CudaPlatformBase(Platform):
            @classmethod
            def get_attn_backend_cls(cls, selected_backend, config):
                if selected_backend is not None:
                    reasons = selected_backend.get_class().validate_configuration(**config)
                    if reasons:
                        raise ValueError(f"Selected backend {selected_backend} is invalid: {reasons}")
                valid_backends_priorities = []
                if len(valid_backends_priorities) == 0:
                    raise ValueError(f"No valid attention backend. Reasons: {reasons_str}.")
    """,
    "pkg/backends/__init__.py": "",
    "pkg/backends/registry.py": """
        import importlib
        from enum import Enum

        class Backend(Enum):
            FAST = "pkg.backends.fast.FastBackend"
            FI = "pkg.backends.fi.FiBackend"
            SAFE = "pkg.backends.safe.SafeBackend"

            def get_class(self):
                module, name = self.value.rsplit(".", 1)
                return getattr(importlib.import_module(module), name)
    """,
    "pkg/backends/base.py": """
        import torch

        class AttentionType:
            DECODER = "decoder"

        class Base:
            supported_dtypes = [torch.float16, torch.bfloat16]
            supported_kv_cache_dtypes = ["auto"]

            @classmethod
            def supports_head_size(cls, head_size):
                return head_size % 8 == 0 and head_size <= 256

            @classmethod
            def supports_compute_capability(cls, capability):
                return True

            @classmethod
            def validate_configuration(cls, head_size, dtype, kv_cache_dtype, device_capability, attn_type):
                reasons = []
                if not cls.supports_head_size(head_size):
                    reasons.append("head_size not supported")
                if dtype not in cls.supported_dtypes:
                    reasons.append("dtype not supported")
                if kv_cache_dtype not in cls.supported_kv_cache_dtypes:
                    reasons.append("kv_cache_dtype not supported")
                if not cls.supports_compute_capability(device_capability):
                    reasons.append("compute capability not supported")
                return reasons
    """,
    "pkg/backends/fast.py": """
        from pkg.backends.base import Base
        from pkg.platforms.interface import DeviceCapability

        class FastImpl:
            supports_quant_query_input = False

        class FastBackend(Base):
            @classmethod
            def supports_compute_capability(cls, capability):
                return capability >= DeviceCapability(8, 0)

            @staticmethod
            def get_impl_cls():
                return FastImpl
    """,
    "pkg/backends/fi.py": """
        from flashinfer import decode
        from pkg.backends.base import Base

        class FiImpl:
            supports_quant_query_input = False

        class FiBackend(Base):
            supported_kv_cache_dtypes = ["auto", "fp8", "fp8_e5m2"]

            @classmethod
            def get_supported_head_sizes(cls):
                return [64, 128]

            @classmethod
            def supports_head_size(cls, head_size):
                return head_size in cls.get_supported_head_sizes()

            @staticmethod
            def get_impl_cls():
                return FiImpl
    """,
    "pkg/backends/safe.py": """
        import torch
        from pkg.backends.base import Base
        from pkg.platforms import interface
        from pkg.platforms.interface import DeviceCapability

        class SafeImpl:
            def __init__(self, num_heads, kv_cache_dtype):
                self.kv_cache_dtype = kv_cache_dtype
                self.supports_quant_query_input = True
                if self.kv_cache_dtype.startswith("fp8") and num_heads > 1000:
                    raise ValueError("never decided")
                if kv_cache_dtype == "fp8" and not CAP_OK:
                    raise ValueError(f"fp8 needs more than this GPU ({num_heads} heads)")

        CAP_OK = False

        class SafeBackend(Base):
            supported_dtypes = [torch.float16, torch.bfloat16, torch.float32]
            supported_kv_cache_dtypes = ["auto", "fp8", "fp8_e5m2"]

            @classmethod
            def supports_head_size(cls, head_size):
                return head_size >= 32

            @staticmethod
            def get_impl_cls():
                return SafeImpl
    """,
    "pkg/layer.py": """
        class Attention:
            def __init__(self, impl, kv_cache_dtype):
                self.query_quant = None
                if self.impl.supports_quant_query_input and self.kv_cache_dtype.startswith("fp8"):
                    self.query_quant = QuantFP8()

            def forward(self, q):
                if self.query_quant is not None:
                    assert self.kv_cache_dtype in {"fp8"}
    """,
}


def _selection(tmp_path: Path) -> dict:
    project = Project({path: textwrap.dedent(text) for path, text in PKG.items()})
    facts = extract_selection(project)
    doc = {"format": 1, "engine": "pkg", "grid": {"capabilities": ["8.0"]},
           "releases": [{"version": "1.0"}], "runs": [{"first": "1.0", "last": "1.0", **facts}]}
    (tmp_path / "pkg-selection.json").write_text(json.dumps(doc), encoding="utf-8")
    return facts


def test_the_release_code_is_run_per_machine(tmp_path: Path) -> None:
    facts = _selection(tmp_path)
    assert facts["kv_cache_dtypes"] == ["auto", "fp8", "fp8_e5m2"]
    assert facts["forced_invalid"] == {"action": "raise", "error": "ValueError",
                                       "message": "Selected backend {selected_backend} is invalid: {reasons}"}
    ampere = facts["profiles"][facts["machines"]["8.0+flashinfer"]]
    assert ampere["priority"] == ["FAST", "FI", "SAFE"]
    assert ampere["priority_by_kv"] == {"fp8": ["FI", "FI", "SAFE"], "fp8_e5m2": ["FI", "FI", "SAFE"]}
    assert ampere["backends"]["FAST"]["head_sizes"] == [[8, 256, 8]]
    assert ampere["backends"]["FI"]["head_sizes"] == [[64, 128, 64]]
    assert ampere["backends"]["SAFE"]["asserts_at_forward"] == {
        "fp8_e5m2": "AssertionError: assert self.kv_cache_dtype in {'fp8'}"}
    assert ampere["backends"]["SAFE"]["refuses_at_init"] == {
        "fp8": "ValueError: fp8 needs more than this GPU ({num_heads} heads)"}
    without = facts["profiles"][facts["machines"]["8.0-flashinfer"]]
    assert without["backends"]["FI"] == {"import_error": "No module named 'flashinfer'"}
    turing = facts["profiles"][facts["machines"]["7.5-flashinfer"]]
    assert turing["backends"]["FAST"]["reasons"]["base"] == ["compute capability not supported"]


def test_predictions_walk_the_data_as_the_selector_walks_candidates(tmp_path: Path) -> None:
    _selection(tmp_path)
    sel = load_selection("pkg", tmp_path)
    assert sel is not None

    def ask(cap: tuple[int, int], kv: str = "auto", fi: bool = True, head: int | None = 128,
            forced: str | None = None, dtype: str = "bfloat16") -> tuple[str, str | None]:
        p = predict(sel, Setting("1.0", cap, dtype, head, kv, fi, forced))
        return p.outcome, p.backend or p.error

    assert ask((8, 0)) == ("chosen", "FAST")
    assert ask((7, 5)) == ("chosen", "FI")
    assert ask((7, 5), fi=False) == ("chosen", "SAFE")
    assert ask((7, 5), head=96) == ("chosen", "SAFE")  # FI takes 64 and 128 only
    assert ask((8, 0), dtype="float32") == ("chosen", "SAFE")
    assert ask((8, 0), "fp8_e5m2", fi=False) == ("asserts", "SAFE")
    assert ask((8, 0), "fp8", fi=False) == ("refused-at-init", "SAFE")
    assert ask((7, 5), forced="FAST") == (
        "refused", "ValueError: Selected backend AttentionBackendEnum.FAST is invalid: {reasons}")
    assert ask((8, 0), head=4) == ("refused", "ValueError: No valid attention backend. Reasons: "
                                    "{FAST: [head_size not supported], FI: [head_size not supported], "
                                    "SAFE: [head_size not supported]}.")


def test_reasons_are_factored_and_put_back_in_order() -> None:
    found = {("bfloat16", "auto"): [], ("float32", "auto"): ["dtype not supported"],
             ("bfloat16", "fp8"): ["kv_cache_dtype not supported"],
             ("float32", "fp8"): ["dtype not supported", "kv_cache_dtype not supported"]}
    f = factor(found, ["auto", "fp8"])
    assert f["order"] == ["dtype not supported", "kv_cache_dtype not supported"]
    assert f["exact"] == {}
    assert progressions([8, 16, 24, 64, 128, 256]) == [[8, 24, 8], [64, 128, 64], [256, 256, 0]]


def test_each_imported_name_is_bound_on_its_own() -> None:
    """`from m import (LAZY, helper)` where `LAZY` comes from the module's `__getattr__` and cannot be computed for
    the stated machine: only `LAZY` is unknown; `helper` is the module's function, as Python binds each name of
    the statement on its own (vLLM 0.32.0's `PIN_MEMORY` beside `is_quantized_kv_cache`)."""
    from _history_run import Runner
    from _history_runtypes import _UNKNOWN, Machine

    files = {
        "pkg/__init__.py": "",
        "pkg/utils.py": textwrap.dedent("""
            import torch

            def __getattr__(name):
                if name == "LAZY":
                    return torch.cuda.is_available() and torch.cuda.pin_memory_supported()
                raise AttributeError(name)

            def helper(kv):
                return kv.startswith("fp8")
        """),
        "pkg/user.py": textwrap.dedent("""
            from pkg.utils import (
                LAZY,
                helper,
            )

            ANSWER = helper("fp8_e4m3")
        """),
    }
    runner = Runner(Project(files), Machine(9, 0, True))
    ns = runner.module("pkg.user").ns
    assert ns["ANSWER"] is True
    assert ns["LAZY"] is _UNKNOWN
