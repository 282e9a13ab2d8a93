"""A failed cell's reason says what failed: the cause lines of a multi-line exception are kept, bounded."""

from __future__ import annotations


def test_a_failure_whose_first_line_is_only_a_header_keeps_the_cause() -> None:
    from pytest_gpucompat.engines import one_line

    exc = ValueError("1 validation error for ModelConfig\n  max_model_len\n    Value error, User-specified "
                     "max_model_len (9999) is greater than the derived max_model_len (512). [type=value_error]\n"
                     "    For further information visit https://errors.pydantic.dev/2.12/v/value_error")
    text = one_line(exc)
    assert text.startswith("ValueError: 1 validation error for ModelConfig: max_model_len; Value error, ")
    assert "derived max_model_len (512)" in text and "pydantic.dev" not in text and "\n" not in text
    assert one_line(RuntimeError("plain first line\nsecond")) == "RuntimeError: plain first line"
    assert len(one_line(ValueError("3 validation errors for X\n" + "\n".join(["y" * 300] * 6)))) < 700
