"""Run by check_env inside the interpreter under investigation; prints one JSON object.

Lives alone in its folder so that running it puts nothing else on sys.path.
"""

import importlib.util
import json
import os
import platform
import sys
import time
import traceback

report = {
    "python_version": platform.python_version(),
    "executable": sys.executable,
    "prefix": sys.prefix,
    "platform": platform.platform(),
    "torch_ok": False,
    # what torch's test harness (common_utils) and the test runs import: the unit-test steps need them
    "test_modules_missing": [m for m in ("expecttest", "numpy", "pytest") if importlib.util.find_spec(m) is None],
}
started = time.perf_counter()
try:
    import torch

    report["import_seconds"] = round(time.perf_counter() - started, 3)
    report["torch_ok"] = True
    report["torch_version"] = str(torch.__version__)
    report["torch_git_version"] = getattr(torch.version, "git_version", None)
    report["torch_file"] = torch.__file__
    report["torch_debug"] = bool(getattr(torch.version, "debug", False))
    report["cuda_version"] = getattr(torch.version, "cuda", None)
    report["hip_version"] = getattr(torch.version, "hip", None)
    try:
        report["cuda_available"] = bool(torch.cuda.is_available())
        if report["cuda_available"]:
            gpus = []
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                gpus.append(
                    {
                        "index": index,
                        "name": props.name,
                        "capability": f"{props.major}.{props.minor}",
                        "memory_gib": round(props.total_memory / 2**30, 1),
                    }
                )
            report["gpus"] = gpus
    except Exception as exc:  # a broken driver must not hide the rest of the report
        report["cuda_available"] = False
        report["cuda_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import triton

        report["triton_version"] = triton.__version__
    except Exception:
        report["triton_version"] = None
    try:
        from torch._logging._internal import log_registry

        report["log_components"] = sorted(log_registry.log_alias_to_log_qnames)
        report["log_artifacts"] = sorted(log_registry.artifact_names)
    except Exception as exc:
        report["log_components"] = []
        report["log_artifacts"] = []
        report["log_registry_error"] = f"{type(exc).__name__}: {exc}"
    report["has_dynamo"] = os.path.isdir(os.path.join(os.path.dirname(torch.__file__), "_dynamo"))
except BaseException as exc:
    report["import_error"] = f"{type(exc).__name__}: {exc}"
    report["import_traceback"] = traceback.format_exc()[-4000:]

print("PT2BB-PROBE:" + json.dumps(report))
