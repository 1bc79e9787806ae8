"""``python -m tierload_tools.bench.contenders NAME PHASE CONTEXT_JSON RESULT_JSON``: run one phase."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def main(argv: list[str]) -> int:
    name, phase, context_path, result_path = argv
    from tierload_tools.bench.contenders import CONTENDERS, Context

    started = time.perf_counter()
    try:
        ctx = Context.from_json(open(context_path, encoding="utf-8").read())
        os.environ.update(ctx.aws_environment())
        module = importlib.import_module(CONTENDERS[name].module)
        result = getattr(module, phase)(ctx)
        result["ok"] = True
    except BaseException as exc:  # noqa: BLE001 - reported in the result, with its traceback
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        from tierload_tools.bench.loop import FINISHED

        result["finished_epochs"] = list(FINISHED)
    result["process_s"] = time.perf_counter() - started
    with open(result_path, "w", encoding="utf-8") as out:
        json.dump(result, out)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
