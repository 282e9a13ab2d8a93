"""kb.launch: the command lines users paste, taken apart (plain pytest)."""

from __future__ import annotations

import pytest

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb.cmdline import check_command, split_args
from pytest_gpucompat.kb.launch import launch_of, python_call, words_of


@pytest.mark.parametrize(("text", "engine", "args", "env"), [
    ("vllm serve m --dtype half", "vllm", ("m", "--dtype", "half"), {}),
    ("python -m vllm.entrypoints.openai.api_server --model m", "vllm", ("--model", "m"), {}),
    ("python3.10 -m sglang.launch_server --model-path m --tp 2", "sglang", ("--model-path", "m", "--tp", "2"), {}),
    ("CUDA_VISIBLE_DEVICES=0,1 VLLM_ATTENTION_BACKEND=XFORMERS nohup vllm serve m", "vllm", ("m",),
     {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_ATTENTION_BACKEND": "XFORMERS"}),
    ("$ /usr/bin/python3 -m sglang.launch_server \\\n  --model-path m \\\n  --port 30000", "sglang",
     ("--model-path", "m", "--port", "30000"), {}),
    ("trtllm-build --checkpoint_dir c --gemm_plugin auto", "tensorrt-llm", ("--checkpoint_dir", "c", "--gemm_plugin",
                                                                           "auto"), {}),
    ("python convert_checkpoint.py --tp_size 2", "tensorrt-llm", ("--tp_size", "2"), {}),
    ("ls -la /models", None, (), {}),
])
def test_the_engine_and_its_own_arguments(text: str, engine: str | None, args: tuple[str, ...],
                                          env: dict[str, str]) -> None:
    launch = launch_of(words_of(text))
    assert (launch.engine, launch.args, dict(launch.env)) == (engine, args, env)


def test_a_container_image_names_the_engine_and_its_release() -> None:
    launch = launch_of(words_of("docker run --gpus all -e HF_TOKEN=t --ipc=host -p 8000:8000 "
                                "vllm/vllm-openai:v0.6.3.post1 --model m --dtype half"))
    assert (launch.engine, launch.image_version, launch.args) == ("vllm", "0.6.3.post1", ("--model", "m", "--dtype",
                                                                                           "half"))
    assert launch.env == {"HF_TOKEN": "t"}
    inner = launch_of(words_of("docker run lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path m"))
    assert (inner.engine, inner.image_version, inner.args) == ("sglang", None, ("--model-path", "m"))


def test_a_python_call_gives_its_literal_settings() -> None:
    settings, engine = python_call('from vllm import LLM\nllm = LLM(model="m", tensor_parallel_size=2, dtype="half",'
                                   ' enforce_eager=True, gpu_memory_utilization=0.9, seed=-1, x=f(1))')
    assert engine == "vllm"
    assert settings == {"model": "m", "tensor_parallel_size": 2, "dtype": "half", "enforce_eager": True,
                        "gpu_memory_utilization": 0.9, "seed": -1}
    assert python_call("from tensorrt_llm import LLM\nLLM(model='m', tensor_parallel_size=4)")[1] == "tensorrt-llm"
    assert python_call("LLM(model='m'")[0] == {}  # unclosed
    # a chain the parser recurses on: answered (nothing read from it), never raised
    assert python_call("LLM(a=" + "-" * 5000 + "1)") == ({}, None)
    assert python_call("LLM(a=" + "(" * 100_000 + ")")[0] == {}


def test_pasted_forms_are_checked_as_the_engine_sees_them() -> None:
    check = check_command(words_of("python -m sglang.launch_server --model-path m --disable-flashinfer"),
                          "sglang", "0.3.6", "0.4.2")
    assert [f.given.written for f in check.flags] == ["--model-path", "--disable-flashinfer"]  # no '-m'
    unknown = check_command(words_of("vllm serve m -tp 2 --quantization awq"), "vllm", None, None)
    assert unknown.unchecked and unknown.flags == ()
    assert unknown.settings == {"model": "m", "tensor_parallel_size": 2, "quantization": "awq"}
    trt = check_command(words_of("trtllm-serve m --tp_size 2 --pp_size 2"), "tensorrt-llm", "1.0.0", None)
    assert trt.settings == {"model": "m", "tensor_parallel_size": 2, "pipeline_parallel_size": 2}


def test_a_command_line_too_long_or_badly_quoted_is_one_error() -> None:
    with pytest.raises(InputError, match="characters"):
        split_args("vllm serve " + "x" * 70_000)
    with pytest.raises(InputError, match="not a command line"):
        split_args("vllm serve 'm")
