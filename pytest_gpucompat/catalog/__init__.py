"""The ground floor under the engine adapters: what each engine is (`registry`: one EngineDescriptor per engine,
its names, packages and defaults), the contract every adapter keeps (`base`: the Engine Protocol, its spec, results
and exceptions), the harness's parameters (`params`), the log-line helpers every adapter shares (`loglines`) and
the API contracts extracted from engine releases (`contracts/`).

`machine/`, `kb/`, `gpushare/`, `workload/` and `report/` import from here, never from `engines/` (the adapters and
their process machinery). Nothing here imports an engine (or torch).

PYTEST_DONT_REWRITE
"""
