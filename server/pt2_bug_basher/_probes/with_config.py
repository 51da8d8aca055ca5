"""Run a script with Inductor config values set first, without editing it.

    python with_config.py --set triton.debug_sync_kernel=true [--set ...] -- script.py [args...]

Values are JSON (true, 1, "text"); the script runs as __main__ with its own argv and directory first
on sys.path. Runs in the interpreter under investigation; imports nothing from pt2_bug_basher.
"""

import json
import os
import runpy
import sys


def main(argv):
    settings = {}
    while argv and argv[0] == "--set":
        key, _, raw = argv[1].partition("=")
        settings[key] = json.loads(raw)
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        raise SystemExit("usage: with_config.py --set KEY=JSON ... -- script.py [args...]")
    script, args = argv[1], argv[2:]
    import torch._inductor.config as inductor_config

    for key, value in settings.items():
        target = inductor_config
        *parents, leaf = key.split(".")
        for part in parents:
            target = getattr(target, part)
        if not hasattr(target, leaf):
            raise SystemExit(f"torch._inductor.config has no setting {key!r}")
        setattr(target, leaf, value)
        print(f"PT2BB-CONFIG: torch._inductor.config.{key} = {value!r}", file=sys.stderr, flush=True)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
