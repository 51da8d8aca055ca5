"""Bugs to plant in a torch checkout (see `torch_checkout.build_torch_checkout`), one per compiler layer.

Each recipe is a one-line edit of a torch source file, a user's repro that shows it on CPU, the
layer the backend ladder should name and the function that holds the bug. Used by the localisation
tests and by `bench/bench_bisect.py`, which times localize beside PyTorch's own compiler bisector.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch_checkout import git


@dataclass(frozen=True)
class PlantedBug:
    name: str
    file: str
    """relative to the checkout's root"""
    old: str
    new: str
    repro: str
    layer: str
    """what localize's ladder should say"""
    guilty: str
    """the function (qualified name) that holds the planted line"""
    what: str
    commit_message: str = "Refactor"
    """what the planting commit says: as an ordinary commit would, never what it breaks"""


DYNAMO_GUARD_REPRO = '''\
import torch


def total(xs):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * 2


compiled = torch.compile(total, backend="eager")
two = [torch.ones(3), torch.full((3,), 2.0)]
three = [torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)]
torch.testing.assert_close(compiled(two), total(two))
torch.testing.assert_close(compiled(three), total(three))
print("ok")
'''


def _compared(body: str, call: str) -> str:
    return f'''\
import torch


{body}

if __name__ == "__main__":
    torch.manual_seed(0)
    {call}
'''


PLANTED: dict[str, PlantedBug] = {
    "inductor_lowering": PlantedBug(
        name="inductor_lowering", commit_message="Inductor: skip a multiply in pow_recursive for small exponents",
        file="torch/_inductor/lowering.py",
        old="    if (y % 2) == 1:\n        result = ops.mul(result, x)\n",
        new="    if (y % 2) == 1 and y > 3:\n        result = ops.mul(result, x)\n",
        repro=_compared("def f(x):\n    return torch.pow(x, 3) + 1\n",
                        "x = torch.randn(16)\n    torch.testing.assert_close(torch.compile(f)(x), f(x))"),
        layer="Inductor", guilty="pow_recursive",
        what="integer powers drop the last multiply for odd exponents up to 3 (x**3 computes x**2)"),
    "decomposition": PlantedBug(
        name="decomposition", commit_message="Decompositions: tidy hardsigmoid",
        file="torch/_decomp/decompositions.py",
        old="    return torch.clamp(torch.clamp(self + 3, min=0), max=6) / 6\n",
        new="    return torch.clamp(torch.clamp(self + 3, min=0), max=5) / 6\n",
        repro=_compared("def f(x):\n    return torch.nn.functional.hardsigmoid(x) * 2\n",
                        "x = torch.linspace(-4, 4, 32)\n    torch.testing.assert_close(torch.compile(f)(x), f(x))"),
        layer="decompositions", guilty="hardsigmoid",
        what="hardsigmoid's decomposition clamps at 5 instead of 6"),
    "joint_graph_pass": PlantedBug(
        name="joint_graph_pass", commit_message="Joint graph: reuse the fill value when folding uniform constants",
        file="torch/_inductor/fx_passes/joint_graph.py",
        old="                    value = node.args[1]\n",
        new="                    value = node.args[1] + 1\n",
        repro=_compared("def f(x):\n    return x * torch.full((16,), 2.0)\n",
                        "x = torch.randn(16)\n    torch.testing.assert_close(torch.compile(f)(x), f(x))"),
        layer="Inductor", guilty="constant_fold_uniform_value",
        what="constant folding rebuilds a torch.full constant with its fill value plus one"),
    "cpp_reduction_init": PlantedBug(
        name="cpp_reduction_init", commit_message="Inductor CPU: start min reductions from the largest finite value",
        file="torch/_inductor/codegen/cpp.py",
        old=('            f"std::numeric_limits<{cdtype}>::infinity()"\n'
             '            if is_float_dtype(dtype)\n            else f"std::numeric_limits<{cdtype}>::max()"\n'),
        new=('            f"std::numeric_limits<{cdtype}>::max()"\n'
             '            if is_float_dtype(dtype)\n            else f"std::numeric_limits<{cdtype}>::max()"\n'),
        repro=_compared("def f(x, mask):\n    return x.masked_fill(mask, float(\"inf\")).amin(dim=1)\n",
                        "x = torch.randn(4, 8)\n    mask = torch.zeros(4, 8, dtype=torch.bool)\n    mask[1] = True\n"
                        "    torch.testing.assert_close(torch.compile(f)(x, mask), f(x, mask))"),
        layer="Inductor", guilty="reduction_init",
        what=("the C++ backend starts a float min reduction from the largest finite float instead of +inf, so a row "
              "that is all +inf reduces to 3.4e38")),
    "dynamo_tracing": PlantedBug(
        name="dynamo_tracing", commit_message="Dynamo: read sorted()'s reverse flag",
        file="torch/_dynamo/variables/builtin.py",
        old='            list_var.call_method(tx, "sort", [], kwargs)\n',
        new='            reverse = kwargs["reverse"]  # noqa: F841\n'
            '            list_var.call_method(tx, "sort", [], kwargs)\n',
        repro=_compared("def f(x):\n    order = sorted([3, 1, 2])\n    return x * order[0]\n",
                        'print(torch.compile(f, backend="eager")(torch.ones(3)))'),
        layer="Dynamo", guilty="BuiltinVariable.call_sorted",
        what="tracing sorted() without reverse= raises KeyError inside Dynamo"),
    "dynamo_guard": PlantedBug(
        name="dynamo_guard", commit_message="Dynamo: guard list inputs through their items only",
        file="torch/_dynamo/variables/builder.py",
        old="        # have a stricter match.\n        self.install_guards(GuardBuilder.SEQUENCE_LENGTH)\n",
        new="        # have a stricter match.\n",
        repro=DYNAMO_GUARD_REPRO, layer="Dynamo", guilty="VariableBuilder.wrap_listlike",
        what=("VariableBuilder.wrap_listlike no longer installs the SEQUENCE_LENGTH guard, so a list input's items "
              "are guarded but its length is not: the entry compiled for a 2-item list is reused for a 3-item "
              "list and returns the 2-item sum, with backend='eager' and no error from the compiler")),
}


def plant(checkout: Path, bug: PlantedBug, *, commit: bool = True) -> None:
    """Edit the checkout (exactly one occurrence must match) and commit the bug on the current branch."""
    path = checkout / bug.file
    text = path.read_text()
    if text.count(bug.old) != 1:
        raise ValueError(f"{bug.file} changed in this torch: {bug.name}'s anchor matches {text.count(bug.old)} times")
    path.write_text(text.replace(bug.old, bug.new))
    if commit:
        git(checkout, "commit", "-q", "-am", bug.commit_message)


async def localize_upstream(root: Path, checkout: Path, python: Path, bug: PlantedBug, script: str) -> dict:
    """The bug planted and pushed (a remote branch holds it, so no own-change rule names it), its repro written
    as `script`, reproduced and localized (no bisection) through an MCP client: localize's result."""
    from mcp import Client

    from pt2_bug_basher.case.config import ServerConfig
    from pt2_bug_basher.mcp_server.server import create_server

    plant(checkout, bug)
    git(checkout, "update-ref", "refs/remotes/origin/main", "HEAD")
    (checkout / script).write_text(bug.repro)
    config = ServerConfig(state_dir=root / "state", default_repo=checkout, allowed_roots=(root,))
    async with Client(create_server(config)) as client:
        env = await client.call_tool("check_env", {"python": str(python), "repo": str(checkout)})
        case_id = env.structured_content["case_id"]
        run = await client.call_tool("run_with_logs", {"case_id": case_id, "script": script})
        assert run.structured_content["reproduced"], run.structured_content
        result = await client.call_tool("localize", {"case_id": case_id, "bisect_budget_s": 0})
    assert not result.is_error, result.content[0].text
    return result.structured_content


def unplant(checkout: Path, bug: PlantedBug) -> None:
    path = checkout / bug.file
    path.write_text(path.read_text().replace(bug.new, bug.old))


# Not a recipe of PLANTED (bench_bisect runs those): Dynamo's side effects, a layer no mechanism is built around.
# dict.pop on an input no longer marks the dict for reconstruction, so the replay after the graph keeps the key.
DICT_POP_ANCHOR = ("            self.should_reconstruct_all = True\n            tx.output.side_effects.mutation(self)\n"
                   "            return self.items.pop(Hashable(args[0]))")
DICT_POP_FILE = "torch/_dynamo/variables/dicts.py"


def plant_dict_pop_bug(checkout: Path) -> Path:
    """Edit the checkout in place (no commit: the caller folds it into the base or commits it); returns the file."""
    path = checkout / DICT_POP_FILE
    text = path.read_text()
    if text.count(DICT_POP_ANCHOR) != 1:
        raise ValueError("ConstDictVariable.call_method's pop changed in this torch: update DICT_POP_ANCHOR")
    path.write_text(text.replace(DICT_POP_ANCHOR, DICT_POP_ANCHOR.split("\n", 1)[1]))
    return path
