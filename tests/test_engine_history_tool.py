"""tools/engine_history.py: flags (argparse with class-attribute defaults and constant choices, vLLM's get_kwargs and
loop over every field, SGLang's Annotated fields), env vars, backends and pins from source snippets; runs; the remote
zip reader through Range requests; the whole command against a local index; byte-identical output. Localhost only."""

from __future__ import annotations

import ast
import hashlib
import http.server
import io
import json
import struct
import sys
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import engine_history  # noqa: E402
from _history_ast import Project  # noqa: E402
from _history_exec import Interpreter  # noqa: E402
from _history_facts import capability_spec, extract_backends, extract_env, extract_requires  # noqa: E402
from _history_fetch import Artifact, Counter, RangeReader, Release, pick_artifact  # noqa: E402
from _history_flags import sglang_flags, vllm_flags  # noqa: E402
from _history_zip import read_members, spans  # noqa: E402
from packaging.version import Version  # noqa: E402


def _project(files: dict[str, str]) -> Project:
    return Project({path: textwrap.dedent(text) for path, text in files.items()})


OLD_VLLM = {
    "vllm/config.py": """
        import enum
        KV_DTYPES = ["auto", "fp8_e5m2"]
        class LoadFormat(str, enum.Enum): AUTO = "auto"; PT = "pt"
    """,
    "vllm/engine/arg_utils.py": """
        import argparse, os
        from dataclasses import dataclass
        from typing import Optional
        from vllm.config import KV_DTYPES, LoadFormat
        @dataclass
        class EngineArgs:
            model: str = "facebook/opt-125m"
            tokenizer: Optional[str] = None
            kv_cache_dtype: str = "auto"
            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
                parser.add_argument("--model", type=str, default=EngineArgs.model)
                parser.add_argument("--tokenizer", type=str, default=EngineArgs.tokenizer)
                parser.add_argument("--kv-cache-dtype", type=str, choices=KV_DTYPES, default=EngineArgs.kv_cache_dtype)
                parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
                parser.add_argument("--worker-use-ray", action="store_true", help="Deprecated, use --x=ray.")
                parser.add_argument("--load-format", choices=[f.value for f in LoadFormat], default=LoadFormat.PT)
                parser.add_argument("--num-workers", dest="workers", default=os.cpu_count())
                return parser
        class AsyncEngineArgs(EngineArgs):
            @staticmethod
            def add_cli_args(parser):
                parser = EngineArgs.add_cli_args(parser)
                parser.add_argument("--disable-log-requests", action="store_true")
                return parser
    """,
    "vllm/entrypoints/openai/cli_args.py": """
        import argparse
        from vllm.engine.arg_utils import AsyncEngineArgs
        def make_arg_parser():
            parser = argparse.ArgumentParser(description="server")
            parser.add_argument("--port", type=int, default=8000, help="port number")
            parser.add_argument("model_tag", nargs="?")
            return AsyncEngineArgs.add_cli_args(parser)
    """,
}


def test_argparse_flags_with_class_attribute_defaults_and_constant_choices() -> None:
    flags = vllm_flags(Interpreter(_project(OLD_VLLM)))
    assert flags["--kv-cache-dtype"] == {"dest": "kv_cache_dtype", "choices": ["auto", "fp8_e5m2"], "default": "auto",
                                         "type": "str"}
    assert flags["--tokenizer"]["default"] is None
    assert flags["--model"]["default"] == "facebook/opt-125m"
    assert flags["-tp"] == flags["--tensor-parallel-size"] == {"dest": "tensor_parallel_size", "default": 1,
                                                              "type": "int"}
    assert flags["--worker-use-ray"] == {"dest": "worker_use_ray", "action": "store_true", "deprecated": True}
    assert flags["--load-format"]["choices"] == ["auto", "pt"] and flags["--load-format"]["default"] == "pt"
    assert flags["--num-workers"] == {"dest": "workers", "default": "=os.cpu_count()"}
    assert "--disable-log-requests" in flags and flags["--port"]["default"] == 8000
    assert "model_tag" not in flags  # positional: not a flag


MODERN_VLLM = {
    "vllm/config/__init__.py": "from vllm.config.cache import CacheConfig\n",
    "vllm/config/cache.py": """
        from dataclasses import field
        from typing import Literal, Optional
        from pydantic.dataclasses import dataclass
        CacheDType = Literal["auto", "fp8", "fp8_e4m3"]
        @dataclass
        class CacheConfig:
            cache_dtype: CacheDType = "auto"
            \"\"\"Data type for kv cache storage.\"\"\"
            enable_prefix_caching: bool | None = None
            block_size: Optional[int] = None
            swap_space: float = 4
            mode: Literal["a", "b"] | None = None
            old_knob: int = 0
            \"\"\"Deprecated: this option will be removed.\"\"\"
            layers: list[str] = field(default_factory=list)
    """,
    "vllm/engine/arg_utils.py": """
        import argparse
        from dataclasses import MISSING, dataclass, fields
        from typing import Literal, get_args
        from vllm.config import CacheConfig
        def get_kwargs(cls):  # mirrored by the tool: its code tells which branches this release has
            kwargs = {}
            for field in fields(cls):
                hints = {field.type}
                kwargs[field.name] = {"default": field.default_factory() if field.default is MISSING else field.default}
                if contains_type(hints, bool):
                    kwargs[field.name]["action"] = argparse.BooleanOptionalAction
                elif contains_type(hints, Literal):
                    kwargs[field.name]["choices"] = sorted(get_args(field.type))
                if type(None) in hints and kwargs[field.name].get("choices"):
                    kwargs[field.name]["choices"].append(None)
            return kwargs
        @dataclass
        class EngineArgs:
            @staticmethod
            def add_cli_args(parser):
                cache_kwargs = get_kwargs(CacheConfig)
                group = parser.add_argument_group(title="CacheConfig")
                group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                group.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
                for flag in ("--block-size", "--swap-space", "--mode", "--old-knob", "--layers"):
                    group.add_argument(flag, **cache_kwargs[flag[2:].replace("-", "_")])
                return parser
        @dataclass
        class AsyncEngineArgs(EngineArgs):
            @classmethod
            def add_cli_args(cls, parser, async_args_only: bool = False):
                return parser if async_args_only else EngineArgs.add_cli_args(parser)
    """,
    "vllm/entrypoints/cli/serve.py": """
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        class ServeSubcommand:
            name = "serve"
            def subparser_init(self, subparsers):
                serve_parser = subparsers.add_parser("serve", help="serve")
                return make_arg_parser(serve_parser)
    """,
    "vllm/entrypoints/openai/cli_args.py": """
        import json
        from dataclasses import dataclass, field
        from typing import Literal
        from vllm.engine.arg_utils import AsyncEngineArgs, get_kwargs
        @dataclass
        class FrontendArgs:
            host: str | None = None
            port: int = 8000
            uvicorn_log_level: Literal["info", "debug"] = "info"
            allowed_origins: list[str] = field(default_factory=lambda: ["*"])
            @classmethod
            def add_cli_args(cls, parser):
                frontend_kwargs = get_kwargs(cls)
                frontend_kwargs["allowed_origins"]["type"] = json.loads
                del frontend_kwargs["allowed_origins"]["nargs"]
                group = parser.add_argument_group(title="Frontend")
                for key, value in frontend_kwargs.items():
                    extra_flags = value.pop("flags", [])
                    group.add_argument(*extra_flags, f"--{key.replace('_', '-')}", **value)
                return parser
        def make_arg_parser(parser):
            parser.add_argument("model_tag", nargs="?")
            parser = FrontendArgs.add_cli_args(parser)
            return AsyncEngineArgs.add_cli_args(parser)
    """,
}


def test_dataclass_literal_flags_through_get_kwargs_and_the_loop_over_every_field() -> None:
    flags = vllm_flags(Interpreter(_project(MODERN_VLLM)))
    assert flags["--kv-cache-dtype"] == {"dest": "kv_cache_dtype", "choices": ["auto", "fp8", "fp8_e4m3"],
                                         "default": "auto", "type": "str"}  # a type alias of a Literal
    assert flags["--enable-prefix-caching"] == {"dest": "enable_prefix_caching", "default": None,
                                                "action": "BooleanOptionalAction"}
    assert flags["--block-size"] == {"dest": "block_size", "default": None, "type": "int"}
    assert flags["--swap-space"]["type"] == "float"
    assert flags["--mode"]["choices"] == ["a", "b", None]  # Optional[Literal]: None is a choice
    assert flags["--old-knob"]["deprecated"] is True  # the field's docstring is its help
    assert flags["--layers"] == {"dest": "layers", "default": [], "type": "str"}
    # the frontend loop: every field of FrontendArgs, with the customised kwargs
    assert flags["--uvicorn-log-level"] == {"dest": "uvicorn_log_level", "choices": ["debug", "info"],
                                            "default": "info", "type": "str"}
    assert flags["--port"] == {"dest": "port", "default": 8000, "type": "int"}
    assert flags["--allowed-origins"] == {"dest": "allowed_origins", "default": ["*"]}
    assert flags["--host"]["default"] is None


SGLANG = {
    "sglang/srt/arg_utils.py": """
        from typing import Annotated
        A = Annotated
        class Arg: pass
        def add_cli_args_from_dataclass(parser, cls, *, fields=None): pass  # mirrored by the tool
    """,
    "sglang/srt/server_args.py": """
        import argparse, dataclasses
        from typing import Literal, Optional
        from sglang.srt.arg_utils import A, Arg, add_cli_args_from_dataclass
        ATTENTION_BACKEND_CHOICES = ["flashinfer", "triton"]
        class DeprecatedAction(argparse.Action): pass
        @dataclasses.dataclass
        class ServerArgs:
            model_path: A[str, Arg(help="The model.", aliases=["--model"])]
            tp_size: A[int, Arg(help="TP size.", cli_name="--tensor-parallel-size", aliases=["--tp-size"])] = 1
            dtype: A[Literal["auto", "half"], "Data type."] = "auto"
            attention_backend: A[Optional[str], Arg(help="Backend.", choices=ATTENTION_BACKEND_CHOICES)] = None
            enable_x: A[bool, "Enable x."] = False
            internal: A[int, Arg(no_cli=True)] = 0
            plain: int = 3
            @staticmethod
            def add_cli_args(parser):
                add_cli_args_from_dataclass(parser, ServerArgs)
                parser.add_argument("--disable-flashinfer", action=DeprecatedAction, help="Use --attention-backend.")
    """,
}


def test_sglang_annotated_fields_and_explicit_arguments() -> None:
    flags = sglang_flags(Interpreter(_project(SGLANG)))
    assert flags["--model-path"] == flags["--model"] == {"dest": "model_path", "type": "str"}
    assert flags["--tensor-parallel-size"] == flags["--tp-size"] == {"dest": "tp_size", "default": 1, "type": "int"}
    assert flags["--dtype"]["choices"] == ["auto", "half"]
    assert flags["--attention-backend"] == {"dest": "attention_backend", "choices": ["flashinfer", "triton"],
                                            "default": None, "type": "str"}
    assert flags["--enable-x"] == {"dest": "enable_x", "default": False, "action": "store_true"}
    assert flags["--disable-flashinfer"]["deprecated"] is True and "--internal" not in flags and "--plain" not in flags


def test_environment_variables_from_registries_and_reads() -> None:
    project = _project({
        "vllm/envs.py": """
            import os
            environment_variables = {
                "VLLM_USE_V1": lambda: bool(int(os.getenv("VLLM_USE_V1", "1"))),
                "VLLM_HOST_IP": lambda: os.getenv("VLLM_HOST_IP", ""),
                "VLLM_CACHE": lambda: os.environ.get("VLLM_CACHE", None),
            }
        """,
        "vllm/worker.py": """
            import os
            from os import getenv
            a = os.environ["CUDA_VISIBLE_DEVICES"]
            b = getenv("NCCL_DEBUG", "WARN")
            c = os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            d = get_bool_env_var("SGLANG_ENABLE_X", "false")
            os.environ["SET_ONLY"] = "1"
            e = os.getenv("lowercase_name")
        """,
        "vllm/environ.py": """
            class Envs:
                SGLANG_LOG_LEVEL = EnvStr("WARNING")
                SGLANG_FLAG = EnvBool(False)
        """,
    })
    env = extract_env(project, Interpreter(project))
    assert env["VLLM_USE_V1"] == {"default": "1"} and env["VLLM_HOST_IP"] == {"default": ""}
    assert env["VLLM_CACHE"] == {} and env["CUDA_VISIBLE_DEVICES"] == {}
    assert env["NCCL_DEBUG"] == {"default": "WARN"} and env["TOKENIZERS_PARALLELISM"] == {"default": "false"}
    assert env["SGLANG_ENABLE_X"] == {"default": "false"} and env["SGLANG_FLAG"] == {"default": False}
    assert env["SGLANG_LOG_LEVEL"] == {"default": "WARNING"}
    assert not {"SET_ONLY", "lowercase_name", "WARNING"} & set(env)


def test_attention_backends_and_compute_capability() -> None:
    project = _project({
        "vllm/v1/attention/backend.py": """
            class AttentionBackend:
                supported_kv_cache_dtypes = ["auto"]
                @classmethod
                def supports_compute_capability(cls, capability): return True
        """,
        "vllm/v1/attention/backends/registry.py": """
            from enum import Enum
            class AttentionBackendEnum(Enum):
                FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
                TORCH_SDPA = ""
        """,
        "vllm/v1/attention/backends/flashinfer.py": """
            import torch
            from vllm.v1.attention.backend import AttentionBackend
            class FlashInferBackend(AttentionBackend):
                supported_dtypes = [torch.float16, torch.bfloat16]
                supported_kv_cache_dtypes = ["auto", "fp8"]
                @staticmethod
                def get_name() -> str: return "FLASHINFER"
                @classmethod
                def get_supported_head_sizes(cls): return [64, 128, 256]
                @classmethod
                def supports_compute_capability(cls, capability):
                    return capability >= DeviceCapability(8, 0) and capability <= DeviceCapability(12, 1)
                @staticmethod
                def get_supported_kernel_block_sizes(): return [16, MultipleOf(32)]
        """,
        "vllm/v1/attention/backends/rocm_flashinfer.py": """
            class RocmFlashInferBackend:
                @staticmethod
                def get_name(): return "FLASHINFER"
        """,
    })
    backends = extract_backends(project, Interpreter(project))
    assert backends["FLASHINFER"] == {
        "enum": True, "class": "vllm.v1.attention.backends.flashinfer.FlashInferBackend", "head_sizes": [64, 128, 256],
        "kv_cache_dtypes": ["auto", "fp8"], "dtypes": ["float16", "bfloat16"], "compute_capability": ">=8.0,<=12.1",
        "block_sizes": [16, "MultipleOf(32)"]}
    assert backends["TORCH_SDPA"] == {"enum": True}


@pytest.mark.parametrize(("source", "spec"), [
    ("capability.major == 10", ">=10.0,<11.0"), ("capability.major in [9, 10]", ">=9.0,<11.0"),
    ("DeviceCapability(7, 5) <= capability", ">=7.5"), ("capability.major >= 8 and capability.major < 10",
                                                        ">=8.0,<10.0"),
    ("capability.major in [8, 10]", "capability.major in [8, 10]"), ("on_mi3xx()", "on_mi3xx()")])
def test_capability_specifiers(source: str, spec: str) -> None:
    assert capability_spec(ast.parse(source, mode="eval").body) == spec


def test_requirements_with_extras_markers_and_cuda() -> None:
    meta = "\n".join(["Name: sglang", "Requires-Dist: requests", 'Requires-Dist: torch==2.5.1; extra == "srt"',
                      'Requires-Dist: sgl-kernel>=0.0.3; extra == "srt_hip"', 'Requires-Dist: pandas; extra == "srt"',
                      "Requires-Dist: flashinfer_python[cu13]==0.6.1",
                      'Requires-Dist: pywin32; sys_platform == "win32"', ""])
    reqs = extract_requires({"sglang-1.0.dist-info/METADATA": meta}, "sglang-1.0-py3-none-any.whl")
    assert reqs == {"flashinfer-python": {"specifier": "==0.6.1"}, "requests": {"specifier": ""},
                    "sgl-kernel[srt-hip]": {"specifier": ">=0.0.3"}, "torch[srt]": {"specifier": "==2.5.1"},
                    "cuda": {"major": "13", "specifier": "==13.*"}}


def test_artifact_choice() -> None:
    files = [{"filename": f"vllm-1.0-{tag}.whl", "url": "u"} for tag in (
        "cp38-abi3-manylinux_2_28_aarch64", "cp38-abi3-manylinux_2_28_x86_64", "1-cp38-abi3-manylinux_2_28_x86_64")]
    assert pick_artifact([*files, {"filename": "vllm-1.0.tar.gz"}])["filename"] == \
        "vllm-1.0-1-cp38-abi3-manylinux_2_28_x86_64.whl"  # a rebuilt wheel (higher build tag) wins
    cps = [{"filename": f"vllm-0.2.0-cp3{m}-cp3{m}-manylinux1_x86_64.whl"} for m in (8, 11, 10)]
    assert pick_artifact(cps)["filename"] == "vllm-0.2.0-cp311-cp311-manylinux1_x86_64.whl"
    assert pick_artifact([files[0], {"filename": "vllm-1.0.tar.gz"}])["filename"] == "vllm-1.0.tar.gz"


def _release(version: str, error: str | None = None) -> Release:
    return Release(Version(version), version, Artifact(f"x-{version}.whl", "", "0" * 64, 1, "2024-01-01", False), error)


def test_runs_break_on_change_and_absence_but_not_on_an_unread_release() -> None:
    releases = [_release(v) for v in ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6")]
    releases[2].error = "cannot read"  # neither ends nor starts a run
    flag = {"dest": "x", "default": 1}
    facts = {"1.0": {"flags": {"--x": flag}}, "1.1": {"flags": {"--x": flag}}, "1.3": {"flags": {"--x": flag}},
             "1.4": {"flags": {}}, "1.5": {"flags": {"--x": flag}}, "1.6": {"flags": {"--x": {**flag, "default": 2}}}}
    assert engine_history.compact(releases, facts)["flags"]["--x"] == [  # removed in 1.4, re-added, then changed
        {"first": "1.0", "last": "1.3", "default": 1, "dest": "x"}, {"first": "1.5", "last": "1.5", "default": 1,
                                                                     "dest": "x"},
        {"first": "1.6", "last": "1.6", "default": 2, "dest": "x"}]


def test_output_is_diff_friendly_and_byte_identical(tmp_path: Path) -> None:
    releases = [_release("1.0"), _release("1.1", error="OSError: gone")]
    facts = {"1.0": {"flags": {"--b": {"dest": "b"}, "--a": {"dest": "a", "choices": ["x", "é"]}}, "env": {},
                     "backends": {}, "requires": {"torch": {"specifier": "==2.1.2"}}}}
    engine = engine_history.ENGINES["vllm"]
    texts = []
    for name in ("one.json", "two.json"):
        text = engine_history.render(engine, releases, engine_history.compact(releases, facts))
        engine_history.write_atomic(tmp_path / name, text)
        texts.append((tmp_path / name).read_bytes())
    assert texts[0] == texts[1]
    doc = json.loads(texts[0])
    assert list(doc) == ["format", "engine", "package", "tool", "tool_version", "releases", "flags", "env",
                         "backends", "requires", "anchors"]
    assert doc["releases"][1]["error"] == "OSError: gone" and list(doc["flags"]) == ["--a", "--b"]
    lines = texts[0].decode().splitlines()  # one run per line, one release per line
    assert '   {"first": "1.0", "last": "1.0", "choices": ["x", "é"], "dest": "a"}' in lines
    assert sum(line.startswith('  {"version"') for line in lines) == 2



class _RangeHandler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}  # path -> body, set by each test

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        header = self.headers.get("Range")
        start, end = (int(x) for x in header.removeprefix("bytes=").split("-")) if header else (0, len(body) - 1)
        self.send_response(206 if header else 200)
        self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
        body = body[start:end + 1]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # quiet
        del args


@pytest.fixture
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    _RangeHandler.files = {}


def _wheel(members: dict[str, str], padding: int = 0) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
        if padding:
            zf.writestr("vllm/_C.abi3.so", bytes(range(256)) * (padding // 256), compress_type=zipfile.ZIP_STORED)
        zf.writestr("vllm/zz_last.py", "LAST = 1\n")
        zf.comment = b"a comment moves the end record"
    return buf.getvalue()


def test_remote_zip_reads_only_what_it_needs(server: str) -> None:
    blob = _wheel({"vllm/__init__.py": "x = 1\n" * 100, "vllm-1.0.dist-info/METADATA": "Name: vllm\n"}, 2_000_000)
    _RangeHandler.files = {"/w.whl": blob}
    counter = Counter()
    read = RangeReader(requests.Session(), server + "/w.whl", counter)
    members = read_members(read, len(blob), lambda n: n.endswith((".py", "METADATA")))
    assert members == {"vllm/__init__.py": b"x = 1\n" * 100, "vllm-1.0.dist-info/METADATA": b"Name: vllm\n",
                       "vllm/zz_last.py": b"LAST = 1\n"}
    assert 0 < counter.bytes < 200_000  # the 2 MB stored member in between is never fetched
    calls: list[tuple[int, int]] = []

    def local(start: int, end: int) -> bytes:
        calls.append((start, end))
        return blob[start:end]

    assert read_members(local, len(blob), lambda n: n.endswith(".py"), gap=10**9) == \
        {"vllm/__init__.py": b"x = 1\n" * 100, "vllm/zz_last.py": b"LAST = 1\n"}
    assert len(calls) == 3  # end record, central directory, one coalesced span
    assert spans([], {}) == []


def test_zip64_end_records() -> None:
    """An archive whose end record defers to the zip64 one (past 4 GiB or 65535 members) is read through it."""
    blob = _wheel({"vllm/a.py": "A = 1\n"})
    at = blob.rfind(b"PK\x05\x06")
    _, _, _, _, count, size, offset, _ = struct.unpack("<4sHHHHIIH", blob[at:at + 22])
    z64 = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    blob = blob[:at] + z64 + locator + end
    assert read_members(lambda a, b: blob[a:b], len(blob), lambda n: n == "vllm/a.py") == {"vllm/a.py": b"A = 1\n"}


def test_the_command_against_a_local_index(server: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    wheel = _wheel({**{k: textwrap.dedent(v) for k, v in OLD_VLLM.items()},
                    "vllm-0.2.0.dist-info/METADATA": "Name: vllm\nRequires-Dist: torch==2.0.1\n"})
    index = {"files": [
        {"filename": "vllm-0.2.0-cp311-cp311-manylinux1_x86_64.whl", "url": server + "/files/good.whl",
         "hashes": {"sha256": hashlib.sha256(wheel).hexdigest()}, "size": len(wheel),
         "upload-time": "2023-09-28T01:02:03Z", "yanked": False},
        {"filename": "vllm-0.2.1-cp311-cp311-manylinux1_x86_64.whl", "url": server + "/files/missing.whl",
         "hashes": {"sha256": "1" * 64}, "size": 1000, "upload-time": "2023-10-01T00:00:00Z", "yanked": "bad"},
        {"filename": "vllm-0.1.7.tar.gz", "url": server + "/files/old.tar.gz", "hashes": {"sha256": "2" * 64},
         "size": 10, "upload-time": "2023-01-01T00:00:00Z", "yanked": False}]}
    _RangeHandler.files = {"/simple/vllm/": json.dumps(index).encode(), "/files/good.whl": wheel}
    args = ["--engine", "vllm", "--index-url", server + "/simple/", "--cache-dir", str(tmp_path / "cache"),
            "--output-dir", str(tmp_path / "out"), "--jobs", "2"]
    assert engine_history.main(args) == 0
    first = (tmp_path / "out" / "vllm.json").read_bytes()
    doc = json.loads(first)
    assert [r["version"] for r in doc["releases"]] == ["0.2.0", "0.2.1"]  # 0.1.7 is before 0.2.0
    assert doc["releases"][0] == {"version": "0.2.0", "file": index["files"][0]["filename"], "yanked": False,
                                  "sha256": index["files"][0]["hashes"]["sha256"], "uploaded": "2023-09-28"}
    assert doc["releases"][1]["yanked"] is True and "\n" not in doc["releases"][1]["error"]
    assert doc["flags"]["--kv-cache-dtype"] == [{"first": "0.2.0", "last": "0.2.0", "choices": ["auto", "fp8_e5m2"],
                                                 "default": "auto", "dest": "kv_cache_dtype", "type": "str"}]
    assert doc["requires"]["torch"] == [{"first": "0.2.0", "last": "0.2.0", "specifier": "==2.0.1"}]
    assert "vllm: 2 releases (1 read, 1 unread)" in capsys.readouterr().err
    del _RangeHandler.files["/files/good.whl"]  # a re-run reads the cache only
    assert engine_history.main(args) == 0
    assert (tmp_path / "out" / "vllm.json").read_bytes() == first
